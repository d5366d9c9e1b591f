"""A compiled program behind HTTP (`ragzoo.serving`, `ragzoo serve --program`): `POST /ask`, the OpenAI-compatible
`/v1/chat/completions` read by the real `openai` client and by `dspy.LM`, bounds, keys. The upstream LM is the
loopback stub server (or the dry-run LM through the CLI); nothing leaves this machine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from ragzoo.retrieval.server import BackgroundServer
from ragzoo.stubserver import StubLMServer

QUESTION = "Who directed the film Ed Wood?"


def _service(artifact, server: StubLMServer, monkeypatch, **options):
    import ragzoo
    from ragzoo.lm import make_lm
    from ragzoo.serving import ProgramService

    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-key-from-the-environment")
    lm = make_lm("openai/stub", api_base=server.base_url + "/v1", cache=False)
    return ProgramService(ragzoo.load(artifact), lm, name="ragzoo-rag", method="rag", **options)


def test_ask_returns_answer_passages_trace_and_usage(artifact, monkeypatch):
    from ragzoo.serving import create_app

    with StubLMServer() as lm_server:
        service = _service(artifact, lm_server, monkeypatch)
        with BackgroundServer(create_app(service)) as server:
            reply = httpx.post(server.url + "/ask", json={"question": QUESTION}, timeout=30)
            health = httpx.get(server.url + "/health").json()
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["question"] == QUESTION and body["answer"]
    assert len(body["passages"]) == 3 and all(p["pid"] and p["text"] for p in body["passages"])
    assert len(body["trace"]["lm_calls"]) == 1 and body["trace"]["lm_calls"][0]["prompt_tokens"] > 0
    assert body["trace"]["retrievals"][0]["k"] == 3
    assert body["usage"]["lm_calls"] == 1 and body["usage"]["prompt_tokens"] > 0
    assert lm_server.requests == 1
    assert health["status"] == "ok" and health["method"] == "rag" and "/" not in json.dumps(health["model"])


def test_openai_client_and_dspy_lm_use_the_program_as_a_model(artifact, monkeypatch):
    import dspy
    import openai

    from ragzoo.serving import create_app

    with StubLMServer() as lm_server:
        service = _service(artifact, lm_server, monkeypatch)
        with BackgroundServer(create_app(service)) as server:
            asked = httpx.post(server.url + "/ask", json={"question": QUESTION}, timeout=30).json()
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
            assert [m.id for m in client.models.list().data] == ["ragzoo-rag"]
            chat = client.chat.completions.create(model="ragzoo-rag", messages=[
                {"role": "system", "content": "be brief"}, {"role": "user", "content": "earlier question"},
                {"role": "assistant", "content": "earlier answer"}, {"role": "user", "content": QUESTION}])
            assert chat.choices[0].message.content == asked["answer"]  # the last user message is the question
            assert chat.usage.prompt_tokens == asked["usage"]["prompt_tokens"] and chat.usage.total_tokens > 0
            streamed = client.chat.completions.create(model="ragzoo-rag", stream=True,
                                                      messages=[{"role": "user", "content": QUESTION}])
            assert "".join(c.choices[0].delta.content or "" for c in streamed) == asked["answer"]
            lm = dspy.LM("openai/ragzoo-rag", api_base=server.url + "/v1", api_key="unused", cache=False,
                         num_retries=0)
            assert lm(QUESTION) == [asked["answer"]]


def test_bounds_are_json_errors(artifact, monkeypatch):
    from ragzoo.serving import create_app

    with StubLMServer() as lm_server:
        service = _service(artifact, lm_server, monkeypatch)
        with BackgroundServer(create_app(service, max_question_chars=100, max_body_bytes=10_000)) as server:
            cases = [
                (httpx.post(server.url + "/ask", json={"question": "x" * 101}), 413),
                (httpx.post(server.url + "/ask", content=b'{"question": "' + b"x" * 20_000 + b'"}'), 413),
                (httpx.post(server.url + "/ask", json={"question": ""}), 400),
                (httpx.post(server.url + "/ask", json=["q"]), 400),
                (httpx.post(server.url + "/ask", content=b"[" * 5000), 400),
                (httpx.get(server.url + "/nowhere"), 404),
            ]
            for response, status in cases:
                assert response.status_code == status, response.text
                assert response.json()["error"] is True and response.json()["message"]
            # why a body that is valid JSON is refused (review: "must be a JSON object" for both)
            assert "nested too deep" in cases[4][0].json()["message"]
            huge = httpx.post(server.url + "/ask", content=b'{"question": "q", "n": ' + b"9" * 5000 + b"}")
            assert huge.status_code == 400 and "more than 4,300 digits" in huge.json()["message"]
            chat = httpx.post(server.url + "/v1/chat/completions", json={"messages": [{"role": "system",
                                                                                       "content": "x"}]})
            assert chat.status_code == 400 and chat.json()["error"]["type"] == "invalid_request_error"
    assert lm_server.requests == 0  # nothing refused reached the LM


def test_beyond_concurrency_and_queue_the_server_says_503_retry_after(artifact, monkeypatch):
    from ragzoo.serving import create_app

    with StubLMServer(latency=0.6) as lm_server:
        service = _service(artifact, lm_server, monkeypatch, max_concurrency=1, max_queue=1)
        with BackgroundServer(create_app(service)) as server:
            results: list[httpx.Response] = []

            def ask():
                results.append(httpx.post(server.url + "/ask", json={"question": QUESTION}, timeout=30))

            threads = [threading.Thread(target=ask) for _ in range(4)]
            for thread in threads:
                thread.start()
                time.sleep(0.05)
            for thread in threads:
                thread.join()
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 200, 503, 503]
    busy = [r for r in results if r.status_code == 503]
    assert all(r.headers["retry-after"] == "1" and r.json()["error"] is True for r in busy)


def test_bearer_key_from_the_environment_guards_every_route_but_health(artifact, monkeypatch):
    from ragzoo.serving import API_KEY_ENV, create_app

    monkeypatch.setenv(API_KEY_ENV, "server-secret-123456")
    with StubLMServer() as lm_server:
        service = _service(artifact, lm_server, monkeypatch)
        with BackgroundServer(create_app(service)) as server:
            assert httpx.post(server.url + "/ask", json={"question": QUESTION}).status_code == 401
            assert httpx.get(server.url + "/v1/models").status_code == 401
            assert httpx.get(server.url + "/health").status_code == 200
            ok = httpx.post(server.url + "/ask", json={"question": QUESTION}, timeout=30,
                            headers={"Authorization": "Bearer server-secret-123456"})
            assert ok.status_code == 200


def test_an_upstream_failure_is_a_502_without_the_key(artifact, monkeypatch):
    from ragzoo.serving import create_app

    with StubLMServer(faults=lambda index, body: "401") as lm_server:
        service = _service(artifact, lm_server, monkeypatch)
        with BackgroundServer(create_app(service)) as server:
            reply = httpx.post(server.url + "/ask", json={"question": QUESTION}, timeout=60)
    assert reply.status_code == 502 and reply.json()["error"] is True
    assert "sk-stub-key-from-the-environment" not in reply.text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cli_serves_a_program_with_the_dry_run_lm_on_loopback(artifact, tmp_path):
    port = _free_port()
    env = {**os.environ, "RAGZOO_CACHE": os.environ.get("RAGZOO_CACHE", str(tmp_path))}
    process = subprocess.Popen([sys.executable, "-m", "ragzoo.cli", "serve", "--program", str(artifact), "--lm",
                                "dry-run", "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "ragzoo serve --program did not start"
            time.sleep(0.3)
        reply = httpx.post(f"http://127.0.0.1:{port}/ask", json={"question": QUESTION}, timeout=60).json()
        assert reply["usage"]["lm_calls"] == 1 and len(reply["passages"]) == 3
        with socket.socket() as sock:  # bound to loopback only
            sock.settimeout(1)
            addresses = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
            outside = [a for a in addresses if not a.startswith("127.")]
            if outside:
                assert sock.connect_ex((outside[0], port)) != 0
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.parametrize("flags, limit", [(["--max-concurrency", "24"], 24),
                                          (["--max-concurrency", "24", "--lm-max-concurrency", "4"], 4)])
def test_cli_lets_the_lm_keep_as_many_requests_in_flight_as_questions(artifact, monkeypatch, flags, limit):
    """Each question waits on its LM: an LM limit below the question limit would cap throughput at
    limit / latency (8 / 0.2 s = 40 q/s with make_lm's default), whatever --max-concurrency says."""
    import ragzoo.retrieval.server
    import ragzoo.serving
    from ragzoo.cli import main
    from ragzoo.endpoints import endpoint_of, limiter

    served = {}
    monkeypatch.setattr(ragzoo.serving, "create_app", lambda service: served.setdefault("service", service))
    monkeypatch.setattr(ragzoo.retrieval.server, "run_app", lambda app, **kw: served.update(kw))
    with StubLMServer() as lm_server:  # a fresh port: an endpoint limiter no other test shares
        monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")
        assert main(["serve", "--program", str(artifact), "--lm", "openai/stub", "--api-base",
                     lm_server.base_url + "/v1", *flags]) == 0
    assert limiter(endpoint_of(served["service"].lm)).limit == limit
    assert served["service"].max_concurrency == 24 and served["host"] == "127.0.0.1"
