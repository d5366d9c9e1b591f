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


# -- query length: what BlendFilter sends ----------------------------------------------------------------
QUESTION = "Which river flows through the capital of Russia, and is it longer than the Volga?"
BLENDED = (" ".join(["Reasoning: Moscow is the capital of Russia and lies on the Moskva river, a tributary "
                     "that joins the Oka and then the Volga, the longest river in Europe."] * 20)
           + " " + QUESTION)  # a chain-of-thought answer blended with the question, as BlendFilter retrieves


def test_blended_query_of_3000_chars_is_answered_through_the_server(server, retriever):
    import dspy

    assert 3000 <= len(BLENDED) <= 3200
    want = [p.pid for p in retriever(BLENDED, 3)]
    assert want and want[0] in {"p3", "p4"}
    for options in ({}, {"post": True}):
        client = make_retriever(f"colbertv2:{server.url}", **options)
        assert [p.pid for p in client(BLENDED, 3)] == want
    assert [r["pid"] for r in dspy.ColBERTv2(url=server.url)(BLENDED, k=3)] == want


def test_over_limit_query_is_a_clear_client_error(retriever):
    from ragzoo.errors import RetrieverError

    with BackgroundServer(create_app(retriever, max_query_chars=1000)) as small:
        for options in ({}, {"post": True}):
            client = make_retriever(f"colbertv2:{small.url}", retries=0, **options)
            with pytest.raises(RetrieverError) as caught:
                client(BLENDED, 3)
            message = str(caught.value)
            assert f"{len(BLENDED):,}-character query" in message
            assert "limit is 1,000 characters" in message and "--max-query-chars" in message
            assert client.requests_sent == 1  # a 413 is not retried


def test_over_limit_query_is_cut_where_the_backend_cuts_anyway(retriever):
    from fastapi.testclient import TestClient

    from ragzoo.retrieval.base import BaseRetriever

    class TokenBudget(BaseRetriever):  # a backend that reads only a query's first 200 characters
        spec = "colbert:/secret/place/index"
        seen: list[str] = []

        def truncate_query(self, query):
            return query[:200]

        def _search(self, query, k):
            self.seen.append(query)
            return retriever(query, k)

    backend = TokenBudget()
    client = TestClient(create_app(backend, max_query_chars=1000))
    answer = client.get("/", params={"query": BLENDED, "k": 2})
    assert answer.status_code == 200 and answer.json()["topk"]
    assert backend.seen == [BLENDED[:200]]
    assert client.post("/", json={"query": BLENDED, "k": 2}).status_code == 200
    health = client.get("/health").json()
    assert health["max_query_chars"] == 1000 and "/secret" not in json.dumps(health)  # no paths in public answers
    # a backend that reads every character (bm25) is never cut: the query is refused instead
    refused = TestClient(create_app(retriever, max_query_chars=1000)).get("/", params={"query": BLENDED, "k": 2})
    assert refused.status_code == 413
    assert refused.json()["max_query_chars"] == 1000 and refused.json()["query_chars"] == len(BLENDED)


@pytest.mark.parametrize("k", [2.5, "2.5", 2.0, "2.0", True, "1e3", "", None, [3], 1e400])
def test_k_follows_one_rule_for_get_and_post(retriever, k):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(retriever))
    post = client.post("/", content=json.dumps({"query": "river", "k": k}).replace("Infinity", "1e400"),
                       headers={"content-type": "application/json"})
    assert post.status_code == 400 and "integer in 1..100" in post.json()["message"]
    if k is not None and not isinstance(k, list):
        get = client.get("/", params={"query": "river", "k": str(k)})
        assert get.status_code == 400 and get.json()["error"] is True


