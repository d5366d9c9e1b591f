"""ActiveRAG's baselines (Table 2 / Table 8): Chain-of-Note, Self-Rerank, Self-Refine, Guideline."""

from __future__ import annotations

import json

import dspy

from ragzoo import programs
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Who produced The Woods?"
DOCS = make_passages(6)


def run(method, script, **knobs):
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS[:5]})
    info = programs.info(method)
    program = programs.get(method, retriever=retriever if info.uses_retrieval else None, **knobs)
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        pred = program(question=Q)
    return pred, lm, retriever


def test_chain_of_note_is_one_call_over_numbered_passages():
    pred, lm, retriever = run("chain_of_note", {"read": {"notes": "[1] irrelevant ...", "answer": "Doc 2"}})
    assert lm.call_names == ["read"] and retriever.queries == [(Q, 5)]
    shown = json.loads(lm.calls[0].inputs["passages"])
    assert shown == [f"[{i + 1}] {d.long_text}" for i, d in enumerate(DOCS[:5])]
    assert pred.answer == "Doc 2" and pred.notes == "[1] irrelevant ..."


def test_self_rerank_answers_from_the_passages_tagged_useful_and_relevant():
    script = {"tag": {"reasons": "r", "useful": [4, 2, 9], "relevant": [2, 3, 4]}, "answer": {"answer": "x"}}
    pred, lm, _ = run("self_rerank", script)
    assert lm.call_names == ["tag", "answer"]
    assert json.loads(lm.calls_to("answer")[0].inputs["context"]) == [DOCS[1].long_text, DOCS[3].long_text]
    assert [p.pid for p in pred.passages] == ["1", "3"] and pred.useful == [2, 4]
    pred, lm, _ = run("self_rerank", script, keep="relevant")
    assert [p.pid for p in pred.passages] == ["1", "2", "3"]


def test_self_refine_answers_from_its_summary_instead_of_the_passages():
    script = {"summarize": {"summary": "Doc 2 names the producer."}, "answer": {"answer": "x"}}
    pred, lm, _ = run("self_refine", script)
    assert lm.call_names == ["summarize", "answer"]
    assert json.loads(lm.calls_to("answer")[0].inputs["context"]) == ["Doc 2 names the producer."]
    assert DOCS[0].long_text in lm.calls_to("summarize")[0].inputs["passages"]
    pred, lm, _ = run("self_refine", script, answer_sees="summary_and_passages")
    assert len(json.loads(lm.calls_to("answer")[0].inputs["context"])) == 6


def test_guideline_merges_a_guiding_analysis_with_the_whole_cot_reply_without_retrieval():
    script = {"cot": {"reasoning": "I recall B.", "answer": "B"}, "guide": {"analysis": "Find the producer."},
              "merge": {"reasoning": "checked", "answer": "M"}}
    pred, lm, _ = run("guideline", script)
    assert lm.call_names == ["cot", "guide", "merge"]
    merge = lm.calls_to("merge")[0].inputs
    assert merge["analysis"] == "Find the producer." and "I recall B." in merge["other_reasoning"]
    assert "Answer: B" in merge["other_reasoning"] and lm.calls_to("guide")[0].inputs == {"question": Q}
    assert pred.answer == "M" and not programs.info("guideline").uses_retrieval
