"""Stage records and attribution of the filtering methods (BlendFilter, FILCO) on scripted runs whose class is
known: evidence retrieved then dropped by the filter is "filtered_out", evidence kept is a "reader_miss"."""

from __future__ import annotations

from ragzoo.programs import get
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

from .helpers import example, run

Q = "Which doc answers the question?"
A_EX = "Doc 3 says so."
A_IN = "A passage about doc eight."
DOCS = make_passages(12)


def _blendfilter_run(kept_ids):
    retriever = StaticRetriever(DOCS, by_query={Q: DOCS[0:5], f"{A_EX} {Q}": DOCS[3:8], f"{A_IN} {Q}": DOCS[6:11]})
    lm = ScriptedLM({"external_cot": {"reasoning": A_EX}, "write_passage": {"passage": A_IN},
                     "filter_topic": {"topic": "documents"}, "filter_analysis": {"relevance_analysis": "r"},
                     "filter_ids": {"relevant_ids": kept_ids}, "answer_cot": {"reasoning": "So: three."},
                     "extract_answer": {"answer": "three"}})
    (record,) = run(get("blendfilter", retriever=retriever), lm,
                    [example(Q, "six", titles=["Doc 6", "Doc 9"])])
    return record


def test_blendfilter_records_each_query_retrieval_the_filter_and_the_reader():
    record = _blendfilter_run([0])  # keeps the first of each set: docs 0, 3, 6
    stages = record["stages"]
    assert list(stages) == ["original", "external_cot", "internal_knowledge", "filter", "reader"]
    assert [stages[name]["calls"] for name in stages] == [0, 1, 1, 9, 2]
    assert stages["original"]["passages"] == ["0", "1", "2", "3", "4"] and stages["original"]["recall"] == 0.0
    assert stages["external_cot"]["recall"] == 0.5 and stages["external_cot"]["query"] == f"{A_EX} {Q}"
    assert stages["internal_knowledge"]["recall"] == 1.0 and stages["internal_knowledge"]["gold"] == ["6", "9"]
    assert stages["filter"]["kept"] == ["0", "3", "6"] and stages["filter"]["gold"] == ["6", "9"]
    assert stages["filter"]["empty"] is False and stages["filter"]["context_chars"] > 0
    assert stages["reader"] == {"calls": 2, "answers": ["three"]}
    assert record["attribution"] == "reader_miss"  # Doc 6 reached the answer step


def test_blendfilter_gold_dropped_by_the_filter_is_filtered_out():
    record = _blendfilter_run([1])  # keeps docs 1, 4, 7: neither Doc 6 nor Doc 9
    assert record["stages"]["filter"]["kept"] == ["1", "4", "7"]
    assert record["gold_pids"] == ["6", "9"]
    assert record["attribution"] == "filtered_out"


FQ = "Which river flows through the capital of France?"
PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. "
                                              "The Seine flows through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. The Rhone flows through it.")


def _filco_run(selected, **knobs):
    retriever = StaticRetriever([PARIS, LYON], by_query={FQ: [PARIS, LYON]})
    lm = ScriptedLM({"filter": [{"selected": chosen} for chosen in selected], "generate": {"answer": "Rhone"}})
    (record,) = run(get("filco", retriever=retriever, k=2, **knobs), lm, [example(FQ, "Seine")])
    return record


def test_filco_records_retrieval_sentence_filter_generator():
    record = _filco_run([[2], []])  # the Seine sentence kept, Lyon dropped
    stages = record["stages"]
    assert list(stages) == ["retrieval", "filter", "generator"]
    assert stages["retrieval"] == {"calls": 0, "passages": ["p1", "p2"], "gold": ["p1"]}
    assert stages["filter"]["calls"] == 2 and stages["filter"]["kept"] == ["p1"]
    assert stages["filter"]["fallback"] is None
    assert stages["generator"] == {"calls": 1, "context_chars": len("Paris | The Seine flows through it.")}
    assert record["reached"] is True and record["attribution"] == "reader_miss"


def test_filco_a_kept_passage_whose_answer_sentence_was_dropped_is_filtered_out():
    record = _filco_run([[1], [0]])  # Paris kept, but only "It is the capital of France."
    assert record["stages"]["filter"]["kept"] == ["p1", "p2"]
    assert record["reached"] is False and record["attribution"] == "filtered_out"


def test_filco_full_context_has_no_filter_stage():
    record = _filco_run([], context="full")
    assert list(record["stages"]) == ["retrieval", "generator"]
    assert record["attribution"] == "reader_miss"
