"""The attribution rule (ragzoo.diagnostics) on hand-built records whose class is known, and the summaries the
report prints from them."""

from __future__ import annotations

from ragzoo.diagnostics import attribute, attribution_summary, flips, format_flips, stage_summary


def record(prediction="Lyon", em=0.0, passages=("p1", "d1"), gold=("p1",), stages=None, error=None,
           evidence="answer", qid="q"):
    return {"id": qid, "prediction": prediction, "gold": ["Paris"], "metrics": {"em": em},
            "passages": [{"pid": pid, "title": None} for pid in passages], "error": error,
            "stages": stages if stages is not None else {"retrieval": {"calls": 0, "passages": list(passages)}},
            "gold_pids": list(gold), "evidence": evidence}


def test_each_class_by_its_rule():
    assert attribute(record(error={"kind": "lm", "message": "boom"})) == "failed"
    assert attribute(record(prediction="Paris", em=1.0)) == "correct"
    assert attribute(record(prediction="unknown")) == "abstained"
    assert attribute(record(prediction="")) == "abstained"
    assert attribute(record(gold=())) == "retrieval_miss"
    # the gold passage was retrieved by some stage but the final call saw only a distractor
    dropped = record(passages=("d1",), gold=("p1",),
                     stages={"retrieval": {"calls": 0, "passages": ["p1", "d1"]},
                             "filter": {"calls": 1, "passages": ["p1", "d1"], "kept": ["d1"]}})
    assert attribute(dropped) == "filtered_out"
    assert attribute(record()) == "reader_miss"


def test_failure_wins_over_everything_and_unjudged_records_are_not_computed():
    assert attribute(record(prediction="Paris", em=1.0, error={"kind": "timeout"})) == "failed"
    assert attribute(record(evidence=None)) is None  # yes/no data: no passage can be judged
    older = {"id": "q", "prediction": "Lyon", "metrics": {"em": 0.0}, "passages": [], "error": None}
    assert attribute(older) is None  # a run written before stage records
    assert attribute({**older, "prediction": "unknown"}) == "abstained"


def test_summary_counts_shares_and_wilson_intervals():
    labels = ["correct"] * 3 + ["retrieval_miss"] + [None]
    summary = attribution_summary([{"attribution": label} for label in labels])
    assert summary["n"] == 5 and summary["not_computed"] == 1
    correct = summary["classes"]["correct"]
    assert correct["count"] == 3 and correct["share"] == 0.6
    low, high = correct["ci"]
    assert 0.2 < low < 0.6 < high < 0.95


def test_flips_by_the_losers_class():
    a = [{"id": "1", "metrics": {"em": 1.0}, "attribution": "correct"},
         {"id": "2", "metrics": {"em": 1.0}, "attribution": "correct"},
         {"id": "3", "metrics": {"em": 0.0}, "attribution": "reader_miss"},
         {"id": "4", "metrics": {"em": 0.0}, "attribution": "abstained"}]
    b = [{"id": "1", "metrics": {"em": 0.0}, "attribution": "retrieval_miss"},
         {"id": "2", "metrics": {"em": 0.0}, "attribution": "retrieval_miss"},
         {"id": "3", "metrics": {"em": 1.0}, "attribution": "correct"},
         {"id": "4", "metrics": {"em": 0.0}, "attribution": "filtered_out"}]
    found = flips(a, b)
    assert found["a_right_b_wrong"] == {"count": 2, "by_class": {"retrieval_miss": 2}}
    assert found["b_right_a_wrong"] == {"count": 1, "by_class": {"reader_miss": 1}}
    text = format_flips(found, "rag", "filco")
    assert "rag right, filco wrong: 2, of which filco retrieval miss 2" in text
    assert "filco right, rag wrong: 1, of which rag reader miss 1" in text


def test_stage_summary_filter_precision_recall_votes_gates_depth():
    records = [
        {"gold": ["Paris"], "evidence": "answer",
         "stages": {"filter": {"calls": 2, "passages": ["p1", "p2", "d1", "d2"], "kept": ["p1", "d1"],
                               "gold": ["p1", "p2"], "context_chars": 100},
                    "answers": {"calls": 3, "answers": ["Paris", "paris", "unknown", "Lyon"]},
                    "self_knowledge": {"calls": 1, "decision": True, "answer": "Paris"},
                    "decompose": {"calls": 0, "depth": 1}}},
        {"gold": ["Rome"], "evidence": "answer",
         "stages": {"filter": {"calls": 2, "passages": ["p1"], "kept": [], "gold": [], "context_chars": 0},
                    "answers": {"calls": 3, "answers": ["unknown"]},
                    "self_knowledge": {"calls": 1, "decision": True, "answer": "Milan"},
                    "decompose": {"calls": 0, "depth": 1}}},
    ]
    summary = stage_summary(records)
    flt = summary["filter"]
    assert flt["calls"] == 2 and flt["kept"] == 1.0 and flt["context_chars"] == 50
    assert flt["filter_precision"] == 0.5  # record 1: 1 gold of 2 kept; record 2 kept nothing
    assert flt["filter_recall"] == 0.5  # record 1: 1 of the 2 gold offered kept
    votes = summary["answers"]
    assert votes["unknown_rate"] == 2 / 5
    assert abs(votes["vote_agreement"] - 2 / 3) < 1e-9  # "Paris"x2 of 3 non-unknown answers
    assert votes["vote_miss"] == 0.5  # record 1: Paris in the pool, no right final answer; record 2: no gold in it
    gate = summary["self_knowledge"]
    assert gate["decisions"] == {"True": 1.0} and gate["yes_precision"] == 0.5 and "decision_accuracy" not in gate
    assert summary["decompose"]["depth"] == {1: 2}


def test_a_diagnostics_error_keeps_the_paid_answer_and_says_so(monkeypatch, caplog):
    import ragzoo.diagnostics as diagnostics
    from ragzoo.programs import get
    from ragzoo.testing import ScriptedLM, StaticRetriever

    from .helpers import PARIS, example, run

    def broken(example):
        raise KeyError("boom")

    monkeypatch.setattr(diagnostics, "_evidence_judge", broken)
    lm = ScriptedLM({"generate_answer": {"answer": "Lyon"}})
    with caplog.at_level("WARNING"):
        (record,) = run(get("rag", retriever=StaticRetriever([PARIS]), k=1), lm, [example()])
    assert record["prediction"] == "Lyon" and record["error"] is None
    assert record["stages_error"] == "KeyError: 'boom'" and "stages" not in record
    assert record["attribution"] is None
    assert any("stage diagnostics" in r.getMessage() for r in caplog.records)
