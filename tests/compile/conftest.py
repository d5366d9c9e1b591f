"""Fixtures of the compile/artifact/run tests: a tiny registered QA program and scripted LMs."""

from __future__ import annotations

import dspy
import pytest

from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, passages_as_context
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages


class TinyAnswer(dspy.Signature):
    """Answer the question from the context in a few words."""

    context: list[str] = dspy.InputField(desc="passages")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a short answer")


class TinyQA(RagProgram):
    """Test-only program: retrieve k passages, answer in one call."""

    def __init__(self, retriever, k: int = 2):
        super().__init__(retriever)
        self.k = k
        self.answer = dspy.Predict(TinyAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        result = self.answer(context=passages_as_context(passages), question=question)
        return dspy.Prediction(answer=result.answer, passages=passages)


def make_examples(n: int, prefix: str = "q") -> list:
    return [dspy.Example(id=f"{prefix}{i}", question=f"what is item {i}?", answers=[f"answer {i}"],
                         answer=f"answer {i}").with_inputs("question") for i in range(n)]


def echo_lm(correct: bool = True) -> ScriptedLM:
    """Answers 'answer <i>' for 'what is item <i>?' (wrong on purpose with correct=False)."""

    def respond(context):
        number = context.inputs["question"].split("item ")[-1].rstrip("?")
        return {"answer": f"answer {number}" if correct else "nope"}

    return ScriptedLM({"answer": respond}, default=respond)


@pytest.fixture(autouse=True)
def _tinyqa_registered():
    """Registered only while a test of this folder runs, so other tests see the real method list."""
    from ragzoo.programs import _REGISTRY, methods

    methods()  # load the real programs first
    register("_tinyqa", paper="test only", calls="1", summary="test-only retrieve-then-answer")(TinyQA)
    yield
    _REGISTRY.pop("_tinyqa", None)


@pytest.fixture
def tiny_retriever():
    return StaticRetriever(make_passages(6))


@pytest.fixture
def examples():
    return make_examples(8)


@pytest.fixture(name="make_examples")
def _make_examples_fixture():
    return make_examples


@pytest.fixture(name="echo_lm")
def _echo_lm_fixture():
    return echo_lm

