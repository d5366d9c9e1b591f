"""Our ColBERTv2 client against a tiny scripted server: error payloads, retries, malformed answers,
timeouts, an unreachable host, caching."""

from __future__ import annotations

import socket
import time

import pytest

from ragzoo.errors import RetrieverError
from ragzoo.retrieval import make_retriever
from ragzoo.retrieval.colbertv2 import ColBERTv2Client
from ragzoo.retrieval.server import BackgroundServer

GOOD = {"query": "q", "topk": [
    {"text": "Paris | Paris is the capital of France.", "pid": 7, "rank": 1, "score": 21.5, "prob": 0.7},
    {"text": "France | France is a country.", "pid": 9, "rank": 2, "score": 20.1, "prob": 0.3},
]}


@pytest.fixture(scope="module")
def fake():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, PlainTextResponse

    app = FastAPI()
    hits = {"flaky": 0, "down": 0, "good": 0}

    @app.get("/good")
    def good(query: str, k: int):
        hits["good"] += 1
        return GOOD

    @app.get("/error")
    def error_payload(query: str, k: int):
        return {"error": True, "message": "Index not loaded"}

    @app.get("/flaky")
    def flaky(query: str, k: int):
        hits["flaky"] += 1
        if hits["flaky"] == 1:
            return JSONResponse({"error": True, "message": "busy"}, status_code=500)
        return GOOD

    @app.get("/down")
    def down(query: str, k: int):
        hits["down"] += 1
        return JSONResponse({"message": "overloaded"}, status_code=503)

    @app.get("/malformed")
    def malformed(query: str, k: int):
        return PlainTextResponse("<html>oops</html>")

    @app.get("/noschema")
    def noschema(query: str, k: int):
        return {"results": []}

    @app.get("/badrow")
    def badrow(query: str, k: int):
        return {"topk": [{"pid": 1}]}

    @app.get("/slow")
    def slow(query: str, k: int):
        time.sleep(1.0)
        return GOOD

    @app.get("/urltoolong")
    def urltoolong(query: str, k: int):
        return PlainTextResponse("URI Too Long", status_code=414)

    @app.get("/toolarge")
    def toolarge(query: str, k: int):
        return JSONResponse({"error": True, "message": "payload too large"}, status_code=413)

    with BackgroundServer(app) as server:
        server.hits = hits
        yield server


def client(fake, path, **options):
    return ColBERTv2Client(fake.url + path, backoff=0.01, **options)


def test_parses_topk(fake):
    passages = client(fake, "/good")("capital", 2)
    assert [(p.pid, p.title, p.text, p.score) for p in passages] == [
        ("7", "Paris", "Paris is the capital of France.", 21.5), ("9", "France", "France is a country.", 20.1)]
    assert passages[0].meta == {"rank": 1, "prob": 0.7}
    assert len(client(fake, "/good")("capital", 1)) == 1  # never more than k


def test_error_payload_is_an_error(fake):
    with pytest.raises(RetrieverError, match="error payload: Index not loaded"):
        client(fake, "/error")("q", 3)


def test_retries_5xx_then_succeeds(fake):
    retriever = client(fake, "/flaky", retries=2)
    assert retriever("q", 2)[0].title == "Paris"
    assert fake.hits["flaky"] == 2 and retriever.requests_sent == 2


def test_bounded_retries(fake):
    before = fake.hits["down"]
    with pytest.raises(RetrieverError, match=r"failed 3 time\(s\), last: HTTP 503: overloaded"):
        client(fake, "/down", retries=2)("q", 2)
    assert fake.hits["down"] - before == 3


@pytest.mark.parametrize("path, message", [("/malformed", "malformed JSON"), ("/noschema", "without a 'topk'"),
                                           ("/badrow", r"topk\[0\] has no 'text'"), ("/nothere", "HTTP 404")])
def test_bad_answers(fake, path, message):
    with pytest.raises(RetrieverError, match=message):
        client(fake, path)("q", 2)


def test_timeout(fake):
    with pytest.raises(RetrieverError, match="timed out after 0.2s"):
        client(fake, "/slow", timeout=0.2, retries=0)("q", 2)


def test_unreachable():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RetrieverError, match="unreachable"):
        make_retriever(f"colbertv2:http://127.0.0.1:{port}/", retries=0)("q", 2)


def test_cache_memory_and_disk(fake, tmp_path):
    first = client(fake, "/good", disk_cache=tmp_path)
    before = fake.hits["good"]
    assert first("cached query", 2) == first("cached query", 2)
    assert fake.hits["good"] - before == 1
    second = client(fake, "/good", disk_cache=tmp_path)  # a new process would read the disk cache
    assert [p.pid for p in second("cached query", 2)] == ["7", "9"]
    assert fake.hits["good"] - before == 1


def test_k_and_url_validation(fake):
    with pytest.raises(RetrieverError, match="k must be in 1..100"):
        client(fake, "/good")("q", 101)
    with pytest.raises(RetrieverError, match="http"):
        ColBERTv2Client("localhost:8893")


def test_too_long_answers_say_what_happened(fake):
    query = "q " * 600
    with pytest.raises(RetrieverError, match=r"refused a 1,200-character query: the request line or headers are "
                                             r"too long for it \(HTTP 414\); POST sends the query"):
        client(fake, "/urltoolong", retries=0)(query, 2)
    with pytest.raises(RetrieverError, match=r"refused a 1,200-character query as too large \(HTTP 413: payload "
                                             r"too large\); the server does not say its limit"):
        client(fake, "/toolarge", retries=0)(query, 2)
