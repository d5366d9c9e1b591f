"""How `ragzoo serve` stops with one process (the default `--workers 1`, both the retriever server and a `--program`
server), as the `--workers N` parent does (tests/serving/test_serve_workers_stop.py): SIGTERM shuts down cleanly and
exits 0 (uvicorn re-raised the signal once it had stopped, and SIGTERM's default action made the status 143), an
answer in flight is finished first, a second signal cuts what is still in flight (a hung LM request included: the
process does not wait for its timeout), and Ctrl-C, which a terminal sends to the whole foreground group, exits 130
as any interrupted command, with no traceback. The command runs for real, in its own session; a retriever server
over the shipped demo corpus starts in a few seconds, a program server answers from the loopback stub LM."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

import ragzoo
from ragzoo import programs
from ragzoo.stubserver import StubLMServer
from tests.serving.conftest import port_is_free, wait_until

DEMO_CORPUS = Path(ragzoo.__file__).parent / "demo_data" / "hotpotqa" / "corpus_wiki17_abstracts.jsonl"
QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"


@pytest.fixture
def served(serve_process):
    """`served(*FLAGS, **env)`: `ragzoo serve --port PORT FLAGS` (tests/serving/conftest.py: ServeProcess)."""
    def start(*flags: str, **env: str):
        return serve_process("-m", "ragzoo.cli", "serve", "--port", "{port}", *flags, **env)

    return start


def _asking(url: str) -> tuple[threading.Thread, dict]:
    """POST /ask on a thread of its own; the dict gets its status and body, or the error."""
    got: dict = {}

    def ask():
        try:
            reply = httpx.post(url + "/ask", json={"question": QUESTION}, timeout=60)
            got.update(status=reply.status_code, body=reply.json())
        except httpx.HTTPError as exc:
            got.update(error=exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread, got


@pytest.fixture
def artifact(tmp_path):
    return ragzoo.save(programs.get("direct"), tmp_path / "art", method="direct")


def _program_flags(artifact, stub) -> list[str]:
    return ["--program", str(artifact), "--lm", "openai/stub-model", "--api-base", stub.base_url + "/v1",
            "--no-cache"]


def test_sigterm_stops_a_retriever_server_cleanly_with_status_0(served):
    server = served("--retriever", f"bm25:{DEMO_CORPUS}").healthy()
    os.kill(server.process.pid, signal.SIGTERM)
    code, err = server.end()
    assert code == 0, err
    assert "Traceback" not in err, err
    assert port_is_free(server.port)


def test_ctrl_c_stops_a_retriever_server_with_status_130(served):
    server = served("--retriever", f"bm25:{DEMO_CORPUS}").healthy()
    os.killpg(server.process.pid, signal.SIGINT)
    code, err = server.end()
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "ragzoo serve: interrupted" in err, err
    assert port_is_free(server.port)


@pytest.mark.slow  # the server imports DSPy and loads the program: ~8-15 s on a shared 2-core machine
def test_sigterm_finishes_the_answer_in_flight_a_second_cuts_the_one_stuck_at_the_lm_then_exit_0(served, artifact):
    # two questions at the LM: one answered after 2 s, one never (until the stub stops; the LM timeout is 120 s)
    with StubLMServer(latency=2.0, faults=lambda index, body: "hang" if index == 1 else None) as stub:
        server = served(*_program_flags(artifact, stub), OPENAI_API_KEY="sk-stub").healthy()
        asked = [_asking(server.url) for _ in range(2)]
        assert wait_until(lambda: stub.requests >= 2, 30), [got for _, got in asked]
        os.kill(server.process.pid, signal.SIGTERM)
        assert wait_until(lambda: any(got for _, got in asked), 15), asked  # the answer in flight was finished...
        time.sleep(0.5)
        assert server.process.poll() is None  # ...and the server still waits for the other one
        os.kill(server.process.pid, signal.SIGTERM)  # a second signal: no more waiting
        code, err = server.end(seconds=15)
        for thread, _ in asked:
            thread.join(timeout=10)
    replies = sorted((got.get("status"), got.get("body", {}).get("message", "")) for _, got in asked)
    assert [status for status, _ in replies] == [200, 503] and "shutting down" in replies[1][1], replies
    assert code == 0, err
    assert "Traceback" not in err, err
    assert "1 question" in err and "cut" in err, err  # its thread is not waited for
    assert port_is_free(server.port)


@pytest.mark.slow  # the server imports DSPy and loads the program: ~8-15 s on a shared 2-core machine
def test_ctrl_c_twice_cuts_an_answer_stuck_at_the_lm_and_exits_130(served, artifact):
    with StubLMServer(faults=["hang"]) as stub:
        server = served(*_program_flags(artifact, stub), OPENAI_API_KEY="sk-stub").healthy()
        thread, got = _asking(server.url)
        assert wait_until(lambda: stub.requests >= 1, 30), got
        os.killpg(server.process.pid, signal.SIGINT)  # a terminal sends Ctrl-C to its whole foreground group
        time.sleep(1.0)
        assert server.process.poll() is None  # the first Ctrl-C waits for the answer in flight
        os.killpg(server.process.pid, signal.SIGINT)
        code, err = server.end(seconds=15)
        thread.join(timeout=10)
    assert got.get("status") == 503 and "shutting down" in got["body"]["message"], got  # answered, not dropped
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "ragzoo serve: interrupted" in err and "1 question" in err, err
    assert port_is_free(server.port)


def test_a_search_stuck_upstream_is_answered_503_by_a_second_signal_without_a_traceback(served):
    """Review: a search waiting on a hung ColBERTv2 upstream, cut by the stop, printed asyncio's CancelledError
    traceback ("Exception in ASGI application") and sent a bare 500; it is answered 503, in JSON, in one line."""
    import socket

    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(8)
    held: list = []

    def accept():  # takes the connection, reads the request, never answers
        while True:
            try:
                connection, _ = upstream.accept()
            except OSError:
                return
            held.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{upstream.getsockname()[1]}/search"
        server = served("--retriever", f"colbertv2:{url}").healthy()
        got: dict = {}

        def search():
            try:
                reply = httpx.get(server.url + "/", params={"query": "who?", "k": 2}, timeout=60)
                got.update(status=reply.status_code, body=reply.json())
            except (httpx.HTTPError, ValueError) as exc:
                got.update(error=repr(exc))

        thread = threading.Thread(target=search, daemon=True)
        thread.start()
        assert wait_until(lambda: held, 15)
        os.kill(server.process.pid, signal.SIGTERM)
        time.sleep(0.5)
        os.kill(server.process.pid, signal.SIGTERM)
        code, err = server.end(seconds=15)
        thread.join(timeout=10)
    finally:
        upstream.close()
        for connection in held:
            connection.close()
    assert got.get("status") == 503 and "stopping" in got["body"]["message"], got
    assert code == 0 and "Traceback" not in err and "CancelledError" not in err, err
