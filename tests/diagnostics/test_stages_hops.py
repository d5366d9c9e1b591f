"""Stage records of the hop-based baselines (IRCoT, ReAct) and their attribution on scripted runs: IRCoT's
passage cap cutting the gold passage is "filtered_out"; ReAct's hops and the forced answer are recorded."""

from __future__ import annotations

from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

from .helpers import example, run

Q = "Which doc answers the question?"
DOCS = make_passages(12)


def _ircot(max_passages):
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS[0:3], "step one.": DOCS[3:6]})
    steps = [{"next_sentence": "step one.", "done": False}, {"next_sentence": "done.", "done": True}]
    lm = ScriptedLM({"reason": steps, "read": {"answer": "seven"}})
    (record,) = run(get("ircot", retriever=retriever, k=3, max_passages=max_passages), lm,
                    [example(Q, "five", titles=["Doc 5"])])
    return record


def test_ircot_records_hops_and_the_reader():
    record = _ircot(15)
    hops = record["stages"]["hops"]
    assert hops["calls"] == 2 and record["stages"]["reader"] == {"calls": 1}
    assert hops["queries"] == [Q, "step one."] and hops["depth"] == 2 and hops["decision"] == "done"
    assert hops["passages"] == ["0", "1", "2", "3", "4", "5"] and hops["kept"] == hops["passages"]
    assert hops["recall"] == 1.0 and hops["gold"] == ["5"]
    assert record["attribution"] == "reader_miss"


def test_ircot_cap_cutting_the_gold_passage_is_filtered_out():
    record = _ircot(4)
    assert record["stages"]["hops"]["kept"] == ["0", "1", "2", "3"]
    assert record["attribution"] == "filtered_out"


def test_react_records_searches_and_the_forced_finish():
    retriever = StaticRetriever(DOCS, by_query={"doc five": DOCS[5:7]})
    steps = [{"thought": "look", "action": "search", "argument": "doc five"}] * 2
    lm = ScriptedLM({"step": steps, "finish": {"answer": "seven"}})
    (record,) = run(get("react", retriever=retriever, k=2, max_steps=2), lm,
                    [example(Q, "five", titles=["Doc 5"])])
    stages = record["stages"]
    assert list(stages) == ["hops", "finish"]
    assert stages["hops"]["calls"] == 2 and stages["hops"]["queries"] == ["doc five", "doc five"]
    assert stages["hops"]["depth"] == 2 and stages["hops"]["decision"] == "max_steps"
    assert stages["hops"]["passages"] == ["5", "6"] and stages["finish"] == {"calls": 1}
    assert record["attribution"] == "reader_miss"


def test_react_finishing_itself_has_no_finish_stage():
    lm = ScriptedLM({"step": {"thought": "I know", "action": "finish", "argument": "five"}})
    (record,) = run(get("react", retriever=StaticRetriever(DOCS), k=2), lm, [example(Q, "five", titles=["Doc 5"])])
    assert record["stages"] == {"hops": {"calls": 1, "passages": [], "queries": [], "depth": 0,
                                         "decision": "finish", "gold": []}}
    assert record["attribution"] == "correct"
