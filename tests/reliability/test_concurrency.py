"""`--threads 16` gives the same predictions as `--threads 1` with a deterministic stub LM (answers depend on
the prompt: question and passages), through the CLI and the real dspy.LM; predictions compared by id."""

from __future__ import annotations

import json

import pytest

from ragzoo.stubserver import StubLMServer

N = 24


def _by_id(run):
    lines = (run / "predictions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len({r["id"] for r in records}) == N
    return {r["id"]: (r["prediction"], r["passages"], r["metrics"], r["lm_calls"], r["error"]) for r in records}


@pytest.mark.parametrize("method", ["rag", "concat_pf"])
def test_threads_16_equal_threads_1(tmp_path, cli, monkeypatch, questions_file, small_corpus, helpers, method):
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    data = questions_file(N)
    runs, requests = {}, {}
    for threads in (1, 16):
        with StubLMServer(responder=helpers.digest_responder, latency=0.005) as server:
            result = cli("evaluate", "--method", method, "--knob", "k=3", "--retriever", f"bm25:{small_corpus}",
                         "--data", data, "--lm", "openai/stub", "--api-base", server.base_url + "/v1",
                         "--out", tmp_path / f"t{threads}", "--threads", threads, "--no-cache")
            assert result.code == 0, result.err
            requests[threads] = server.requests
        runs[threads] = _by_id(tmp_path / f"t{threads}")
    assert runs[1] == runs[16]
    assert requests[1] == requests[16] >= N
    answers = {prediction for prediction, *_ in runs[1].values()}
    assert len(answers) > N // 2  # the stub's answers differ per question: a mix-up between threads would show
    assert all(error is None for *_, error in runs[1].values())
    summaries = [json.loads((tmp_path / f"t{t}" / "summary.json").read_text()) for t in (1, 16)]
    assert summaries[0]["metrics"] == summaries[1]["metrics"] and summaries[1]["threads"] == 16
    assert summaries[0]["usage"]["lm_calls"] == summaries[1]["usage"]["lm_calls"]
