"""REPLUG (programs/replug.py): k single-passage calls, votes weighted by the softmax of retrieval scores."""

from __future__ import annotations

import math

import dspy
import pytest

from ragzoo import programs
from ragzoo.programs.replug import replug_weights, weighted_vote
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever

Q = "Who wrote it?"
DOCS = [Passage(pid=str(i), title=f"Doc {i}", text=f"text {i}", score=s) for i, s in enumerate([3.0, 1.0, 1.0, 0.5])]


def answer_by_passage(answers):
    return lambda c: {"answer": answers[next(i for i in range(len(DOCS)) if f"Doc {i} |" in c.inputs["context"])]}


def test_one_call_per_passage_each_seeing_only_its_passage_and_a_score_weighted_vote():
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS})
    # Doc 0 alone (weight e^3) outweighs Docs 1 + 2 together (2 e^1): the top passage wins
    lm = ScriptedLM({"passage_answer": answer_by_passage(["Ann", "Bob", "bob.", "unknown"])})
    with dspy.context(lm=lm):
        pred = programs.get("replug", retriever=retriever, k=4)(question=Q)
    assert lm.call_names == ["passage_answer"] * 4 and retriever.queries == [(Q, 4)]
    for call, doc in zip(lm.calls, DOCS):
        assert doc.long_text in call.inputs["context"] and all(
            other.long_text not in call.inputs["context"] for other in DOCS if other is not doc)
    assert pred.answer == "Ann" and [p.pid for p in pred.passages] == ["0"]
    assert pred.weights == pytest.approx(replug_weights([3.0, 1.0, 1.0, 0.5]))
    lm = ScriptedLM({"passage_answer": answer_by_passage(["Ann", "Bob", "bob.", "unknown"])})
    with dspy.context(lm=lm):
        uniform = programs.get("replug", retriever=retriever, k=4, weighting="uniform")(question=Q)
    assert uniform.answer == "Bob"  # two votes to one once the scores do not count


def test_weights_and_vote_rules():
    weights = replug_weights([2.0, 0.0], temperature=1.0)
    assert weights == pytest.approx([math.e ** 2 / (math.e ** 2 + 1), 1 / (math.e ** 2 + 1)])
    assert replug_weights([2.0, 0.0], temperature=100.0)[0] == pytest.approx(0.5, abs=0.01)
    assert weighted_vote(["unknown", ""], [0.5, 0.5])[0] == "unknown"
    assert weighted_vote(["A b", "c", "a B"], [0.3, 0.4, 0.3])[0] == "A b"
