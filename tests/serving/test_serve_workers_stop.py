"""How `ragzoo serve --program ... --workers N` stops: SIGTERM to the parent (exit 0) and a terminal's Ctrl-C, which
reaches every process of the group (exit 130, as any interrupted command), stop every worker, with no traceback and
no worker left holding the port, also while the workers are still loading; a worker that dies is reported and stops
the others (exit 1) rather than leaving a server that answers a fraction of its connections; a parent killed outright
(SIGKILL, no cleanup) leaves no worker behind either. The command runs for real (`serve_workers_helper.py`), with
light workers that do not load DSPy, so each case takes a second or two."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.serving.conftest import port_is_free, wait_until

HELPER = Path(__file__).with_name("serve_workers_helper.py")


@pytest.fixture
def served(serve_process):
    """`served(workers, **env)`: the helper's `ragzoo serve --workers N` (tests/serving/conftest.py: ServeProcess)."""
    def start(workers: int | str = 2, **env: str):  # "retriever": `ragzoo serve --retriever` (no workers)
        return serve_process(str(HELPER), "{port}", str(workers), workers=workers if isinstance(workers, int) else 0,
                             **env)

    return start


def test_sigterm_to_the_parent_stops_every_worker_and_exits_0(served):
    server = served().answering()
    os.kill(server.process.pid, signal.SIGTERM)
    code, err = server.end()
    assert code == 0, err
    assert "Traceback" not in err, err
    assert wait_until(lambda: not server.live_children(), 10) and port_is_free(server.port)


def test_ctrl_c_stops_every_worker_and_exits_130_without_a_traceback(served):
    server = served().answering()
    os.killpg(server.process.pid, signal.SIGINT)  # a terminal sends Ctrl-C to its whole foreground group
    code, err = server.end()
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "ragzoo serve: interrupted" in err, err
    assert wait_until(lambda: not server.live_children(), 10) and port_is_free(server.port)


def test_ctrl_c_while_the_workers_load_exits_130_without_a_traceback(served):
    server = served(FAKE_WORKER_LOAD_SECONDS="30").started()
    time.sleep(1.0)  # the workers are inside their (long) program load
    os.killpg(server.process.pid, signal.SIGINT)
    code, err = server.end()
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert wait_until(lambda: not server.live_children(), 10) and port_is_free(server.port)


def test_a_worker_that_dies_is_reported_and_stops_the_others(served):
    server = served(workers=3).answering()
    victim = server.children[1]
    victim.kill()
    code, err = server.end()
    assert code == 1, err
    assert f"worker process {victim.pid} exited" in err and "stopping the others" in err, err
    assert wait_until(lambda: not server.live_children(), 10) and port_is_free(server.port)


def test_what_each_spawned_worker_prints_is_redacted(served):
    """A spawned worker starts from the raw streams: it must wrap its own, as the CLI does (a colbertv2 URL's
    password and an endpoint's key were printed in clear by `--workers 2` and masked by `--workers 1`)."""
    secret = "Secretpw-0123456789abcdef"
    server = served(FAKE_WORKER_SAYS=f"worker: loaded with {secret}", WORKER_TEST_API_KEY=secret).answering()
    os.kill(server.process.pid, signal.SIGTERM)
    code, err = server.end()
    assert code == 0 and secret not in err, err
    assert err.count("worker: loaded with ***") == 2, err


def test_no_worker_outlives_a_parent_killed_outright(served):
    server = served().answering()
    os.kill(server.process.pid, signal.SIGKILL)  # no cleanup of its own can run
    server.process.wait(timeout=10)
    assert wait_until(lambda: not server.live_children(), 15), server.live_children()
    assert port_is_free(server.port)


@pytest.mark.parametrize("workers", [1, 2, "retriever"])
@pytest.mark.parametrize("stop, status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_stop_while_the_program_loads_exits_as_one_after_start_up(served, workers, stop, status):
    """SIGTERM (or a terminal's Ctrl-C) before the server is up, while the parent loads the program (a big index
    can take minutes): the same exit status as a stop after start-up, one line, no traceback, nothing left running
    and the port free (was: killed by SIGTERM's default action, status 143)."""
    import psutil

    server = served(workers, FAKE_PARENT_LOAD_SECONDS="30").said("helper: loading the program")
    children = psutil.Process(server.process.pid).children(recursive=True)
    if stop == signal.SIGINT:
        os.killpg(server.process.pid, stop)
    else:
        os.kill(server.process.pid, stop)
    code, err = server.end(seconds=10)
    assert code == status, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("ragzoo serve:")]
    assert len(lines) == 1 and ("interrupted" if stop == signal.SIGINT else "stopped") in lines[0], err
    assert not [child for child in children if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
    assert port_is_free(server.port)


def test_the_parent_exits_only_once_every_process_it_started_has_exited(served):
    """Every process the parent started (its workers, multiprocessing's resource tracker) has exited and been
    waited for when the parent exits: none is handed on to another parent (`test_cli_workers_serves_one_program_
    from_several_processes` found a child still alive right after the parent's exit, 1 run of 4 under load). This
    process makes itself a subreaper for the test, so a process the parent left behind becomes its child, which is
    seen at once rather than whenever the race is lost."""
    import ctypes

    import psutil

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("this system has no child subreaper (Linux prctl)")
    orphans: list[int] = []
    try:
        server = served().answering()
        started = {child.pid for child in psutil.Process(server.process.pid).children(recursive=True)}
        assert len(started) >= 2
        os.kill(server.process.pid, signal.SIGTERM)
        code, err = server.end()
        orphans = [child.pid for child in psutil.Process().children() if child.pid in started]
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    assert code == 0, err
    assert orphans == [], f"processes the parent did not wait for: {orphans}"


@pytest.mark.parametrize("to", ["group", "parent"])
def test_sigterm_lets_the_answers_in_flight_finish_and_a_second_answers_them_503(served, to):
    """A stop (systemd, a terminal) signals the whole group: each worker gets it and then its parent's SIGTERM, one
    stop (`SAME_STOP`), so the questions in flight are waited for, as with one process; a second signal has them
    answered 503, not dropped (found by review: plain uvicorn took the parent's SIGTERM as a second signal and cut
    the connections, and the clients got no answer). Signalled alone, the parent passes the second signal on."""
    import threading

    import httpx

    server = served().answering()
    answers: list = []

    def ask():
        try:
            reply = httpx.get(f"{server.url}/hang", timeout=60)
            answers.append((reply.status_code, reply.json()))
        except httpx.HTTPError as error:
            answers.append(("dropped", repr(error)))

    askers = [threading.Thread(target=ask, daemon=True) for _ in range(3)]
    for asker in askers:
        asker.start()
    time.sleep(1.0)  # the questions reached the workers
    stop = os.killpg if to == "group" else os.kill
    stop(server.process.pid, signal.SIGTERM)
    time.sleep(2.0)  # past SAME_STOP (1 s): a second signal by then would have cut them
    assert answers == [] and server.process.poll() is None  # still waited for, within the grace
    stop(server.process.pid, signal.SIGTERM)  # a second stop: answer what is left
    code, err = server.end(seconds=20)
    for asker in askers:
        asker.join(10)
    assert [status for status, _ in answers] == [503, 503, 503], answers
    assert all("shutting down" in body["message"] for _, body in answers), answers
    assert code == 0 and "Traceback" not in err, err
    assert wait_until(lambda: not server.live_children(), 10) and port_is_free(server.port)
