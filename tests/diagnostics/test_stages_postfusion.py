"""Post-Fusion's and REPLUG's stage records (concatenation, fallback, per-passage answers, vote, distill) and
attribution on scripted runs: the gold passage outvoted by distractors is dropped by the vote ("filtered_out")."""

from __future__ import annotations

from ragzoo.diagnostics import stage_summary
from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example, run

Q = "What is the capital of France?"


def _run(method, script):
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={Q: [PARIS, *DISTRACTORS[:2]]})
    (record,) = run(get(method, retriever=retriever, k=3), ScriptedLM(script), [example(Q, "Paris")])
    return record


def test_concat_pf_falls_back_to_the_vote_that_outvotes_the_gold_passage():
    record = _run("concat_pf", {"concat_answer": {"answer": "unknown"},
                                "passage_answer": [{"answer": "Paris"}, {"answer": "Lyon"}, {"answer": "Lyon"}]})
    stages = record["stages"]
    assert list(stages) == ["retrieval", "concat", "fallback", "passage_answers", "vote"]
    assert stages["concat"] == {"calls": 1, "answer": "unknown"}
    assert stages["fallback"] == {"calls": 0, "decision": True}
    assert stages["passage_answers"] == {"calls": 3, "answers": ["Paris", "Lyon", "Lyon"]}
    assert stages["vote"]["kept"] == ["d0", "d1"] and stages["vote"]["gold"] == ["p1"]
    assert record["prediction"] == "Lyon" and record["attribution"] == "filtered_out"
    summary = stage_summary([record])
    assert abs(summary["passage_answers"]["vote_agreement"] - 2 / 3) < 1e-9
    assert summary["passage_answers"]["unknown_rate"] == 0.0
    assert summary["fallback"]["decisions"] == {"True": 1.0}
    assert summary["vote"]["filter_recall"] == 0.0 and summary["vote"]["filter_precision"] == 0.0


def test_concat_answering_directly_has_no_fallback_and_a_wrong_answer_is_a_reader_miss():
    record = _run("concat_pf", {"concat_answer": {"answer": "Lyon"}, "passage_answer": {"answer": "x"}})
    assert list(record["stages"]) == ["retrieval", "concat", "fallback"]
    assert record["stages"]["fallback"]["decision"] is False
    assert record["attribution"] == "reader_miss"


def test_all_passages_unknown_is_abstained_with_full_unknown_rate():
    record = _run("postfusion", {"passage_answer": {"answer": "unknown"}})
    assert record["stages"]["passage_answers"]["answers"] == ["unknown"] * 3
    assert record["attribution"] == "abstained"
    assert stage_summary([record])["passage_answers"]["unknown_rate"] == 1.0


def test_pf_concat_drops_unknown_passages_then_distills():
    record = _run("pf_concat", {"passage_answer": [{"answer": "unknown"}, {"answer": "Lyon"}, {"answer": "Lyon"}],
                                "distill": {"answer": "Lyon"}})
    stages = record["stages"]
    assert list(stages) == ["retrieval", "passage_answers", "vote", "distill"]
    assert stages["vote"]["kept"] == ["d0", "d1"] and stages["distill"] == {"calls": 1, "decision": True}
    assert record["attribution"] == "filtered_out"


def test_replug_weighted_vote_outvoting_the_gold_passage_is_filtered_out():
    record = _run("replug", {"passage_answer": [{"answer": "Paris"}, {"answer": "Lyon"}, {"answer": "Lyon"}]})
    stages = record["stages"]
    assert list(stages) == ["retrieval", "passage_answers", "vote"]
    assert stages["passage_answers"] == {"calls": 3, "answers": ["Paris", "Lyon", "Lyon"]}
    assert stages["vote"]["kept"] == ["d0", "d1"] and record["attribution"] == "filtered_out"
