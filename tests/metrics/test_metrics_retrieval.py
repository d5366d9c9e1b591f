"""Title-level retrieval metrics (BlendFilter's recall, precision, S-precision; all-gold@k) and
Post-Fusion's unknown and vote-miss rates."""

from __future__ import annotations

import dspy
import pytest

from ragzoo import metrics
from ragzoo.errors import DataError
from ragzoo.metrics import (all_gold_retrieved, is_unknown, retrieval_report, retrieved_titles, s_precision,
                            title_precision, title_recall, unknown_rate, vote_miss, vote_miss_rate)
from ragzoo.retrieval.base import Passage

GOLD = ["Scott Derrickson", "Ed Wood"]


def passages(*titles):
    return [Passage(pid=str(i), title=title, text=f"text {i}") for i, title in enumerate(titles)]


def test_hand_checked_title_metrics():
    retrieved = passages("Scott Derrickson", "Ed Wood (film)", "Ed Wood", "Tyler Bates")
    assert title_recall(retrieved, GOLD) == 1.0
    assert title_precision(retrieved, GOLD) == 0.5
    assert s_precision(retrieved, GOLD) == 0.0
    assert all_gold_retrieved(retrieved, GOLD, k=2) == 0.0 and all_gold_retrieved(retrieved, GOLD, k=3) == 1.0
    assert title_recall(retrieved, GOLD, k=2) == 0.5 and title_precision(retrieved, GOLD, k=2) == 0.5
    exact = passages("Ed Wood", "Scott Derrickson", "Ed Wood")  # order and repeats do not matter
    assert s_precision(exact, GOLD) == 1.0 and title_precision(exact, GOLD) == 1.0
    assert title_precision([], GOLD) == 0.0 and title_recall([], GOLD) == 0.0


def test_passage_forms_and_title_normalization():
    mixed = ["scott derrickson | Scott Derrickson is ...", {"title": "ED  WOOD", "text": "x"},
             {"long_text": "A | the letter"}, "no separator here"]
    assert retrieved_titles(mixed) == ["scott derrickson", "ed wood", "a"]
    assert title_recall(mixed, GOLD) == 1.0
    # titles keep articles and punctuation: "A" is a real title, and "Cars (film)" is not "Cars film"
    assert title_recall(passages("A"), ["A"]) == 1.0
    assert title_recall(passages("Cars film"), ["Cars (film)"]) == 0.0
    with pytest.raises(ValueError):
        title_recall(passages("x"), [])


@pytest.mark.needs_full_data
def test_on_real_distractor_paragraphs(data_dir):
    from ragzoo import data

    examples = data.load("hotpotqa", "dev_distractor", n=50, seed=0)
    preds = [dspy.Prediction(answer="", passages=[Passage(str(i), c["title"], c["text"])
                                                  for i, c in enumerate(e.contexts)]) for e in examples]
    report = retrieval_report(examples, preds)
    assert report["n"] == 50 and report["recall"] == 1.0 and report["all_gold"] == 1.0
    assert report["precision"] == pytest.approx(0.2, abs=0.02) and report["s_precision"] == 0.0
    supporting = [dspy.Prediction(passages=[f"{c['title']} | {c['text']}" for c in e.contexts if c["is_supporting"]])
                  for e in examples]
    assert retrieval_report(examples, supporting)["s_precision"] == 1.0
    assert metrics.get_metric("s_precision")(examples[0], supporting[0]) == 1.0


def test_metric_forms_read_example_and_pred():
    example = dspy.Example(question="q", answers=["x"], supporting_titles=GOLD)
    pred = dspy.Prediction(answer="x", passages=passages("Ed Wood", "Other"))
    assert metrics.get_metric("recall")(example, pred) == 0.5
    assert metrics.get_metric("precision")(example, pred) == 0.5
    assert metrics.get_metric("all_gold")(example, pred) == 0.0
    context_only = dspy.Prediction(answer="x", context=["Ed Wood | ...", "Scott Derrickson | ..."])
    assert metrics.get_metric("s_precision")(example, context_only) == 1.0
    for failed in (None, ValueError("parse"), dspy.Prediction(answer="x")):
        assert metrics.recall_metric(example, failed) == 0.0
    facts_only = dspy.Example(question="q", answers=["x"], supporting_facts=[["Ed Wood", 0], ["Ed Wood", 2]])
    assert metrics.recall_metric(facts_only, pred) == 1.0
    with pytest.raises(DataError, match="no gold titles"):
        metrics.recall_metric(dspy.Example(question="q", answers=["x"], id="n1"), pred)
    report = retrieval_report([example, dspy.Example(question="q", answers=["x"])], [pred, pred])
    assert report["n"] == 1 and report["skipped"] == 1 and report["recall"] == 0.5


