"""Programs served by the serving tests: a saved `rag` artifact (for `ragzoo serve` and ProgramService) and an
in-memory `rag` over five static passages."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, wiki17_corpus):
    import ragzoo
    from ragzoo import programs
    from ragzoo.retrieval import make_retriever
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    # a spec relative to RAGZOO_DATA: the kind of retriever an artifact may name without --trust-retriever
    retriever = make_retriever(DEFAULT_RETRIEVER, show_progress=False)
    out = tmp_path_factory.mktemp("served") / "rag"
    ragzoo.save(programs.get("rag", retriever=retriever, k=3), out, method="rag")
    return out


@pytest.fixture(scope="module")
def program():
    from ragzoo import programs
    from ragzoo.testing import StaticRetriever, make_passages

    return programs.get("rag", retriever=StaticRetriever(make_passages(5)), k=3)


# -- `ragzoo serve` as a real process, for the stop tests (test_serve_single_stop.py, test_serve_workers_stop.py) --


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Nothing listens on the port any more: a plain socket (no SO_REUSEPORT) can listen there."""
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
        return True


def wait_until(condition, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class ServeProcess:
    """`python ARGS` (an ARGS item "{port}" becomes a free loopback port) in its own session: its own process
    group, as a terminal's foreground job, so a test can send it Ctrl-C as a terminal does (`os.killpg`)."""

    def __init__(self, args: tuple[str, ...], env: dict, workers: int = 0):
        import os
        import subprocess
        import sys

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.children: list = []  # psutil.Process of each worker, once `started`
        self.process = subprocess.Popen([sys.executable, *(str(self.port) if a == "{port}" else a for a in args)],
                                        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, start_new_session=True)

    def healthy(self) -> "ServeProcess":
        """Once GET /health answers 200."""
        import httpx

        def up():
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_until(lambda: up() or self.process.poll() is not None, 90)
        assert self.process.poll() is None, self.process.stderr.read()
        return self

    def started(self) -> "ServeProcess":
        """Once every worker process is there (they may still be loading)."""
        import psutil

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

        assert wait_until(lambda: len(workers()) >= self.workers or self.process.poll() is not None, 60)
        assert self.process.poll() is None, self.process.stderr.read()
        self.children = workers()
        return self

    def answering(self) -> "ServeProcess":
        """Once every worker has answered a connection (the light workers of serve_workers_helper.py)."""
        import httpx

        self.started()
        seen: set[int] = set()

        def all_answered():
            try:
                seen.add(httpx.get(self.url + "/", timeout=2, headers={"Connection": "close"}).json()["worker"])
            except httpx.TransportError:
                pass
            return seen >= {child.pid for child in self.children}

        assert wait_until(all_answered, 60), (seen, self.children)
        return self

    def said(self, text: str, seconds: float = 60) -> "ServeProcess":
        """Once its stderr has a line holding `text` (the lines read are kept for `end`)."""
        import select
        import time

        self._read = getattr(self, "_read", "")
        deadline = time.monotonic() + seconds
        while text not in self._read:
            assert self.process.poll() is None and time.monotonic() < deadline, self._read
            if select.select([self.process.stderr], [], [], 0.1)[0]:
                self._read += self.process.stderr.readline()
        return self

    def end(self, seconds: float = 30) -> tuple[int, str]:
        """Its exit status and stderr, once it exited by itself within `seconds` (else it is killed: a failure)."""
        import subprocess

        import pytest

        try:
            code = self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"ragzoo serve still ran {seconds:g} s after it was told to stop: {self.process.stderr.read()}")
        return code, getattr(self, "_read", "") + self.process.stderr.read()

    def live_children(self) -> list:
        import psutil

        live = []
        for child in self.children:
            try:
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    live.append(child)
            except psutil.NoSuchProcess:
                pass
        return live

    def kill_all(self) -> None:
        """Whatever a failed test left running: its process group and its workers."""
        import os
        import signal

        for kill in (lambda: os.killpg(self.process.pid, signal.SIGKILL),
                     *(lambda pid=child.pid: os.kill(pid, signal.SIGKILL) for child in self.children)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait(timeout=10)


@pytest.fixture
def serve_process():
    """`serve_process(*args, workers=0, **env)` starts a ServeProcess; the test's leftovers are killed after it."""
    started: list[ServeProcess] = []

    def start(*args: str, workers: int = 0, **env: str) -> ServeProcess:
        started.append(ServeProcess(args, env, workers))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None or server.live_children():
            server.kill_all()
