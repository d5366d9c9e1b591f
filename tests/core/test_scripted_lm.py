"""The scripted LM and static retriever that every program test relies on."""

from __future__ import annotations

import dspy
import pytest

from ragzoo.engines import parse_inputs
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages


class Judge(dspy.Signature):
    """Decide whether the context answers the question."""

    question: str = dspy.InputField()
    context: list[str] = dspy.InputField()
    relevant: bool = dspy.OutputField()
    ids: list[int] = dspy.OutputField()


class Pipeline(dspy.Module):
    def __init__(self):
        super().__init__()
        self.judge = dspy.ChainOfThought(Judge)
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        verdict = self.judge(question=question, context=["A | first", "B | second"])
        return self.answer(question=f"{question} {verdict.ids}")


def test_answers_are_routed_by_predictor_name_and_typed():
    lm = ScriptedLM({"judge": {"reasoning": "because", "relevant": True, "ids": [1, 0]},
                     "answer": [{"answer": "first"}, {"answer": "second"}]})
    with dspy.context(lm=lm):
        program = Pipeline()
        first = program(question="q1")
        second = program(question="q2")
    assert (first.answer, second.answer) == ("first", "second")
    assert lm.call_names == ["judge", "answer", "judge", "answer"]
    judge_call = lm.calls_to("judge")[0]
    assert judge_call.inputs["question"] == "q1"
    assert "A | first" in judge_call.inputs["context"]
    assert lm.calls_to("answer")[1].inputs == {"question": "q2 [1, 0]"}


def test_unscripted_predictor_fails_loudly():
    lm = ScriptedLM({"answer": {"answer": "x"}})
    with dspy.context(lm=lm), pytest.raises(Exception, match="no answer for predictor 'judge'"):
        Pipeline()(question="q")


def test_raw_string_forces_a_parse_failure():
    lm = ScriptedLM({"judge": {"reasoning": "r", "relevant": False, "ids": []}, "answer": "not fields at all"})
    with dspy.context(lm=lm), pytest.raises(dspy.utils.exceptions.AdapterParseError):
        Pipeline()(question="q")


def test_usage_is_reported_with_counted_tokens():
    lm = ScriptedLM(default={"answer": "x"})
    with dspy.context(lm=lm), dspy.track_usage() as usage:
        dspy.Predict("question -> answer")(question="how many tokens is this prompt?")
    totals = usage.get_total_tokens()["scripted/ragzoo"]
    assert totals["prompt_tokens"] > 20 and totals["completion_tokens"] > 0


def test_parse_inputs_splits_field_sections():
    text = "[[ ## question ## ]]\nWho?\n\n[[ ## context ## ]]\n[1] «A | b»\n\nRespond with the corresponding output fields, ..."
    assert parse_inputs(text, {"question", "context"}) == {"question": "Who?", "context": "[1] «A | b»"}


def test_static_retriever_ranks_by_overlap_and_records_queries():
    retriever = StaticRetriever(make_passages(5))
    hits = retriever("text of doc 3", 2)
    assert hits[0].pid == "3" and len(hits) == 2
    assert retriever.queries == [("text of doc 3", 2)]
    fixed = StaticRetriever([], by_query={"q": make_passages(3)})
    assert [p.pid for p in fixed("q", 2)] == ["0", "1"]


def test_predictor_names_follow_a_replaced_predictor():
    """Names are cached per program; a predictor swapped in (as optimizers do) is still named correctly."""
    lm = ScriptedLM({"judge": {"reasoning": "r", "relevant": True, "ids": [0]}, "answer": {"answer": "a"}})
    program = Pipeline()
    with dspy.context(lm=lm):
        program(question="q")
        program.answer = dspy.Predict("question -> answer")
        program(question="q")
    assert lm.call_names == ["judge", "answer", "judge", "answer"]
