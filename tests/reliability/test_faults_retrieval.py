"""Retrieval-server faults seen by the `colbertv2:` client inside an evaluation: down (connection refused),
slow (read timeout), an error payload (HTTP 200 with {"error": true}), a wrong schema, malformed JSON.
Each is recorded per example as a retriever error, scored 0, and the run goes on."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import dspy
import pytest

from ragzoo import programs
from ragzoo.lm import make_lm
from ragzoo.retrieval import make_retriever
from ragzoo.runs import evaluate
from ragzoo.testing import LoopbackHTTPServer

BAD = "item 1?"


class FaultyColBERT(LoopbackHTTPServer):
    """A loopback ColBERTv2 REST server that answers well, except for queries containing BAD (`mode`)."""

    def __init__(self, mode: str, slow_seconds: float = 1.0):
        self.mode = mode
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                outer.requests += 1
                params = parse_qs(urlsplit(self.path).query)
                query = params.get("query", [""])[0]
                k = int(params.get("k", ["3"])[0])
                good = {"query": query, "topk": [{"text": f"Doc {i} | about {query}", "pid": i, "rank": i + 1,
                                                  "score": 10.0 - i, "prob": 0.1} for i in range(k)]}
                payload: object = good
                if BAD in query:
                    if outer.mode == "error_payload":
                        payload = {"error": True, "message": "Internal error: index shard unavailable"}
                    elif outer.mode == "wrong_schema":
                        payload = {"results": [{"passage": "x", "id": 1}]}
                    elif outer.mode == "wrong_item":
                        payload = {"query": query, "topk": [{"pid": 1, "score": "high"}]}
                    elif outer.mode == "malformed":
                        data = b'{"topk": [{"text": "cut'
                        self._send(200, data)
                        return
                    elif outer.mode == "slow":
                        time.sleep(slow_seconds)
                self._send(200, json.dumps(payload).encode())

            def _send(self, status, data):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout) and closed the connection
                    pass

        super().__init__(Handler)
        self.url = self.base_url + "/"


def _examples(n=3):
    return [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answers=[f"answer {i}"]).with_inputs("question")
            for i in range(n)]


def _evaluate(url, n=3, **client):
    retriever = make_retriever("colbertv2:" + url, timeout=client.pop("timeout", 0.3),
                               retries=client.pop("retries", 1), backoff=0.0)
    program = programs.get("rag", retriever=retriever, k=3)
    with dspy.context(lm=make_lm("dry-run")):
        summary = evaluate(program, _examples(n), "em", None, progress=False)
    return retriever, summary, {r["id"]: r for r in summary["records"]}


@pytest.mark.parametrize("mode", ["error_payload", "wrong_schema", "wrong_item", "malformed", "slow"])
def test_bad_answer_for_one_query_is_a_retriever_error_of_that_example(mode):
    with FaultyColBERT(mode) as server:
        retriever, summary, records = _evaluate(server.url)
    assert sorted(records) == ["q0", "q1", "q2"]
    bad = records["q1"]
    assert bad["error"]["kind"] == "retriever", bad["error"]
    assert bad["metrics"]["em"] == 0.0 and bad["prediction"] is None and bad["lm_calls"] == 0
    assert records["q0"]["error"] is None and records["q2"]["error"] is None
    assert len(records["q2"]["passages"]) == 3
    assert summary["failures_by_kind"] == {"retriever": 1}
    if mode == "slow":  # a timeout is retried (bounded), then given up
        assert retriever.requests_sent == 2 + 2  # q0, q2 once; q1 once + 1 retry
    if mode == "error_payload":
        assert "error payload" in bad["error"]["message"]


def test_server_down_every_example_recorded_and_run_finishes():
    with socket.socket() as probe:  # a free port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    retriever, summary, records = _evaluate(f"http://127.0.0.1:{port}/", n=4)
    assert time.perf_counter() - started < 10  # connection refused is not retried for long
    assert sorted(records) == ["q0", "q1", "q2", "q3"]
    assert all(r["error"]["kind"] == "retriever" for r in records.values())
    assert "unreachable" in records["q0"]["error"]["message"]
    assert summary["failures_by_kind"] == {"retriever": 4} and summary["complete"] is True


def test_cli_evaluate_with_a_down_server_writes_a_complete_run(tmp_path, cli, questions_file):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = cli("evaluate", "--method", "rag", "--retriever", f"colbertv2:http://127.0.0.1:{port}/",
                 "--data", questions_file(3), "--lm", "dry-run", "--out", tmp_path / "run", "--allow-failures")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    lines = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in lines] == ["q0", "q1", "q2"]
    assert all(r["error"]["kind"] == "retriever" for r in lines)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures_by_kind"] == {"retriever": 3}
