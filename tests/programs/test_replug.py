"""REPLUG (programs/replug.py): k single-passage calls, votes weighted by the softmax of retrieval scores."""

from __future__ import annotations

import json
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


def test_ties_go_to_the_best_ranked_passage():
    # equal summed weights: the answer first given by the better-ranked passage wins, whichever order they tie in
    assert weighted_vote(["x", "y"], [0.5, 0.5])[0] == "x"
    assert weighted_vote(["y", "x", "x", "y"], [0.25] * 4)[0] == "y"
    assert weighted_vote(["unknown", "b", "a"], [0.6, 0.2, 0.2])[0] == "b"  # abstentions do not take a rank
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS})
    lm = ScriptedLM({"passage_answer": answer_by_passage(["Ann", "Bob", "Bob", "Ann"])})
    with dspy.context(lm=lm):
        pred = programs.get("replug", retriever=retriever, k=4, weighting="uniform")(question=Q)
    assert pred.answer == "Ann" and [p.pid for p in pred.passages] == ["0", "3"]


def test_ragzoo_methods_replug_names_what_differs_from_the_citing_paper(capsys):
    from ragzoo.cli import main

    assert main(["methods", "replug"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "differs from the paper:" in out
    # RA-ISF describes REPLUG by its retriever fine-tuning (LSR); ragzoo ensembles answers by retrieval score
    assert "fine-tun" in out and "not reproduced" in out and "weighted by" in out
    assert main(["methods", "replug", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert any("fine-tun" in text for text in row["differences"])


def test_paper_tables_names_the_replug_difference():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "paper_tables.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| REPLUG"))
    assert "fine-tun" in row and "not reproduced" in row


def test_the_passages_returned_are_those_whose_answer_won_after_normalisation():
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS})
    lm = ScriptedLM({"passage_answer": answer_by_passage(["The Beatles.", "beatles", "Stones", "unknown"])})
    with dspy.context(lm=lm):
        pred = programs.get("replug", retriever=retriever, k=4, weighting="uniform")(question=Q)
    assert pred.answer == "The Beatles." and [p.pid for p in pred.passages] == ["0", "1"]
    assert pred.votes == ["The Beatles.", "beatles", "Stones", "unknown"] and [p.pid for p in pred.retrieved] == \
        ["0", "1", "2", "3"]


def test_float_sums_that_tie_are_a_tie():
    # 0.1 + 0.2 is 0.30000000000000004: the later passages' answer must not beat the top passage's 0.3 by rounding
    assert weighted_vote(["a", "b", "b"], [0.3, 0.1, 0.2])[0] == "a"


def test_no_passage_retrieved_answers_unknown_with_no_call():
    retriever = StaticRetriever([], by_query={Q: []})
    lm = ScriptedLM({})
    with dspy.context(lm=lm):
        pred = programs.get("replug", retriever=retriever)(question=Q)
    assert lm.call_names == [] and pred.answer == "unknown" and pred.weights == [] and pred.passages == []
    assert replug_weights([]) == []


def test_replug_defaults_are_the_documented_values():
    knobs = programs.info("replug").knobs
    assert (knobs["k"], knobs["temperature"], knobs["weighting"]) == (5, 1.0, "softmax")


def test_every_passage_s_answer_is_a_candidate_in_rank_order():
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS})
    lm = ScriptedLM({"passage_answer": answer_by_passage(["Ann", "Bob", "bob.", "unknown"])})
    with dspy.context(lm=lm):
        pred = programs.get("replug", retriever=retriever, k=4)(question=Q)
    assert pred.candidates == ["Ann", "Bob", "bob.", "unknown"]  # one per retrieved passage, best rank first
