"""A stopped compile stops (the guide's "a stop that does not stop", found again by review): Ctrl-C or SIGTERM
while a compile's scoring threads wait on a hung LM printed "stopped" at once, then the process kept taking its
queued questions to the LM (32 new requests) and exited only after the LM timeout (75-200 s). The rule is in the
CLI: from the stop on, no metered LM call is sent (`errors.STOPPING`), and the `ragzoo` process leaves the threads
still inside a hung call after `cli.STUCK_GRACE` seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ragzoo.errors import STOPPING, Stopping
from ragzoo.stubserver import StubLMServer


def test_a_threaded_compile_at_a_hung_lm_stops_at_once_and_sends_nothing_more(tmp_path):
    signum = signal.SIGTERM  # Ctrl-C takes the same path (the CLI's KeyboardInterrupt)
    with StubLMServer(faults=lambda index, body: "hang") as server:
        command = [sys.executable, "-m", "ragzoo", "compile", "--method", "rag", "--dataset", "hotpotqa",
                   "--train-n", "3", "--dev-n", "12", "--no-cache", "--lm", "openai/stub-model", "--api-base",
                   server.base_url + "/v1", "--timeout", "60", "--optimizer", "none", "--threads", "4",
                   "--out", str(tmp_path / "c")]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "OPENAI_API_KEY": "sk-test"})
        deadline = time.monotonic() + 60
        while server.requests < 4 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert server.requests == 4, process.communicate(timeout=5)
        process.send_signal(signum)
        signalled = time.monotonic()
        out, err = process.communicate(timeout=30)
        took = time.monotonic() - signalled
        after = server.requests
    assert process.returncode == 128 + signum and took < 8, (process.returncode, took, err)
    assert after == 4, f"{after - 4} requests were sent after the stop"
    said = [line for line in err.splitlines() if line.startswith("ragzoo compile:")]
    assert len(said) == 1 and ("stopped (SIGTERM)" in said[0] or "interrupted" in said[0]), err
    assert "Traceback" not in err


def test_a_metered_call_is_refused_while_a_command_stops_and_not_after():
    from ragzoo.lm import make_lm

    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        STOPPING.set()
        try:
            with pytest.raises(Stopping):
                lm("a question")
        finally:
            STOPPING.clear()
        assert server.requests == 0
        assert lm("a question") and server.requests == 1


def test_a_pool_thread_whose_call_is_refused_by_a_stop_ends_without_a_traceback(monkeypatch):
    """The grid's stop test printed an evaluate thread's traceback: a refused call (`Stopping`) ended the pool
    thread through threading's excepthook."""
    import threading

    from ragzoo.runs import run_threads

    reported, done = [], []
    monkeypatch.setattr(threading, "excepthook", lambda hook: reported.append(hook.exc_type))

    def work(item):
        if item == 1:
            raise Stopping("the command is stopping")
        done.append(item)

    assert run_threads(work, [0, 1, 2, 3], threads=2) == 0
    assert reported == [] and 0 in done and 1 not in done


def test_after_an_in_process_command_was_stopped_the_callers_own_calls_go_through(monkeypatch):
    """Diff review: a library caller (a notebook) that ran a CLI command which was interrupted had every later LM
    call refused, and a library evaluate then wrote an empty run with no error."""
    import ragzoo.commands.evaluate as evaluate_command
    from ragzoo.cli import main
    from ragzoo.lm import make_lm

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate_command, "run", interrupted)
    assert main(["evaluate", "--method", "direct", "--dataset", "hotpotqa", "-n", "1", "--lm", "dry-run"]) == 130
    assert not STOPPING.is_set()
    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        assert lm("a question") and server.requests == 1