# --- Post-Fusion rates ---------------------------------------------------------------------------------

def test_unknown_detection():
    assert is_unknown("Unknown") and is_unknown(" unknown. ") and is_unknown("UNKNOWN!")
    assert not is_unknown("unknown soldier") and not is_unknown("A")
    # issue 12: an empty answer is an abstention, as the programs treat it (one definition, see below)
    assert is_unknown("") and is_unknown("  ") and is_unknown(None)
    refusal = "The provided context does not contain the answer."
    assert not is_unknown(refusal) and is_unknown(refusal, refusals=True)
    assert is_unknown("I don't know", refusals=True) and not is_unknown("Denver", refusals=True)
    preds = [dspy.Prediction(answer="unknown"), dspy.Prediction(answer="Paris"), None, "Unknown."]
    assert unknown_rate(preds) == 0.5 and unknown_rate([]) == 0.0  # a failed (None) prediction is not unknown
    example = dspy.Example(question="q", answers=["Paris"])
    assert metrics.get_metric("unknown")(example, preds[0]) == 1.0
    assert metrics.get_metric("unknown")(example, ValueError("x")) == 0.0


def test_vote_miss():
    golds = ["Paris"]
    assert vote_miss("Lyon", ["Lyon", "Lyon", "paris"], golds)          # gold in pool, not chosen
    assert not vote_miss("Paris", ["Lyon", "Paris"], golds)             # chosen
    assert not vote_miss("Lyon", ["Lyon", "unknown"], golds)            # gold never in pool: not a vote miss
    example = dspy.Example(question="q", answers=golds)
    missed = dspy.Prediction(answer="Lyon", votes=["Lyon", "Lyon", "Paris"])
    hit = dspy.Prediction(answer="Paris", candidates=["Paris", "Lyon"])
    no_pool = dspy.Prediction(answer="Lyon")                            # e.g. Concat+PF answered in round 1
    assert metrics.get_metric("vote_miss")(example, missed) == 1.0
    assert metrics.vote_miss_metric(example, hit) == 0.0 and metrics.vote_miss_metric(example, no_pool) == 0.0
    assert metrics.vote_miss_metric(example, None) == 0.0
    examples = [example] * 4
    preds = [missed, hit, no_pool, dspy.Prediction(answer="Rome", answer_pool=["Rome"])]
    assert vote_miss_rate(examples, preds) == 0.25
    assert vote_miss_rate(examples, preds, denominator="pool_has_gold") == 0.5
    with pytest.raises(ValueError):
        vote_miss_rate(examples, preds, denominator="some")


# --- one definition of "unknown" (issue 12) -------------------------------------------------------------

SHAPES = ["unknown", "Unknown.", "", "   ", None, "A", "the unknown", "N/A", "Paris", "I don't know",
          "The context does not provide the answer.", "cannot be determined", "unknown soldier"]


@pytest.mark.parametrize("lenient", [False, True])
def test_programs_and_unknown_rate_share_one_definition(lenient):
    from ragzoo.programs import voting

    for answer in SHAPES:
        assert voting.is_unknown(answer, lenient) == is_unknown(answer, refusals=lenient), answer


def test_unknown_rate_counts_the_empty_answers_concat_pf_falls_back_on():
    from ragzoo.metrics.rates import unknown_metric

    preds = [dspy.Prediction(answer=""), dspy.Prediction(answer="Paris"), RuntimeError("failed")]
    assert unknown_rate(preds) == pytest.approx(1 / 3)
    assert unknown_metric(None, preds[0]) == 1.0 and unknown_metric(None, preds[2]) == 0.0


def test_one_gold_title_given_as_a_string_is_one_title():
    """Review: a CSV cell (or a JSONL string) of one title was read letter by letter: recall 0 and no gold pid."""
    from ragzoo.metrics.retrieval import gold_titles

    assert gold_titles({"supporting_titles": "Ed Wood (film)"}) == ["Ed Wood (film)"]
    assert gold_titles({"gold_titles": ["Ed Wood (film)", "Scott Derrickson"]}) == ["Ed Wood (film)",
                                                                                    "Scott Derrickson"]
