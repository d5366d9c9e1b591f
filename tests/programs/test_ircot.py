"""IRCoT (programs/ircot.py) beside Trivedi et al. 2023: the gathered-passage cap, the step budget, the defaults."""

from __future__ import annotations

import json

import dspy

from ragzoo import programs
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Who is the mother of the director of Polish-Russian War?"


def run(program, lm):
    with dspy.context(lm=lm):
        return program(question=Q)


def reasoning(*sentences, done_last=True):
    return [{"next_sentence": s, "done": done_last and i == len(sentences) - 1} for i, s in enumerate(sentences)]


def test_gathered_passages_are_capped_at_max_passages_first_retrieved_first():
    docs = make_passages(12)
    retriever = StaticRetriever(docs, by_query={Q: docs[0:4], "step one.": docs[4:8], "step two.": docs[8:12]})
    lm = ScriptedLM({"reason": reasoning("step one.", "step two.", "done."), "read": {"answer": "x"}})
    pred = run(programs.get("ircot", retriever=retriever, k=4, max_passages=3), lm)
    assert lm.call_names == ["reason"] * 3 + ["read"]
    assert [q for q, _ in retriever.queries] == [Q, "step one.", "step two."]  # every query still retrieves
    seen = [len(json.loads(call.inputs["context"])) for call in lm.calls_to("reason")]
    assert seen == [3, 3, 3]  # the first retrieval alone is cut to the cap, and later ones add nothing beyond it
    read = json.loads(lm.calls_to("read")[0].inputs["context"])
    assert [p.pid for p in pred.passages] == ["0", "1", "2"] and len(read) == 3 and read[0].startswith("Doc 0 |")


def test_the_cap_keeps_later_passages_while_there_is_room():
    docs = make_passages(12)
    retriever = StaticRetriever(docs, by_query={Q: docs[0:2], "step one.": docs[1:4]})
    lm = ScriptedLM({"reason": reasoning("step one.", "done."), "read": {"answer": "x"}})
    pred = run(programs.get("ircot", retriever=retriever, k=3, max_passages=3), lm)
    # Doc 1 comes back twice (kept once); Doc 2 fills the cap; Doc 3 is cut
    assert [p.pid for p in pred.passages] == ["0", "1", "2"]


def test_default_cap_is_the_original_s_15_passages():
    docs = make_passages(40)
    by_query = {Q: docs[0:8], **{f"s{i}.": docs[8 * i:8 * i + 8] for i in range(1, 5)}}
    retriever = StaticRetriever(docs, by_query=by_query)
    lm = ScriptedLM({"reason": reasoning("s1.", "s2.", "s3.", "s4.", done_last=False), "read": {"answer": "x"}})
    pred = run(programs.get("ircot", retriever=retriever, k=8, max_steps=3), lm)
    assert len(pred.passages) == 15 and [p.pid for p in pred.passages] == [str(i) for i in range(15)]
    assert pred.stop_reason == "max_steps" and len(retriever.queries) == 4  # 1 + s retrievals when the budget ends


def test_defaults_are_the_documented_values():
    knobs = programs.info("ircot").knobs
    assert (knobs["k"], knobs["max_steps"], knobs["max_passages"]) == (5, 5, 15)
    lm = ScriptedLM({"reason": reasoning("a.", "b.", "c.", "d.", "e.", "f.", "g.", done_last=False),
                     "read": {"answer": "x"}})
    retriever = StaticRetriever(make_passages(30))
    run(programs.get("ircot", retriever=retriever), lm)
    assert lm.call_names == ["reason"] * 5 + ["read"] and {k for _, k in retriever.queries} == {5}


def test_the_stage_record_names_every_query_what_was_kept_and_why_it_stopped():
    docs = make_passages(12)
    retriever = StaticRetriever(docs, by_query={Q: docs[0:4], "step one.": docs[4:8], "step two.": docs[8:12]})
    lm = ScriptedLM({"reason": reasoning("step one.", "step two.", "done."), "read": {"answer": "x"}})
    pred = run(programs.get("ircot", retriever=retriever, k=4, max_passages=3), lm)
    hops = pred.stages["hops"]
    assert hops["queries"] == [Q, "step one.", "step two."] and hops["decision"] == "done" and hops["depth"] == 3
    assert [p.pid for p in hops["passages"]] == [str(i) for i in range(12)]  # all retrieved, before the cap
    assert [p.pid for p in hops["kept"]] == ["0", "1", "2"] and set(pred.stages) == {"hops", "reader"}
    lm = ScriptedLM({"reason": reasoning("a.", "b.", done_last=False), "read": {"answer": "x"}})
    budget = run(programs.get("ircot", retriever=retriever, max_steps=2), lm)
    assert budget.stages["hops"]["decision"] == "max_steps" == budget.stop_reason
