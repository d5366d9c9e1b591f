"""`ragzoo serve` holds its own SIGTERM handler only while the command runs (a stop while the program or index loads
exits 0): called in-process (`ragzoo.cli.main`, a notebook, a test), it gives the caller's handler back however it
ends, and from a thread other than the main one (where Python allows no handler) it runs without one."""

from __future__ import annotations

import signal
import threading


def _caller_handler(signum, frame):  # the embedding program's own handler
    pass


def test_serve_gives_the_callers_sigterm_handler_back_when_it_ends(capsys):
    from ragzoo.cli import main

    previous = signal.signal(signal.SIGTERM, _caller_handler)
    try:
        code = main(["serve", "--port", "1", "--retriever", "nosuch:anything"])  # refused while it loads
        assert signal.getsignal(signal.SIGTERM) is _caller_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert code == 2 and "unknown retriever spec" in err and "Traceback" not in err, err


def test_serve_started_from_another_thread_refuses_bad_input_as_on_the_main_one(capsys):
    from ragzoo.cli import main

    before = signal.getsignal(signal.SIGTERM)
    codes = []
    thread = threading.Thread(target=lambda: codes.append(main(["serve", "--port", "1", "--retriever",
                                                                 "nosuch:anything"])))
    thread.start()
    thread.join(60)
    err = capsys.readouterr().err
    assert codes == [2] and "unknown retriever spec" in err and "Traceback" not in err, err
    assert signal.getsignal(signal.SIGTERM) is before
