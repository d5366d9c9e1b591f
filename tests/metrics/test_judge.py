"""LM-judged metrics (`judge`, `judge_faithful`): the judge's calls are counted apart from the program's (records,
summary, budget), its verdicts are read, a failing verdict fails the metric for that question only, and the run
records the judge's prompts without secrets."""

from __future__ import annotations

import json

import dspy
import pytest

from ragzoo.errors import ConfigError
from ragzoo.metrics import get_metric
from ragzoo.metrics import judge as judge_module
from ragzoo.runs import evaluate
from ragzoo.testing import ScriptedLM, make_passages
from ragzoo.usage import Meter


class Answerer(dspy.Module):
    """A one-call program that also returns the passages its call saw."""

    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        passages = make_passages(2, prefix="Doc")
        return dspy.Prediction(answer=self.answer(question=question).answer, passages=passages)


def _examples(n=3):
    return [dspy.Example(id=f"q{i}", question=f"Question {i}?", answers=["Paris"]).with_inputs("question")
            for i in range(n)]


@pytest.fixture(autouse=True)
def _no_judge():
    yield
    judge_module.clear_judge()


def test_judge_without_judge_lm_is_a_config_error():
    judge_module.clear_judge()
    with pytest.raises(ConfigError, match="--judge-lm"):
        get_metric("judge")


def test_judge_calls_are_counted_apart_from_the_programs_and_bound_by_no_budget(tmp_path):
    program_lm = ScriptedLM(default={"answer": "Paris is the capital"})
    judge_lm = ScriptedLM({"AnswerOverlap": {"recall": 1.0, "precision": 0.5}})
    judge_module.use_judge(judge_lm, "scripted/judge", Meter())
    with dspy.context(lm=program_lm):
        # a budget of exactly the program's calls: the judge's 3 calls on top must not stop the run
        summary = evaluate(Answerer(), _examples(3), "em,judge", tmp_path / "run", max_calls=3)
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [r["lm_calls"] for r in records] == [1, 1, 1]  # the program's call only
    assert summary["usage"]["lm_calls"] == 3
    assert summary["stopped"] is None and summary["failures"] == 0
    assert summary["judge"]["lm_calls"] == 3 and summary["judge"]["failed"] == 0
    assert summary["judge"]["prompt_tokens"] > 0
    assert [r["metrics"]["judge"] for r in records] == [pytest.approx(2 / 3)] * 3  # F1 of recall 1, precision .5
    assert summary["metrics"]["judge"] == pytest.approx(2 / 3)
    assert len(judge_lm.calls) == 3 and len(program_lm.calls) == 3
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["judge"]["metrics"]["judge"]["instructions"] == judge_module.AnswerOverlap.instructions
    assert config["judge"]["lm"]["model"] == "scripted/ragzoo"


def test_faithfulness_judge_sees_the_passages_of_the_final_call():
    judge_lm = ScriptedLM({"AnswerSupport": {"supported": 0.25}})
    judge_module.use_judge(judge_lm, "scripted", Meter())
    metric = get_metric("judge_faithful")
    example = _examples(1)[0]
    pred = dspy.Prediction(answer="Paris", passages=make_passages(2, prefix="Doc"))
    assert metric(example, pred) == 0.25
    assert metric(example, pred, trace=[]) is False  # bootstrapping: passes at support >= 0.5
    seen = judge_lm.calls[0].inputs
    assert "Doc 0" in seen["passages"] and "Doc 1" in seen["passages"]
    assert seen["system_answer"] == "Paris"


def test_a_failing_verdict_fails_the_metric_for_that_question_only(tmp_path):
    program_lm = ScriptedLM(default={"answer": "Paris"})

    def verdict(call):
        if "Question 1?" in call.inputs.get("question", ""):
            return {"recall": 7.0, "precision": 1.0}  # not a fraction: unreadable verdict
        return {"recall": 1.0, "precision": 1.0}

    judge_module.use_judge(ScriptedLM({"AnswerOverlap": verdict}), "scripted", Meter())
    with dspy.context(lm=program_lm):
        summary = evaluate(Answerer(), _examples(3), "em,judge", tmp_path / "run")
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "predictions.jsonl").read_text().splitlines())}
    assert summary["n"] == 3 and summary["failures"] == 0  # the run and the question's answer stand
    assert records["q1"]["metrics"]["judge"] == 0.0 and records["q1"]["metrics"]["em"] == 1.0
    assert records["q0"]["metrics"]["judge"] == 1.0
    assert summary["judge"]["failed"] == 1 and summary["judge"]["failed_ids"] == ["q1"]


