"""GEPA with feedback (issue 23): the feedback metric explains a wrong answer from the stage records (retrieval
miss, filtered out, reader miss) on hand-built predictions, and `--optimizer gepa` hands that text to GEPA's
reflection LM."""

from __future__ import annotations

import dspy
import pytest

from ragzoo import programs
from ragzoo.optimizers import compile_program
from ragzoo.optimizers.feedback import explain, feedback_metric
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

GOLD = dspy.Example(id="h1", question="Where was the director of Jaws born?", answers=["Cincinnati"],
                    supporting_titles=["Steven Spielberg", "Jaws (film)"]).with_inputs("question")
JAWS = Passage("p1", "Jaws (film)", "Jaws is a 1975 film directed by Steven Spielberg.")
SPIELBERG = Passage("p2", "Steven Spielberg", "Spielberg was born in Cincinnati, Ohio.")
OTHER = Passage("p3", "Shark", "Sharks are fish.")


def _em(example, pred, trace=None):
    return float(pred.answer == "Cincinnati")


def test_feedback_says_the_filter_dropped_the_evidence_the_second_query_found():
    pred = dspy.Prediction(answer="Ohio", passages=[OTHER], stages={
        "retrieval_q1": {"passages": [OTHER], "queries": ["director of Jaws"]},
        "retrieval_q2": {"passages": [SPIELBERG, OTHER]},
        "filter": {"kept": [OTHER]}})
    out = feedback_metric(_em)(GOLD, pred, None, "generate", None)
    assert out.score == 0.0
    assert "Filtered out" in out.feedback
    assert "stage 'retrieval_q1' retrieved 1 passage(s); none carries the evidence" in out.feedback.replace("Stage", "stage")
    assert "'Steven Spielberg'" in out.feedback and "retrieval_q2" in out.feedback
    assert "Stage 'filter' kept 1 passage(s), and dropped every passage with the evidence" in out.feedback
    assert "'Cincinnati'" in out.feedback and "token F1 0.00" in out.feedback


def test_feedback_classes_retrieval_miss_reader_miss_and_correct():
    miss = dspy.Prediction(answer="Ohio", passages=[OTHER], stages={"retrieval": {"passages": [OTHER]}})
    assert "Retrieval miss" in explain(GOLD, miss, 0.0, "em")
    read = dspy.Prediction(answer="Ohio", passages=[SPIELBERG], stages={"retrieval": {"passages": [SPIELBERG]}})
    assert "Reader miss" in explain(GOLD, read, 0.0, "em")
    no_stages = dspy.Prediction(answer="Ohio", passages=[JAWS, SPIELBERG])  # a method without stage records
    assert "Reader miss" in explain(GOLD, no_stages, 0.0, "em")
    right = dspy.Prediction(answer="Cincinnati", passages=[SPIELBERG])
    text = explain(GOLD, right, 1.0, "em")
    assert text.startswith("Correct (em=1)") and "miss" not in text
    assert "failed" in explain(GOLD, None, 0.0, "em")


def test_gepa_compile_hands_the_feedback_to_the_reflection_lm(make_examples):
    seen: list[str] = []

    def propose(call):  # GEPA's reflection: keep what it was shown, propose one instruction
        seen.append(call.prompt_text)
        return {name: "Answer with the exact words of the passage that holds the answer."
                for name in call.signature.output_fields}

    reflect = ScriptedLM(default=propose)

    lm = dspy.utils.DummyLM([{"answer": "nope"}] * 400)
    from ragzoo.usage import attach

    attach(lm)
    program = programs.get("_tinyqa", retriever=StaticRetriever(make_passages(6)), k=2)
    examples = make_examples(8)
    with dspy.context(lm=lm):
        result = compile_program(program, trainset=examples[:6], valset=examples[6:], optimizer="gepa",
                                 metric="em", settings={"auto": None, "max_metric_calls": 24, "use_merge": False,
                                                        "reflection_lm": reflect, "reflection_minibatch_size": 2})
    assert result.stopped is None
    assert seen, "GEPA never asked its reflection LM"
    # what the reflection LM read: our feedback (the class and the stage line), not GEPA's bare score text
    assert "Retrieval miss" in seen[0] and "final context" in seen[0]  # TinyQA records no stages: its passages
    assert "retrieved 2 passage(s); none carries the evidence" in seen[0]
    assert "This trajectory got a score of" not in seen[0]


def test_a_budget_stop_ends_gepa_at_its_next_iteration(make_examples, monkeypatch):
    """Review: GEPA stopped by --max-calls went on iterating with every call refused (caught inside DSPy's
    evaluation, scored as failures) until its rollout budget was gone, and kept that state for --resume. A
    stopper ends it at the next iteration: few calls are asked past the budget, not the rest of its rollouts."""
    import ragzoo.usage as usage

    asked = []
    real_reserve = usage._reserve_open_budgets

    def counting(*args, **kwargs):
        asked.append(1)
        return real_reserve(*args, **kwargs)

    monkeypatch.setattr(usage, "_reserve_open_budgets", counting)
    reflect = ScriptedLM(default=lambda call: {name: "Answer briefly." for name in call.signature.output_fields})
    lm = dspy.utils.DummyLM([{"answer": "nope"}] * 600)
    usage.attach(lm)
    program = programs.get("_tinyqa", retriever=StaticRetriever(make_passages(6)), k=2)
    examples = make_examples(8)
    with dspy.context(lm=lm):
        result = compile_program(program, trainset=examples[:6], valset=examples[6:], optimizer="gepa",
                                 metric="em", max_calls=12,
                                 settings={"auto": None, "max_metric_calls": 200, "use_merge": False,
                                           "reflection_lm": reflect, "reflection_minibatch_size": 2})
    assert result.stopped
    assert len(asked) < 12 + 20, f"{len(asked)} calls asked under a budget of 12"
