"""The ColBERTv2-compatible server: queried over loopback by DSPy's own client and by ours; bounds and
error bodies through FastAPI's test client."""

from __future__ import annotations

import json
import math

import pytest

from ragzoo.retrieval import make_retriever
from ragzoo.retrieval.server import BackgroundServer, create_app, softmax

DOCS = [
    {"id": "p1", "title": "Kerensky", "text": "Alexander Kerensky led the Russian Provisional Government."},
    {"id": "p2", "title": "Bolsheviks", "text": "The Bolsheviks seized power in Russia in October 1917."},
    {"id": "p3", "title": "Volga", "text": "The Volga is the longest river in Europe."},
    {"id": "p4", "title": "Moscow", "text": "Moscow is the capital of Russia, on the Moskva river."},
]


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    path = tmp_path_factory.mktemp("server") / "corpus.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    return make_retriever(f"bm25:{path}", show_progress=False)


@pytest.fixture(scope="module")
def server(retriever):
    with BackgroundServer(create_app(retriever, extra_paths=("/api/search",))) as running:
        yield running


def test_dspy_colbertv2_client_reads_our_server(server, retriever):
    import dspy

    expected = retriever("Russian river", 3)
    for client in (dspy.ColBERTv2(url=server.url), dspy.ColBERTv2(url=server.url + "/api/search", post_requests=True)):
        results = client("Russian river", k=3)
        assert [r["text"] for r in results] == [p.long_text for p in expected]
        assert [r["pid"] for r in results] == [p.pid for p in expected]
        assert [r["rank"] for r in results] == [1, 2, 3]
        assert math.isclose(sum(r["prob"] for r in results), 1.0, rel_tol=1e-6)
    assert dspy.ColBERTv2(url=server.url)("Russian river", k=2, simplify=True) == [p.long_text for p in expected[:2]]


def test_our_client_reads_our_server(server, retriever):
    for spec, options in ((f"colbertv2:{server.url}", {}), (f"colbertv2:{server.url}/api/search", {"post": True})):
        client = make_retriever(spec, **options)
        got = client("Russia river", 2)
        want = retriever("Russia river", 2)
        assert [(p.pid, p.title, p.text) for p in got] == [(p.pid, p.title, p.text) for p in want]
        assert [p.meta["rank"] for p in got] == [1, 2]
        assert got[0].score == pytest.approx(want[0].score)


def test_health_and_bounds(retriever):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(retriever, max_query_chars=50))
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["num_docs"] == 4 and health["max_k"] == 100
    answer = client.get("/", params={"query": "Volga river", "k": 2}).json()
    assert answer["query"] == "Volga river" and answer["topk"][0]["text"] == "Volga | The Volga is the longest river in Europe."
    assert [t["prob"] for t in answer["topk"]] == pytest.approx(softmax([t["score"] for t in answer["topk"]]))
    cases = [({"query": "river", "k": 0}, 400), ({"query": "river", "k": 101}, 400), ({"query": "river", "k": "x"}, 400),
             ({"query": "   ", "k": 3}, 400), ({"k": 3}, 400), ({"query": "x" * 51, "k": 3}, 413)]
    for params, status in cases:
        response = client.get("/", params=params)
        assert response.status_code == status, params
        assert response.json()["error"] is True and response.json()["message"]
    assert client.post("/", json={"query": "river", "k": 500}).status_code == 400
    assert client.post("/", content=b"not json", headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/", json=["river"]).status_code == 400
    assert client.post("/", json={"query": "Moscow capital"}).json()["topk"][0]["pid"] == "p4"  # default k


def test_softmax():
    assert softmax([]) == []
    assert softmax([1000.0, 1000.0]) == [0.5, 0.5]  # no overflow on large scores
