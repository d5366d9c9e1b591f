"""RA-ISF's stage records (each gate's decisions over the tree, sub-questions, depth) and attribution on
scripted runs: the relevance gate dropping the answer-bearing passage is "filtered_out"."""

from __future__ import annotations

from ragzoo.diagnostics import stage_summary
from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example, run

Q = "What is the capital of France?"


def _run(known=(), relevant=(), decompositions=None, answer="Lyon"):
    retriever = StaticRetriever([PARIS, *DISTRACTORS[:2]])
    lm = ScriptedLM({
        "self_knowledge": lambda c: {"can_answer": c.inputs["question"] in known},
        "direct_answer": lambda c: {"answer": "Paris" if c.inputs["question"] == Q else "x"},
        "relevance_judge": lambda c: {"relevant": any(c.inputs["passage"].startswith(t) for t in relevant)},
        "passages_answer": {"answer": answer},
        "decompose": lambda c: {"sub_questions": (decompositions or {}).get(c.inputs["question"], [])},
        "synthesize": {"answer": answer}})
    (record,) = run(get("raisf", retriever=retriever, k=3), lm, [example(Q, "Paris")])
    return record


def test_the_self_knowledge_gate_answers_closed_book_and_is_scored_on_that_answer():
    record = _run(known={Q})
    stages = record["stages"]
    assert stages["self_knowledge"] == {"calls": 1, "decision": True, "yes": 1, "asked": 1, "answer": "Paris"}
    assert stages["relevance"] == {"calls": 0, "passages": [], "kept": [], "gold": []}
    assert stages["answer"] == {"calls": 1, "route": "self_knowledge"}
    assert record["attribution"] == "correct"
    gate = stage_summary([record])["self_knowledge"]
    assert gate["decisions"] == {"True": 1.0} and gate["yes_precision"] == 1.0


def test_the_relevance_gate_dropping_the_gold_passage_is_filtered_out():
    record = _run(relevant=("Other 0",))
    stages = record["stages"]
    assert stages["self_knowledge"]["decision"] is False and "answer" not in stages["self_knowledge"]
    assert stages["relevance"]["calls"] == 3
    assert stages["relevance"]["passages"] == ["p1", "d0", "d1"] and stages["relevance"]["kept"] == ["d0"]
    assert stages["decomposition"] == {"calls": 0, "sub_questions": [], "depth": 0}
    assert record["attribution"] == "filtered_out"


def test_the_gold_passage_judged_relevant_then_misread_is_a_reader_miss():
    record = _run(relevant=("France",))
    assert record["stages"]["relevance"]["kept"] == ["p1"] and record["attribution"] == "reader_miss"


def test_decomposition_records_sub_questions_and_depth():
    record = _run(decompositions={Q: ["Which country is it?", "Which city?"]})
    decomposition = record["stages"]["decomposition"]
    assert decomposition["sub_questions"] == ["Which country is it?", "Which city?"]
    assert decomposition["depth"] == 1 and decomposition["calls"] >= 1
    gate = record["stages"]["self_knowledge"]
    assert gate["asked"] == 3 and gate["yes"] == 0  # the root and both sub-questions asked the gate
    assert record["stages"]["answer"]["route"] == "decomposition"
    assert stage_summary([record])["decomposition"]["depth"] == {1: 1}
