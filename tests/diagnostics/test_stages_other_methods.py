"""Stage records of Least-to-Most, Self-Refine, Guideline and SKR on scripted runs whose class is known: a
summary that loses the answer is "filtered_out"; closed-book methods retrieve nothing ("retrieval_miss")."""

from __future__ import annotations

import dspy
import numpy as np

from ragzoo.diagnostics import stage_summary
from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example, run

Q = "What is the capital of France?"


def test_least_to_most_records_sub_questions_and_is_closed_book():
    lm = ScriptedLM({"reduce": {"sub_questions": ["Which country?", " "]}, "solve_step": {"answer": "France"},
                     "final_answer": {"answer": "Lyon"}})
    (record,) = run(get("least_to_most"), lm, [example(Q, "Paris")])
    assert record["stages"] == {"reduce": {"calls": 1, "sub_questions": ["Which country?"], "depth": 1},
                                "solve": {"calls": 1, "skipped": 0}, "final": {"calls": 1}}
    assert record["gold_pids"] == [] and record["attribution"] == "retrieval_miss"


def _self_refine(summary, **knobs):
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={Q: [PARIS, DISTRACTORS[0]]})
    lm = ScriptedLM({"summarize": {"summary": summary}, "answer": {"answer": "Lyon"}})
    (record,) = run(get("self_refine", retriever=retriever, k=2, **knobs), lm, [example(Q, "Paris")])
    return record


def test_self_refine_summary_that_drops_the_answer_is_filtered_out_and_one_that_keeps_it_a_reader_miss():
    lost = _self_refine("France is a country in Europe.")
    stages = lost["stages"]
    assert stages["summarize"] == {"calls": 1, "decision": True,
                                   "context_chars": len("France is a country in Europe.")}
    assert stages["retrieval"]["gold"] == ["p1"] and stages["reader"] == {"calls": 1}
    assert lost["reached"] is False and lost["attribution"] == "filtered_out"
    kept = _self_refine("Its capital is Paris.")
    assert kept["reached"] is True and kept["attribution"] == "reader_miss"
    assert stage_summary([lost, kept])["summarize"]["context_chars"] == (30 + 21) / 2


def test_guideline_records_its_three_calls():
    lm = ScriptedLM({"cot": {"reasoning": "r", "answer": "Paris"}, "guide": {"analysis": "a"},
                     "merge": {"reasoning": "m", "answer": "Paris"}})
    (record,) = run(get("guideline"), lm, [example(Q, "Paris")])
    assert record["stages"] == {"cot": {"calls": 1, "answer": "Paris"}, "guide": {"calls": 1, "decision": True},
                                "merge": {"calls": 1}}
    assert record["attribution"] == "correct"


def test_skr_decision_then_retrieval_and_reader():
    program = get("skr", retriever=StaticRetriever([PARIS, *DISTRACTORS]), k=2, neighbours=1)
    object.__setattr__(program, "embed", lambda texts: np.array([[1.0, 0.0] for _ in texts]))
    program.memory.demos = [dspy.Example(question="capital?", retrieve=True).with_inputs("question")]
    (record,) = run(program, ScriptedLM({"rag_answer": {"answer": "Lyon"}}), [example(Q, "Paris")])
    assert list(record["stages"]) == ["decision", "retrieval", "reader"]
    assert record["stages"]["decision"] == {"calls": 0, "decision": "retrieve"}
    assert record["stages"]["retrieval"]["gold"] == ["p1"] and record["stages"]["reader"] == {"calls": 1}
    assert record["attribution"] == "reader_miss"
