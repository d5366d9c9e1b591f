"""Stage records of the baselines (rag, closed-book, multihop) on scripted runs whose class is known."""

from __future__ import annotations

from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, SEINE, example, run


def test_rag_records_retrieval_and_reader_and_attributes_reader_miss_and_retrieval_miss():
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={
        "What is the capital of France?": [PARIS, DISTRACTORS[0]],
        "What is the capital of Spain?": DISTRACTORS[:2]})
    lm = ScriptedLM({"generate_answer": {"answer": "Lyon"}})
    spain = example("What is the capital of Spain?", "Madrid", qid="q2")
    first, second = run(get("rag", retriever=retriever, k=2), lm, [example(), spain])
    assert list(first["stages"]) == ["retrieval", "reader"]
    assert first["stages"]["retrieval"] == {"calls": 0, "passages": ["p1", "d0"], "gold": ["p1"]}
    assert first["stages"]["reader"] == {"calls": 1}
    assert first["evidence"] == "answer" and first["gold_pids"] == ["p1"]
    assert first["attribution"] == "reader_miss"
    assert second["attribution"] == "retrieval_miss" and second["gold_pids"] == []


def test_rag_correct_and_abstained_and_failed():
    retriever = StaticRetriever([PARIS, *DISTRACTORS])
    lm = ScriptedLM({"generate_answer": [{"answer": "Paris"}, {"answer": "unknown"}]})
    right, unknown = run(get("rag", retriever=retriever, k=2), lm, [example(qid="q1"), example(qid="q2")])
    assert (right["attribution"], unknown["attribution"]) == ("correct", "abstained")
    failing = ScriptedLM({"generate_answer": lambda context: (_ for _ in ()).throw(RuntimeError("LM down"))})
    (failed,) = run(get("rag", retriever=retriever, k=2), failing, [example()])
    assert failed["error"] and failed["attribution"] == "failed"


def test_closed_book_retrieves_nothing_so_a_wrong_answer_is_a_retrieval_miss():
    lm = ScriptedLM({"generate_answer": {"answer": "Lyon"}})
    (record,) = run(get("direct"), lm, [example()])
    assert record["stages"] == {"reader": {"calls": 1, "passages": [], "gold": []}}
    assert record["attribution"] == "retrieval_miss"


def test_multihop_hops_with_title_recall_on_hotpot_style_gold():
    retriever = StaticRetriever([PARIS, SEINE, *DISTRACTORS], by_query={
        "france": [PARIS, DISTRACTORS[0]], "river": [DISTRACTORS[1], DISTRACTORS[2]]})
    lm = ScriptedLM({"generate_query": [{"reasoning": "r", "search_query": "france"},
                                        {"reasoning": "r", "search_query": "river"}],
                     "generate_answer": {"reasoning": "r", "answer": "Lyon"}})
    (record,) = run(get("multihop", retriever=retriever, k=2), lm,
                    [example(titles=["France", "Seine"])])
    hops = record["stages"]["hops"]
    assert hops["calls"] == 2 and hops["queries"] == ["france", "river"] and hops["depth"] == 2
    assert hops["passages"] == ["p1", "d0", "d1", "d2"] and hops["gold"] == ["p1"]
    assert hops["recall"] == 0.5  # France found, Seine not
    assert record["stages"]["reader"] == {"calls": 1}
    assert record["evidence"] == "titles" and record["attribution"] == "reader_miss"
