"""Least-to-most and IRCoT (RA-ISF's baselines): which calls, what each sees, how answers chain."""

from __future__ import annotations

import json

import dspy

from ragzoo import programs
from ragzoo.lm import make_dry_run_lm
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Who is the mother of the director of Polish-Russian War?"


def run(program, lm):
    with dspy.context(lm=lm):
        return program(question=Q)


def test_least_to_most_solves_sub_questions_in_order_each_seeing_the_earlier_answers():
    lm = ScriptedLM({"reduce": {"sub_questions": ["Who directed it?", " ", "Who is her mother?"]},
                     "solve_step": [{"answer": "Xawery Zulawski"}, {"answer": "Malgorzata Braunek"}],
                     "final_answer": {"answer": "Malgorzata Braunek"}})
    pred = run(programs.get("least_to_most"), lm)
    assert lm.call_names == ["reduce", "solve_step", "solve_step", "final_answer"]
    first, second = lm.calls_to("solve_step")
    assert first.inputs["question"] == "Who directed it?" and json.loads(first.inputs["solved"]) == []
    assert json.loads(second.inputs["solved"]) == ["Q: Who directed it? A: Xawery Zulawski"]
    final = lm.calls_to("final_answer")[0].inputs
    assert final["question"] == Q and len(json.loads(final["solved"])) == 2
    assert pred.answer == "Malgorzata Braunek" and pred.passages == []
    assert not programs.info("least_to_most").uses_retrieval


def test_least_to_most_caps_sub_questions_and_reads_yes_no():
    lm = ScriptedLM({"reduce": {"sub_questions": [f"s{i}?" for i in range(9)]}, "solve_step": {"answer": "x"},
                     "final_answer": {"answer": "No."}})
    pred = run(programs.get("least_to_most", max_subquestions=2, answer_mode="yes_no"), lm)
    assert lm.call_names == ["reduce", "solve_step", "solve_step", "final_answer"] and pred.answer == "no"


def test_ircot_retrieves_with_each_reasoning_sentence_until_done():
    docs = make_passages(12)
    retriever = StaticRetriever(docs, by_query={Q: docs[0:2], "Doc 1 names a director.": docs[1:4]})
    lm = ScriptedLM({"reason": [{"next_sentence": "Doc 1 names a director.", "done": False},
                                {"next_sentence": "So the answer is Doc 3.", "done": True}],
                     "read": {"answer": "Doc 3"}})
    pred = run(programs.get("ircot", retriever=retriever, k=2), lm)
    assert lm.call_names == ["reason", "reason", "read"]
    assert retriever.queries == [(Q, 2), ("Doc 1 names a director.", 2)]
    second = lm.calls_to("reason")[1].inputs
    assert json.loads(second["reasoning_so_far"]) == ["Doc 1 names a director."]
    assert [p.pid for p in pred.passages] == ["0", "1", "2"]  # deduplicated, first retrieved first
    read = lm.calls_to("read")[0].inputs
    assert read["reasoning"] == "Doc 1 names a director. So the answer is Doc 3."
    assert len(json.loads(read["context"])) == 3 and pred.answer == "Doc 3" and pred.stop_reason == "done"


def test_ircot_dry_run_takes_the_step_budget():
    retriever = StaticRetriever(make_passages(30))
    lm = make_dry_run_lm()
    pred = run(programs.get("ircot", retriever=retriever, max_steps=3), lm)
    assert len(lm.history) == 4 and len(retriever.queries) == 4 and pred.stop_reason == "max_steps"
