"""How `ragzoo serve --program ... --workers N` stops: SIGTERM to the parent (exit 0) and a terminal's Ctrl-C, which
reaches every process of the group (exit 130, as any interrupted command), stop every worker, with no traceback and
no worker left holding the port, also while the workers are still loading; a worker that dies is reported and stops
the others (exit 1) rather than leaving a server that answers a fraction of its connections; a parent killed outright
(SIGKILL, no cleanup) leaves no worker behind either. The command runs for real (`serve_workers_helper.py`), with
light workers that do not load DSPy, so each case takes a second or two."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

HELPER = Path(__file__).with_name("serve_workers_helper.py")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_is_free(port: int) -> bool:
    """Nothing listens on the port any more: a plain socket (no SO_REUSEPORT) can listen there."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
        return True


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Served:
    """The command in its own session (its own process group, as a terminal's foreground job)."""

    def __init__(self, workers: int = 2, **env: str):
        self.port = _free_port()
        self.process = subprocess.Popen([sys.executable, str(HELPER), str(self.port), str(workers)],
                                        env={**os.environ, **env}, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self.workers = workers
        self.children: list[psutil.Process] = []

    def started(self) -> "Served":
        """Once every worker process is there (they may still be loading)."""
        parent = psutil.Process(self.process.pid)

        def workers():  # not multiprocessing's resource tracker, the parent's other child
            found = []
            for child in parent.children():
                try:
                    if any("spawn_main" in part for part in child.cmdline()):
                        found.append(child)
                except psutil.NoSuchProcess:
                    pass
            return found

        assert _wait(lambda: len(workers()) >= self.workers or self.process.poll() is not None, 60)
        assert self.process.poll() is None, self.process.stderr.read()
        self.children = workers()
        return self

    def answering(self) -> "Served":
        """Once every worker has answered a connection."""
        self.started()
        seen: set[int] = set()

        def all_answered():
            try:
                seen.add(httpx.get(f"http://127.0.0.1:{self.port}/", timeout=2,
                                   headers={"Connection": "close"}).json()["worker"])
            except httpx.TransportError:
                pass
            return seen >= {child.pid for child in self.children}

        assert _wait(all_answered, 60), (seen, self.children)
        return self

    def end(self, seconds: float = 30) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=seconds)
        finally:
            self.kill_all()
        return code, self.process.stderr.read()

    def live_children(self) -> list[psutil.Process]:
        return [child for child in self.children if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]

    def kill_all(self) -> None:
        """Whatever a failed test left running."""
        for proc in [self.process, *self.children]:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
        self.process.wait(timeout=10)


@pytest.fixture
def served():
    started: list[Served] = []

    def start(workers: int = 2, **env) -> Served:
        started.append(Served(workers, **env))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None or server.live_children():
            server.kill_all()


def test_sigterm_to_the_parent_stops_every_worker_and_exits_0(served):
    server = served().answering()
    os.kill(server.process.pid, signal.SIGTERM)
    code, err = server.end()
    assert code == 0, err
    assert "Traceback" not in err, err
    assert _wait(lambda: not server.live_children(), 10) and _port_is_free(server.port)


def test_ctrl_c_stops_every_worker_and_exits_130_without_a_traceback(served):
    server = served().answering()
    os.killpg(server.process.pid, signal.SIGINT)  # a terminal sends Ctrl-C to its whole foreground group
    code, err = server.end()
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "ragzoo serve: interrupted" in err, err
    assert _wait(lambda: not server.live_children(), 10) and _port_is_free(server.port)


def test_ctrl_c_while_the_workers_load_exits_130_without_a_traceback(served):
    server = served(FAKE_WORKER_LOAD_SECONDS="30").started()
    time.sleep(1.0)  # the workers are inside their (long) program load
    os.killpg(server.process.pid, signal.SIGINT)
    code, err = server.end()
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert _wait(lambda: not server.live_children(), 10) and _port_is_free(server.port)


def test_a_worker_that_dies_is_reported_and_stops_the_others(served):
    server = served(workers=3).answering()
    victim = server.children[1]
    victim.kill()
    code, err = server.end()
    assert code == 1, err
    assert f"worker process {victim.pid} exited" in err and "stopping the others" in err, err
    assert _wait(lambda: not server.live_children(), 10) and _port_is_free(server.port)


def test_no_worker_outlives_a_parent_killed_outright(served):
    server = served().answering()
    os.kill(server.process.pid, signal.SIGKILL)  # no cleanup of its own can run
    server.process.wait(timeout=10)
    assert _wait(lambda: not server.live_children(), 15), server.live_children()
    assert _port_is_free(server.port)
