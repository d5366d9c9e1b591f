"""LM faults through the real dspy.LM against the loopback stub server, inside an evaluation.

Each fault: retried where it should be (bounded: 1 + num_retries requests, with the server's Retry-After or
exponential back-off), recorded per example where it is final (error kind), scored 0, the run goes on, and
the summary counts failures by kind. DSPy's back-off sleep is recorded, not slept (fixture `retry_delays`)."""

from __future__ import annotations

import json
import threading

import dspy
import pytest

from ragzoo import programs
from ragzoo.lm import make_lm
from ragzoo.runs import evaluate
from ragzoo.stubserver import StubLMServer

NUM_RETRIES = 2
BAD = "item 1?"  # the fault hits every request about question q1 only


def _examples(n: int = 3):
    return [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answers=[f"answer {i}"]).with_inputs("question")
            for i in range(n)]


def _requests_about(server, body_log, needle):
    return sum(1 for text in body_log if needle in text)


def _run(fault, *, transient: int | None = None, n: int = 3, timeout: float = 0.4, threads: int = 1):
    """Evaluate `direct` on n questions; q1's requests get `fault` (all of them, or only the first `transient`)."""
    seen: dict[str, int] = {}
    bodies: list[str] = []
    lock = threading.Lock()

    def faults(index, body):
        text = json.dumps(body)
        with lock:
            bodies.append(text)
            if BAD not in text:
                return None
            seen[BAD] = seen.get(BAD, 0) + 1
            if transient is not None and seen[BAD] > transient:
                return None
        return fault

    with StubLMServer(faults=faults) as server:
        lm = make_lm("openai/stub", api_base=server.base_url + "/v1", num_retries=NUM_RETRIES, timeout=timeout,
                     cache=False)
        with dspy.context(lm=lm):
            summary = evaluate(programs.get("direct"), _examples(n), "em,f1", None, progress=False, threads=threads)
    return server, summary, {r["id"]: r for r in summary["records"]}, _requests_about(server, bodies, BAD)


# fault -> (kinds accepted in the record and the summary, requests about q1: 1 + retries, or adapter fallback)
# A 429 is not final: it is retried until the question's deadline (tests/lm/test_lm_rate_limits.py).
FINAL_FAULTS = {
    "500": ({"lm"}, 1 + NUM_RETRIES),
    "502": ({"lm"}, 1 + NUM_RETRIES),
    "503": ({"lm"}, 1 + NUM_RETRIES),
    "reset": ({"lm"}, 1 + NUM_RETRIES),
    "timeout:1": ({"timeout"}, 1 + NUM_RETRIES),
    "truncated": ({"lm", "parse"}, None),  # a body that is not JSON: the engine does not retry it (checked below)
    "garbage": ({"parse"}, 2),  # ChatAdapter, then DSPy's JSONAdapter fallback: no HTTP retry
    "empty": ({"parse"}, 2),
}





@pytest.mark.parametrize("fault", list(FINAL_FAULTS))
def test_final_fault_is_recorded_scored_zero_and_run_goes_on(fault, retry_delays):
    kinds, expected_requests = FINAL_FAULTS[fault]
    server, summary, records, about_bad = _run(fault)
    assert sorted(records) == ["q0", "q1", "q2"]  # every example once; q2 ran after q1 failed
    bad = records["q1"]
    assert bad["error"] is not None and bad["prediction"] is None
    assert bad["metrics"] == {"em": 0.0, "f1": 0.0}
    for good in ("q0", "q2"):
        assert records[good]["error"] is None and records[good]["prediction"]
    if expected_requests is not None:
        assert about_bad == expected_requests, server.log
    else:
        assert 1 <= about_bad <= 1 + NUM_RETRIES
    assert summary["failures"] == 1 and bad["error"]["kind"] and bad["error"]["message"]
    assert summary["failures_by_kind"] == {bad["error"]["kind"]: 1}


_FINAL_KIND_CASES = list(FINAL_FAULTS)


@pytest.mark.parametrize("fault", _FINAL_KIND_CASES)
def test_failure_kind_names_the_cause(fault, retry_delays):
    """The summary's failures_by_kind must tell a rate limit / server failure ('lm') from a read timeout
    ('timeout') from an answer that does not parse ('parse'), never lump them into 'other'."""
    kinds, _ = FINAL_FAULTS[fault]
    _server, summary, records, _ = _run(fault)
    error = records["q1"]["error"]
    assert error["kind"] in kinds, (error["kind"], error["type"], error["message"][:200])
    assert summary["failures_by_kind"] == {error["kind"]: 1}


@pytest.mark.parametrize("fault", ["429", "429:0.25", "503", "502", "reset", "timeout:1"])
def test_transient_fault_is_retried_and_recovers(fault, retry_delays):
    server, summary, records, about_bad = _run(fault, transient=1)
    assert about_bad == 2  # one failure, one successful retry
    assert all(r["error"] is None for r in records.values()) and summary["failures"] == 0
    assert records["q1"]["prediction"] == records["q0"]["prediction"]  # the stub's placeholder answer
    assert len(retry_delays) == 1


def test_retry_after_is_honoured_and_backoff_is_bounded(retry_delays):
    _run("429:0.25", transient=2)
    assert retry_delays == [0.25, 0.25]  # the server's Retry-After, each retry
    retry_delays.clear()
    _run("503")
    assert retry_delays == [1, 2]  # exponential without Retry-After (DSPy caps it at 60 s)


def test_no_retry_for_a_client_error(retry_delays):
    """A 400 (bad request) is final at once: retrying would only cost money."""
    server, summary, records, about_bad = _run("400")
    assert about_bad == 1 and retry_delays == []
    assert records["q1"]["error"] is not None and summary["failures"] == 1


def test_faults_under_threads_count_once_per_example(retry_delays):
    server, summary, records, about_bad = _run("503", n=8, threads=4)
    assert sorted(records) == sorted(f"q{i}" for i in range(8))
    assert about_bad == 1 + NUM_RETRIES
    assert summary["failures"] == 1 and summary["n"] == 8


def test_cli_run_records_mixed_faults(tmp_path, cli, monkeypatch, questions_file, retry_delays):
    """Through `ragzoo evaluate` (CLI defaults: 3 retries): predictions.jsonl says what failed, summary.json
    counts failures by kind, the run finishes and exits 0."""
    monkeypatch.setenv("OPENAI_API_KEY", "stub")
    plan = {"item 1?": "503", "item 3?": "garbage", "item 4?": "empty"}

    def faults(index, body):
        text = json.dumps(body)
        return next((fault for needle, fault in plan.items() if needle in text), None)

    data = questions_file(6)
    with StubLMServer(faults=faults) as server:
        result = cli("evaluate", "--method", "direct", "--data", data, "--lm", "openai/stub", "--api-base",
                     server.base_url + "/v1", "--out", tmp_path / "run", "--no-cache", "--allow-failures")
    assert result.code == 0, result.err
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    records = {r["id"]: r for r in map(json.loads, lines)}
    assert len(lines) == 6 and sorted(records) == [f"q{i}" for i in range(6)]
    assert {i for i, r in records.items() if r["error"]} == {"q1", "q3", "q4"}
    assert records["q3"]["error"]["kind"] == records["q4"]["error"]["kind"] == "parse"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures"] == 3 and summary["failures_by_kind"]["parse"] == 2
    assert sum(summary["failures_by_kind"].values()) == 3
    assert summary["metrics"]["em"] == 0.0 and summary["n"] == 6
    assert "failures=3" in result.out
