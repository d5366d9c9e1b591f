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
              "latency": 1.5, "question": "who?", "prediction": "x", "lm_trace": [{"predictor": "answer"}]}
    failed = {**record, "id": "q2", "error": {"kind": "timeout", "message": "late"}, "metrics": {"em": 0.0}}
    assert set(SUMMARY_KEYS) <= set(record)
    whole = summarize([record, failed], ["em"], total=3)
    assert summarize([summary_view(record), summary_view(failed)], ["em"], total=3) == whole
    assert whole["lenient_reads"] == 2 and whole["failures"] == 1


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