def test_k_integers_work_both_ways_and_abuse_is_a_4xx(retriever):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(retriever, max_query_chars=100))
    assert len(client.get("/", params={"query": "river", "k": "2"}).json()["topk"]) == 2
    assert len(client.post("/", json={"query": "river", "k": 2}).json()["topk"]) == 2
    nested = client.post("/", content=b"[" * 30_000 + b"]" * 30_000, headers={"content-type": "application/json"})
    assert nested.status_code == 400 and nested.json()["error"] is True
    huge = client.post("/", content=b'{"query": "' + b"x" * 2_000_000 + b'"}',
                       headers={"content-type": "application/json"})
    assert huge.status_code == 413 and huge.json()["error"] is True


def test_serve_help_shows_defaults_and_takes_the_query_limit(monkeypatch, capsys):
    import ragzoo.retrieval.server as server_module
    from ragzoo.cli import build_parser, main
    from ragzoo.retrieval.server import MAX_QUERY_CHARS
    from ragzoo.retrieval.specs import DEFAULT_RETRIEVER

    assert MAX_QUERY_CHARS >= 8000
    for command, expected in (("serve", ["default: 8893", "default: 127.0.0.1", f"default: {MAX_QUERY_CHARS}",
                                         f"default: {DEFAULT_RETRIEVER}"]),
                              ("search", ["default: 5", f"default: {DEFAULT_RETRIEVER}"])):
        _parser, subparsers = build_parser(command)
        text = " ".join(subparsers[command].format_help().split())
        for piece in expected:
            assert piece in text, (command, piece)
    _parser, subparsers = build_parser("index")
    build_help = subparsers["index"]._subparsers._group_actions[0].choices["build"].format_help()
    assert "default: bm25" in " ".join(build_help.split())
    served = {}
    monkeypatch.setattr(server_module, "serve", lambda retriever, **options: served.update(options))
    assert main(["serve", "--retriever", "fixed", "--max-query-chars", "0"]) == 2
    assert "--max-query-chars 0: expected an integer with --max-query-chars >= 1" in capsys.readouterr().err
    monkeypatch.setattr("ragzoo.retrieval.specs.make_retriever", lambda spec: object())
    assert main(["serve", "--max-query-chars", "12345", "--port", "9999"]) == 0
    assert served["max_query_chars"] == 12345 and served["port"] == 9999 and served["host"] == "127.0.0.1"


@pytest.mark.parametrize("spec", ["ColBERTv2:http://127.0.0.1:18861/search?api_key=S3cretPassw0rdXYZ",
                                  "COLBERTV2:http://h:1/a/hf_AbCdEfGh1234567890",
                                  "colbertv2:http://alice:S3cretPassw0rdXYZ@h:1/search"])
def test_health_names_no_upstream_url_or_key_whatever_the_scheme_s_case(spec):
    """Review: the spec parser reads the scheme in any case; /health compared it in lower case only and showed the
    last path segment and the query string (a key) of `ColBERTv2:...`."""
    from ragzoo.retrieval.base import BaseRetriever
    from ragzoo.retrieval.server import public_spec

    class Upstream(BaseRetriever):
        def _search(self, query, k):
            return []

    backend = Upstream()
    backend.spec = spec
    assert public_spec(backend) == "colbertv2"


def test_a_failed_search_s_message_is_redacted_in_the_servers_answer(monkeypatch, retriever):
    """Review: an upstream's error payload quoting credentials reached the client in the server's 500 body (the CLI
    redacted its own output; the HTTP answer was not)."""
    from fastapi.testclient import TestClient

    from ragzoo.errors import RetrieverError
    from ragzoo.retrieval.base import BaseRetriever

    monkeypatch.setenv("UPSTREAM_API_KEY", "S3cretPassw0rdXYZ")

    class Failing(BaseRetriever):
        spec = "bm25:corpus.jsonl"

        def _search(self, query, k):
            raise RetrieverError("upstream said: index not loaded for key S3cretPassw0rdXYZ (Bearer abc123def456)")

    answer = TestClient(create_app(Failing())).get("/", params={"query": "river", "k": 2})
    assert answer.status_code == 500 and "index not loaded" in answer.json()["message"]
    assert "S3cretPassw0rdXYZ" not in answer.text and "abc123def456" not in answer.text
