"""Figures that follow from the records, labelled for what they are (the "honest numbers" review): a killed run
without -n says n/N, a run in processes counts what one process counts, a failure's score of 0 is said, and a
grid's cost column says it is spent money beside what the same calls cost uncached."""

from __future__ import annotations

import json

from ragzoo.cli import main
from ragzoo.runs import SUMMARY_KEYS, summarize, summary_view
from ragzoo.stubserver import StubLMServer


def test_what_a_worker_process_sends_summarises_as_the_whole_record():
    """`evaluate --processes`: the parent summarises the workers' summary views; every figure of the summary must
    come out as from the records themselves (lenient_reads was missing: 0 where the records summed to 1)."""
    record = {"id": "q1", "metrics": {"em": 1.0}, "error": None, "reasks": 2, "lenient_reads": 1, "degradations": 1,
              "lm_calls": 3, "prompt_tokens": 30, "completion_tokens": 5, "cost": 0.25, "retrievals": 2,
              "cached_calls": 1, "cached_prompt_tokens": 10, "cached_completion_tokens": 2, "cached_cost": 0.05,
              "latency": 1.5, "question": "who?", "prediction": "x", "lm_trace": [{"predictor": "answer"}],
              "metric_errors": {"em": "AttributeError: no field"}}
    failed = {**record, "id": "q2", "error": {"kind": "timeout", "message": "late"}, "metrics": {"em": 0.0}}
    assert set(SUMMARY_KEYS) <= set(record)
    whole = summarize([record, failed], ["em"], total=3)
    assert summarize([summary_view(record), summary_view(failed)], ["em"], total=3) == whole
    assert whole["lenient_reads"] == 2 and whole["failures"] == 1 and whole["metric_failures"] == {"em": 2}


def test_a_run_without_n_records_the_questions_it_was_asked(tmp_path, questions_file, capsys):
    """A run killed before it finished reports done/asked against every question of its data (config n was null
    without -n, and `report` then took the records written as the questions asked: 16/16, not 16/30)."""
    data = questions_file(3)
    assert main(["evaluate", "--method", "direct", "--data", str(data), "--lm", "dry-run", "--out",
                 str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["n"] == 3


def test_report_says_failures_are_scored_zero_without_abstentions(tmp_path, questions_file, capsys):
    data = questions_file(4)
    with StubLMServer(faults=lambda index, body: "garbage" if index % 2 else None) as server:
        main(["evaluate", "--method", "direct", "--data", str(data), "--lm", "openai/stub", "--api-base",
              server.base_url + "/v1", "--no-cache", "--allow-failures", "--max-reasks", "0", "--out",
              str(tmp_path / "run")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failures"] >= 1 and not any(r.get("abstained") for r in [summary])
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    assert "failures: examples that raised (a timeout, an LM or retriever error) are scored 0" in \
        capsys.readouterr().out


EVERY_OTHER_UNREADABLE = lambda index, body: "garbage" if index % 2 else None  # noqa: E731 - stub faults


def _priced_run(tmp_path, questions_file):
    """(run folder, evaluate argv but --api-base) of 6 priced questions, failures allowed, no re-ask."""
    run = tmp_path / "run"
    return run, ["evaluate", "--method", "direct", "--data", str(questions_file(6)), "--lm", "openai/stub",
                 "--no-cache", "--price", "1,2", "--max-reasks", "0", "--allow-failures", "--out", str(run)]


def test_retry_failed_keeps_the_spend_of_the_attempts_it_ran_again(tmp_path, questions_file, capsys):
    """`--retry-failed` replaces a failed question's record: what the failed attempt cost stays in the run's usage
    (found by review: 45 requests served, the summary said 30 calls and two thirds of the cost)."""
    from ragzoo.runs import extra_usage, keep_retried, read_predictions

    run, argv = _priced_run(tmp_path, questions_file)
    with StubLMServer(faults=EVERY_OTHER_UNREADABLE) as server:
        assert main([*argv, "--api-base", server.base_url + "/v1"]) == 0
        first = json.loads((run / "summary.json").read_text())
        failed = [r for r in read_predictions(run / "predictions.jsonl") if r.get("error")]
        assert first["failures"] == len(failed) >= 1
        main([*argv, "--api-base", server.base_url + "/v1", "--retry-failed"])
        served = server.requests
    summary = json.loads((run / "summary.json").read_text())
    records = read_predictions(run / "predictions.jsonl")
    assert summary["usage"]["lm_calls"] == served == sum(r["lm_calls"] for r in records) + len(failed)
    assert summary["usage"]["retried_calls"] == len(failed)
    paid = sum(r["cost"] for r in records) + sum(r["cost"] for r in failed)
    assert abs(summary["usage"]["cost"] - round(paid, 6)) < 1e-6 and summary["usage"]["retried_cost"] > 0
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert f"{paid:.4f}" in capsys.readouterr().out  # the report's spent $ too
    keep_retried(run, failed)  # a retry killed between its two writes keeps them again: counted once
    assert extra_usage(run)["lm_calls"] == len(failed)


import pytest  # noqa: E402


@pytest.mark.parametrize("processes", ["1", "2"])
def test_lm_calls_that_return_past_a_question_s_deadline_are_counted(tmp_path, questions_file, processes):
    """A question past its --deadline is recorded as a timeout at once; its LM call, answered later, was paid all
    the same (found by review: 29 calls answered, 16 counted). It goes to the run's extra_usage.jsonl ("late") and
    into every usage figure, from a worker process too."""
    from ragzoo.runs import extra_usage, read_predictions

    data = questions_file(2)
    run = tmp_path / "run"
    with StubLMServer(latency=2.0) as server:  # every answer comes 2 s after the question's 1 s deadline
        main(["evaluate", "--method", "direct", "--data", str(data), "--lm", "openai/stub", "--api-base",
              server.base_url + "/v1", "--no-cache", "--price", "1,2", "--deadline", "1", "--timeout", "10",
              "--threads", "1", "--processes", processes, "--allow-failures", "--out", str(run)])
        served = server.requests
    records = read_predictions(run / "predictions.jsonl")
    assert [r["error"]["kind"] for r in records] == ["timeout", "timeout"] and sum(r["lm_calls"] for r in records) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["usage"]["lm_calls"] == served == 2 and summary["usage"]["late_calls"] == 2
    assert summary["usage"]["cost"] > 0 and extra_usage(run)["late_cost"] == pytest.approx(summary["usage"]["cost"])


def test_report_counts_what_retried_questions_not_answered_yet_cost(tmp_path, questions_file, capsys):
    """Review: a `--retry-failed` stopped by its budget before it reached every failed question moved their spend
    to extra_usage.jsonl and dropped their records; `report` summed the ledger of the records' ids only, and the
    spend vanished from its spent $ (0.0049 against summary.json's 0.006955)."""
    from ragzoo.runs import _jsonl, keep_retried, read_predictions

    run, argv = _priced_run(tmp_path, questions_file)
    with StubLMServer(faults=EVERY_OTHER_UNREADABLE) as server:
        assert main([*argv, "--api-base", server.base_url + "/v1"]) == 0
    records = read_predictions(run / "predictions.jsonl")
    failed = [r for r in records if r.get("error")]
    assert failed
    keep_retried(run, failed)  # what a retry does first; then it was stopped before asking any of them again
    (run / "predictions.jsonl").write_bytes(_jsonl([r for r in records if not r.get("error")]))
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert f"{sum(r['cost'] for r in records):.4f}" in capsys.readouterr().out
