"""ReAct (programs/react.py): the thought / search / observation loop, the finish action, the step budget."""

from __future__ import annotations

import dspy

from ragzoo import programs
from ragzoo.lm import make_dry_run_lm
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Which doc answers the question?"


def run(program, lm):
    with dspy.context(lm=lm):
        return program(question=Q)


def test_search_then_finish_makes_one_call_per_step_and_one_retrieval_per_search():
    docs = make_passages(6)
    retriever = StaticRetriever(docs, by_query={"doc three": docs[3:5]})
    lm = ScriptedLM({"step": [{"thought": "look it up", "action": "search", "argument": "doc three"},
                              {"thought": "found it", "action": "finish", "argument": "Doc 3"}]})
    pred = run(programs.get("react", retriever=retriever, k=2), lm)
    assert lm.call_names == ["step", "step"] and retriever.queries == [("doc three", 2)]
    second = lm.calls_to("step")[1].inputs["trajectory"]
    assert docs[3].long_text in second and "search[doc three]" in second  # the observation is fed back
    assert lm.calls_to("step")[0].inputs["question"] == Q
    assert pred.answer == "Doc 3" and pred.stop_reason == "finish" and pred.passages == docs[3:5]


def test_the_step_budget_forces_a_final_answer_from_the_trajectory():
    retriever = StaticRetriever(make_passages(6))
    lm = ScriptedLM({"step": {"thought": "t", "action": "search", "argument": ""},
                     "finish": {"answer": "Yes."}})
    pred = run(programs.get("react", retriever=retriever, max_steps=3, answer_mode="yes_no"), lm)
    assert lm.call_names == ["step"] * 3 + ["finish"]
    assert [query for query, _ in retriever.queries] == [Q] * 3  # empty argument: search the question
    assert len(lm.calls_to("finish")[0].inputs["trajectory"]) > 0
    assert pred.answer == "yes" and pred.stop_reason == "max_steps"


def test_dry_run_takes_the_longest_path():
    retriever = StaticRetriever(make_passages(6))
    lm = make_dry_run_lm()
    pred = run(programs.get("react", retriever=retriever), lm)
    assert len(lm.history) == 6 and len(retriever.queries) == 5 and pred.stop_reason == "max_steps"
