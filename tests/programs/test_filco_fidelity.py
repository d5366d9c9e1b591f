"""FILCO, issue 22: the FULL baseline's generator is not told its context was filtered (item 10), the filter's
sentence-index bound and SILVER's passage granularity are pinned by tests (item 14), and the CXMI measure
that trains the filter is computed where the LM serves log-probabilities, else a declared fallback (item 1)."""

from __future__ import annotations

import dspy

from ragzoo.programs.filco import Filco
from ragzoo.retrieval.base import Passage
from ragzoo.testing import ScriptedLM, StaticRetriever

QUESTION = "Which river flows through the capital of France?"
PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. "
                                              "The Seine flows through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. The Rhone flows through it.")


def make(k=2, **knobs):
    retriever = StaticRetriever([PARIS, LYON], by_query={QUESTION: [PARIS, LYON]})
    return Filco(retriever=retriever, k=k, **knobs)


def run(program, script, **inputs):
    lm = ScriptedLM(script)
    with dspy.context(lm=lm):
        prediction = program(question=QUESTION, **inputs)
    return prediction, lm


def _instructions(call) -> str:
    signature = call.signature
    return " ".join([signature.instructions, *(field.json_schema_extra.get("desc", "")
                                               for field in signature.input_fields.values())]).lower()


# --- item 10: FULL is M_gen on the retrieved passages, not on a filtered context ---------------------------


def test_the_full_baseline_does_not_tell_the_generator_its_context_was_filtered():
    full, lm = run(make(context="full"), {"generate": {"answer": "Seine"}})
    told = _instructions(lm.calls_to("generate")[0])
    for word in ("filter", "judged helpful", "selected"):
        assert word not in told, word
    assert "retrieved" in told
    assert full.answer == "Seine" and lm.call_names == ["generate"]
    # FILCO proper still tells its generator the context is what the filter kept
    _, lm = run(make(), {"filter": {"selected": [2]}, "generate": {"answer": "Seine"}})
    assert "filter" in _instructions(lm.calls_to("generate")[0])


# --- item 14: surviving mutants ---------------------------------------------------------------------------


def test_a_one_based_index_past_the_last_sentence_is_ignored_not_read():
    """An LM numbering sentences from 1 answers len(sentences) for the last one: that index does not exist
    (sentences are shown 0-based), so it is reported in `ignored_indices` and nothing past the end is read."""
    prediction, lm = run(make(k=1), {"filter": {"selected": [3]}, "generate": {"answer": "x"}})
    assert prediction.selected == [[]] and prediction.ignored_indices == [3]
    assert prediction.context == [] and prediction.fallback == "none"
    prediction, _ = run(make(k=1), {"filter": {"selected": [2, 3]}, "generate": {"answer": "x"}})
    assert prediction.selected == [[2]] and prediction.ignored_indices == [3]
    assert prediction.context == ["Paris | The Seine flows through it."]


def test_silver_at_passage_granularity_scores_whole_passages_not_their_best_sentence():
    """PSG's oracle (SILVER, granularity=passage) scores each passage as one unit: "the Rhone flows" overlaps
    Lyon's second sentence with F1 0.67 (> 0.5) but the whole Lyon passage only with F1 0.33, so the passage
    oracle drops it where the sentence oracle keeps that sentence."""
    by_passage, lm = run(make(context="silver", granularity="passage", measure="lexical"),
                         {"generate": {"answer": "x"}}, answers=["the Rhone flows"])
    assert by_passage.selected == [False, False] and by_passage.context == [] and by_passage.sentences == []
    assert lm.call_names == ["generate"]
    by_sentence, _ = run(make(context="silver", measure="lexical"), {"generate": {"answer": "x"}},
                         answers=["the Rhone flows"])
    assert by_sentence.selected == [[], [1]]
    # an answer only the passage's title holds: the passage oracle sees the title, the sentences do not
    titled, _ = run(make(k=1, context="silver", granularity="passage"), {"generate": {"answer": "x"}},
                    answers=["Paris"])
    assert titled.selected == [True] and titled.context == [PARIS.long_text]
