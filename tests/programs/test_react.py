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


def test_each_observation_is_what_that_search_returned_not_everything_gathered():
    docs = make_passages(6)
    retriever = StaticRetriever(docs, by_query={"first": docs[0:2], "second": docs[1:3], "third": []})
    lm = ScriptedLM({"step": [{"thought": "a", "action": "search", "argument": "first"},
                              {"thought": "b", "action": "search", "argument": "second"},
                              {"thought": "c", "action": "search", "argument": "third"},
                              {"thought": "d", "action": "finish", "argument": "Doc 2"}]})
    pred = run(programs.get("react", retriever=retriever, k=2), lm)
    assert lm.call_names == ["step"] * 4 and [q for q, _ in retriever.queries] == ["first", "second", "third"]
    trajectory = pred.trajectory
    assert len(trajectory) == 4 and trajectory[-1].endswith("Action: finish[Doc 2]")
    first, second, third = (entry.partition("Observation: ")[2] for entry in trajectory[:3])
    assert docs[0].long_text in first and docs[1].long_text in first and docs[2].long_text not in first
    assert docs[1].long_text in second and docs[2].long_text in second and docs[0].long_text not in second
    assert third == "(nothing found)"
    assert lm.calls_to("step")[3].inputs["trajectory"].count(docs[0].long_text) == 1  # shown once, where it was found
    assert [p.pid for p in pred.passages] == ["0", "1", "2"] and pred.searches == ["first", "second", "third"]


def test_defaults_are_the_documented_values():
    knobs = programs.info("react").knobs
    assert (knobs["k"], knobs["max_steps"]) == (5, 5)


def test_the_stage_record_names_the_searches_and_why_the_loop_ended():
    docs = make_passages(6)
    retriever = StaticRetriever(docs, by_query={"first": docs[0:2], "second": docs[1:3]})
    lm = ScriptedLM({"step": [{"thought": "a", "action": "search", "argument": "first"},
                              {"thought": "b", "action": "search", "argument": "second"},
                              {"thought": "d", "action": "finish", "argument": "Doc 2"}]})
    pred = run(programs.get("react", retriever=retriever, k=2), lm)
    hops = pred.stages["hops"]
    assert hops["queries"] == ["first", "second"] and hops["depth"] == 2 and hops["decision"] == "finish"
    assert [p.pid for p in hops["passages"]] == ["0", "1", "2"] and set(pred.stages) == {"hops"}
    lm = ScriptedLM({"step": {"thought": "t", "action": "search", "argument": "first"}, "finish": {"answer": "x"}})
    forced = run(programs.get("react", retriever=retriever, k=2, max_steps=2), lm)
    assert forced.stages["hops"]["decision"] == "max_steps" and set(forced.stages) == {"hops", "finish"}
