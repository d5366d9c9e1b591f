"""Run directories: incremental predictions, failures recorded and scored 0, threads, resume after SIGKILL."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import textwrap
import time

import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import RunError
from ragzoo.runs import evaluate, read_predictions
from ragzoo.testing import ScriptedLM

EM = lambda example, pred, trace=None: pred.answer == example.answer  # noqa: E731


def _lines(run):
    return [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]


def test_records_metrics_usage_and_failures(tmp_path, tiny_retriever, make_examples):
    def respond(context):
        number = context.inputs["question"].split("item ")[-1].rstrip("?")
        return "garbage" if number == "2" else {"answer": f"answer {number}"}

    program = programs.get("_tinyqa", retriever=tiny_retriever)
    with dspy.context(lm=ScriptedLM({"answer": respond})):
        summary = evaluate(program, make_examples(4), [EM], tmp_path / "run", progress=False)
    records = {r["id"]: r for r in _lines(tmp_path / "run")}
    assert set(records) == {"q0", "q1", "q2", "q3"}
    failed = records["q2"]
    assert failed["error"]["kind"] == "parse" and failed["metrics"]["<lambda>"] == 0.0
    assert failed["lm_calls"] == 2  # ChatAdapter, then DSPy's JSONAdapter retry
    ok = records["q1"]
    assert ok["prediction"] == "answer 1" and ok["metrics"]["<lambda>"] == 1.0 and ok["lm_calls"] == 1
    assert ok["passages"][0] == {"pid": "0", "title": "Doc 0"} and ok["prompt_tokens"] > 0
    assert ok["lm_trace"][0]["predictor"] == "answer"
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["metrics"]["<lambda>"] == 0.75 == summary["metrics"]["<lambda>"]
    assert saved["failures_by_kind"] == {"parse": 1} and saved["usage"]["lm_calls"] == 5
    assert json.loads((tmp_path / "run" / "config.json").read_text())["n"] == 4


def test_threads_give_the_same_predictions(tmp_path, tiny_retriever, make_examples, echo_lm):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    results = {}
    for threads in (1, 4):
        with dspy.context(lm=echo_lm()):  # settings reach the worker threads (DSPy #1766)
            evaluate(program, make_examples(12), [EM], tmp_path / f"t{threads}", threads=threads, progress=False)
        results[threads] = {r["id"]: (r["prediction"], r["passages"]) for r in _lines(tmp_path / f"t{threads}")}
    assert results[1] == results[4] and len(results[1]) == 12


def test_existing_dir_refused_unless_resume_or_force(tmp_path, tiny_retriever, make_examples, echo_lm):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with dspy.context(lm=echo_lm()):
        with pytest.raises(RunError, match="not a ragzoo run directory"):
            evaluate(program, make_examples(2), [EM], tmp_path / "other", progress=False)
        evaluate(program, make_examples(2), [EM], tmp_path / "run", progress=False, config={"dataset": "toy"})
        with pytest.raises(RunError, match="--resume"):
            evaluate(program, make_examples(2), [EM], tmp_path / "run", progress=False)
        with pytest.raises(RunError, match="--dataset was"):
            evaluate(program, make_examples(2), [EM], tmp_path / "run", progress=False, resume=True,
                     config={"dataset": "other"})
        evaluate(program, make_examples(3), [EM], tmp_path / "run", progress=False, force=True)
    assert len(_lines(tmp_path / "run")) == 3


def test_resume_drops_torn_line_and_skips_done(tmp_path, tiny_retriever, make_examples, echo_lm):
    program = programs.get("_tinyqa", retriever=tiny_retriever)
    lm = echo_lm()
    with dspy.context(lm=lm):
        evaluate(program, make_examples(3), [EM], tmp_path / "run", progress=False)
    with open(tmp_path / "run" / "predictions.jsonl", "a") as handle:
        handle.write('{"id": "q3", "question": "what is it')  # a write cut by SIGKILL
    assert [r["id"] for r in read_predictions(tmp_path / "run" / "predictions.jsonl")] == ["q0", "q1", "q2"]
    calls = len(lm.calls)
    with dspy.context(lm=lm):
        summary = evaluate(program, make_examples(6), [EM], tmp_path / "run", progress=False, resume=True,
                           config={"n": 3})
    assert len(lm.calls) - calls == 3
    assert sorted(r["id"] for r in _lines(tmp_path / "run")) == [f"q{i}" for i in range(6)]
    assert summary["n"] == 6 and summary["resumed_from"] == 3 and summary["complete"]


SCRIPT = textwrap.dedent('''
    import sys, time, dspy
    from ragzoo.programs.base import RagProgram, passages_as_context
    from ragzoo.runs import evaluate
    from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

    class Answer(dspy.Signature):
        """Answer."""
        context: list[str] = dspy.InputField()
        question: str = dspy.InputField()
        answer: str = dspy.OutputField()

    class Tiny(RagProgram):
        def __init__(self, retriever):
            super().__init__(retriever)
            self.answer = dspy.Predict(Answer)
        def forward(self, question):
            passages = self.retrieve(question, 2)
            return dspy.Prediction(answer=self.answer(context=passages_as_context(passages), question=question).answer,
                                   passages=passages)

    def respond(context):
        time.sleep(float(sys.argv[2]))
        return {"answer": "answer " + context.inputs["question"].split("item ")[-1].rstrip("?")}

    examples = [dspy.Example(id=f"q{i}", question=f"what is item {i}?", answer=f"answer {i}").with_inputs("question")
                for i in range(30)]
    em = lambda e, p, t=None: p.answer == e.answer
    with dspy.context(lm=ScriptedLM({"answer": respond})):
        evaluate(Tiny(StaticRetriever(make_passages(4))), examples, [em], sys.argv[1], threads=3,
                 resume=len(sys.argv) > 3, progress=False)
''')


def test_sigkill_then_resume_runs_each_example_exactly_once(tmp_path, monkeypatch):
    script = tmp_path / "run_eval.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, str(script), str(run), "0.05"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    predictions = run / "predictions.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if predictions.exists() and predictions.read_text().count("\n") >= 6:
            break
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(read_predictions(predictions))
    assert 6 <= done_before < 30, "the run should have been killed mid-way"
    assert not (run / "summary.json").exists()
    # the same script resumes in this process (its pid is not the killed one's): one interpreter start-up saved
    monkeypatch.setattr(sys, "argv", [str(script), str(run), "0", "resume"])
    runpy.run_path(str(script), run_name="__main__")
    ids = [json.loads(line)["id"] for line in predictions.read_text().splitlines()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(30))  # each id exactly once
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n"] == 30 and summary["metrics"]["<lambda>"] == 1.0
    assert summary["resumed_from"] == done_before