def test_each_evaluation_of_a_process_reports_its_own_judge_calls(tmp_path):
    """Review: the judge is the process's (a notebook evaluates several times): the second run reported the first
    run's judge calls and failed ids too (6 calls for its 3 questions)."""
    program_lm = ScriptedLM(default={"answer": "Paris"})

    def verdict(call):
        if "Question 1?" in call.inputs.get("question", ""):
            return {"recall": 7.0, "precision": 1.0}  # unreadable: q1's verdict fails
        return {"recall": 1.0, "precision": 1.0}

    judge_module.use_judge(ScriptedLM({"AnswerOverlap": verdict}), "scripted", Meter())
    with dspy.context(lm=program_lm):
        first = evaluate(Answerer(), _examples(3), "em,judge", tmp_path / "one")
        second = evaluate(Answerer(), _examples(2), "em,judge", tmp_path / "two")
    assert first["judge"]["lm_calls"] == 3 and first["judge"]["failed_ids"] == ["q1"]
    assert second["judge"]["lm_calls"] == 2 and second["judge"]["failed_ids"] == ["q1"]
    assert second["judge"]["failed"] == 1


def test_cli_judge_metric_needs_judge_lm_and_records_it(tmp_path, capsys):
    from ragzoo.cli import main

    base = ["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "hotpotqa", "--split",
            "dev_distractor", "-n", "2", "--lm", "dry-run", "--metric", "em,judge_faithful"]
    assert main([*base, "--out", str(tmp_path / "a")]) != 0
    err = capsys.readouterr().err
    assert "--judge-lm" in err and "Traceback" not in err
    assert main([*base, "--judge-lm", "dry-run", "--out", str(tmp_path / "b")]) == 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "b" / "predictions.jsonl").read_text().splitlines()]
    assert summary["judge"]["lm_calls"] == 2
    assert summary["judge"]["cost"] > 0  # the dry-run judge is priced (at its default model), apart
    assert summary["usage"]["lm_calls"] == sum(r["lm_calls"] for r in records)
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["judge_lm"] == "dry-run"
    assert "supported by the passages" in config["judge"]["metrics"]["judge_faithful"]["instructions"]


def test_cli_judge_over_http_a_garbled_verdict_fails_one_question_and_no_key_is_kept(tmp_path, monkeypatch):
    """A real judge endpoint (the stub server): its calls are counted apart, a verdict that cannot be read fails
    the metric for that one question only, and the key never reaches the run folder."""
    from ragzoo import data
    from ragzoo.cli import main
    from ragzoo.stubserver import StubLMServer

    key = "sk-judge-secret-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    first = data.load("hotpotqa", "dev_distractor", n=2, seed=0)[0]

    def garble_first(index, body):
        return "garbage" if first.question in json.dumps(body) else None

    out = tmp_path / "run"
    with StubLMServer(faults=garble_first) as server:
        code = main(["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "hotpotqa",
                     "--split", "dev_distractor", "-n", "2", "--seed", "0", "--lm", "dry-run",
                     "--metric", "em,judge", "--judge-lm", "openai/stub-judge",
                     "--judge-api-base", server.base_url + "/v1", "--out", str(out)])
        judged = server.requests
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["judge"]["failed_ids"] == [first.id]
    assert summary["judge"]["lm_calls"] + summary["judge"]["failed_calls"] <= judged
    assert summary["judge"]["lm_calls"] >= 1  # the other question's verdict
    assert summary["usage"]["lm_calls"] == 2  # the program's two dry-run calls only
    for name in ("config.json", "summary.json", "predictions.jsonl"):
        assert key not in (out / name).read_text()


def test_a_judged_run_over_several_processes_is_refused_before_any_question(tmp_path):
    """Review: `--processes 2` with a judged metric wrote summary.judge.lm_calls 0 though the workers' judges
    made every call (the judge's meter is per process)."""
    from ragzoo.errors import RunError

    program_lm = ScriptedLM(default={"answer": "Paris"})
    judge_module.use_judge(ScriptedLM({"AnswerOverlap": {"recall": 1.0, "precision": 1.0}}), "scripted", Meter())
    with dspy.context(lm=program_lm), pytest.raises(RunError, match="one process"):
        evaluate(Answerer(), _examples(3), "em,judge", tmp_path / "run", processes=2)
    assert not program_lm.calls and not (tmp_path / "run").exists()
