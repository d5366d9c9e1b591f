"""Stage records of ITER-RETGEN, Self-Ask, Self-Rerank and Chain-of-Note on scripted runs whose class is
known (a gold passage seen in an earlier round or dropped by the tagger is "filtered_out")."""

from __future__ import annotations

from ragzoo.diagnostics import stage_summary
from ragzoo.programs import get
from ragzoo.testing import ScriptedLM, StaticRetriever

from .helpers import DISTRACTORS, PARIS, example, run

Q = "What is the capital of France?"


def test_iter_retgen_gold_seen_only_in_the_first_round_is_filtered_out():
    # round 1 retrieves with the question (the gold passage); later rounds with the generation (a distractor)
    retriever = StaticRetriever(DISTRACTORS, by_query={Q: [PARIS]})
    lm = ScriptedLM({"generate": [{"reasoning": "nothing useful 0", "answer": "Lyon"}] * 3})
    (record,) = run(get("iter_retgen", retriever=retriever, k=1), lm, [example(Q, "Paris")])
    rounds = record["stages"]["rounds"]
    assert rounds["calls"] == 3 and rounds["depth"] == 3 and rounds["decision"] == "all_rounds"
    assert rounds["passages"] == ["p1", "d0"] and rounds["kept"] == ["d0"] and rounds["gold"] == ["p1"]
    assert record["attribution"] == "filtered_out"


def test_self_ask_follow_ups_with_their_answers_then_the_final_call():
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={"Which country?": [DISTRACTORS[0]],
                                                                 "Its capital?": [PARIS]})
    ask = [{"done": False, "follow_up": "Which country?", "answer": ""},
           {"done": False, "follow_up": "Its capital?", "answer": ""}]
    lm = ScriptedLM({"next_step": ask, "answer_follow_up": [{"answer": "unknown"}, {"answer": "Paris"}],
                     "final_answer": {"answer": "Lyon"}})
    (record,) = run(get("self_ask", retriever=retriever, k=1, max_steps=2), lm, [example(Q, "Paris")])
    stages = record["stages"]
    assert stages["follow_ups"]["calls"] == 4 and stages["follow_ups"]["queries"] == ["Which country?", "Its capital?"]
    assert stages["follow_ups"]["answers"] == ["unknown", "Paris"] and stages["follow_ups"]["decision"] == "max_steps"
    assert stages["follow_ups"]["passages"] == ["d0", "p1"] and stages["final"] == {"calls": 1}
    assert record["attribution"] == "reader_miss"
    assert stage_summary([record])["follow_ups"]["unknown_rate"] == 0.5


def test_self_rerank_tagger_dropping_the_gold_passage_is_filtered_out():
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={Q: [PARIS, DISTRACTORS[0]]})
    lm = ScriptedLM({"tag": {"reasons": "r", "useful": [2], "relevant": [2]}, "answer": {"answer": "Lyon"}})
    (record,) = run(get("self_rerank", retriever=retriever, k=2), lm, [example(Q, "Paris")])
    assert record["stages"]["tag"] == {"calls": 1, "passages": ["p1", "d0"], "kept": ["d0"], "gold": ["p1"]}
    assert record["stages"]["reader"] == {"calls": 1} and record["attribution"] == "filtered_out"


def test_chain_of_note_reads_every_passage():
    retriever = StaticRetriever([PARIS, *DISTRACTORS], by_query={Q: [PARIS, DISTRACTORS[0]]})
    lm = ScriptedLM({"read": {"notes": "[1] relevant", "answer": "Lyon"}})
    (record,) = run(get("chain_of_note", retriever=retriever, k=2), lm, [example(Q, "Paris")])
    assert record["stages"] == {"retrieval": {"calls": 0, "passages": ["p1", "d0"], "gold": ["p1"]},
                                "notes_reader": {"calls": 1}}
    assert record["attribution"] == "reader_miss"
