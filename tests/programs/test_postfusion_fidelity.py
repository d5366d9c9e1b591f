"""Post-Fusion family, issue 22: PF+Concat under self-consistency (Fig. 5's third curve, item 4), every
candidate answer kept on the prediction (`candidates`), the passage-QA instruction in our own words (item 13)
and the "with gold passage" setting fed by datasets that ship gold passages (item 2)."""

from __future__ import annotations

import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Who wrote doc two?"


@pytest.fixture
def docs():
    return make_passages(8)


@pytest.fixture
def retriever(docs):
    return StaticRetriever(docs, by_query={Q: docs[:5]})


def run(program, lm, **inputs):
    with dspy.context(lm=lm):
        return program(question=Q, **inputs)


def sampled(per_title: dict[str, list[str]]):
    """Answer a one-passage call by the passage it sees: its n-th call gets the n-th scripted sample."""
    asked: dict[str, int] = {}

    def respond(context):
        for title, answers in per_title.items():
            if f"«{title} |" in context.inputs["context"]:
                n = asked[title] = asked.get(title, -1) + 1
                return {"answer": answers[n % len(answers)]}
        return {"answer": "unknown"}
    return respond


def rollout_ids(lm, name):
    return [entry["kwargs"].get("rollout_id") for entry, call in zip(lm.history, lm.calls)
            if call.predictor_name == name]


# --- item 4: PF+Concat with samples (Fig. 5) ---------------------------------------------------------------


def test_pf_concat_with_samples_samples_every_answering_call_and_distills_over_the_pooled_candidates(retriever,
                                                                                                   docs):
    """p = 3, k = 5: each passage is asked 3 times at temperature 0.7 (its answer is the majority of its
    samples), the passages with any known sample survive, the distiller sees every distinct sampled answer
    (passage rank, then sample order) and is itself sampled 3 times; the final answer is its majority."""
    passage = sampled({"Doc 1": ["Ann", "unknown", "Ann"], "Doc 2": ["unknown", "Bob", "Cy"],
                       "Doc 4": ["unknown"]})
    distilled = iter(["Ann", "Bob", "Bob"])  # the majority, not the first sample
    lm = ScriptedLM({"passage_answer": passage, "distill": lambda c: {"answer": next(distilled)}})
    pred = run(programs.get("pf_concat", retriever=retriever, samples=3), lm)
    assert lm.call_names == ["passage_answer"] * 15 + ["distill"] * 3
    assert [entry["kwargs"].get("temperature") for entry in lm.history] == [0.7] * 18
    assert sorted(rollout_ids(lm, "distill")) == [0, 1, 2]
    assert pred.votes == ["unknown", "Ann", "Bob", "unknown", "unknown"]  # per passage: majority of its samples
    assert [p.pid for p in pred.passages] == ["1", "2"]
    distill = lm.calls_to("distill")[0].inputs
    assert distill["context"] == "\n".join(f"[{i + 1}] «{docs[j].long_text}»" for i, j in enumerate([1, 2]))
    assert distill["candidate_answers"] == '["Ann", "Bob", "Cy"]'
    assert pred.candidates == ["Ann", "Bob", "Cy"] and pred.answer == "Bob" and pred.distilled is True


def test_pf_concat_with_samples_makes_no_distilling_call_when_every_sample_abstains(retriever):
    lm = ScriptedLM({"passage_answer": {"answer": "unknown"}, "distill": {"answer": "Ann"}})
    pred = run(programs.get("pf_concat", retriever=retriever, samples=2), lm)
    assert lm.call_names == ["passage_answer"] * 10
    assert pred.answer == "unknown" and pred.candidates == [] and pred.distilled is False


def test_postfusion_with_samples_pools_the_p_times_k_outputs_into_one_vote(retriever):
    """§4.4: "p samples per passage, p x k outputs". Pooled, A has 3 votes (B 2, D 2, C 1); a vote of each
    passage's own majority (B, A, D) would have tied and picked B by rank. The passages kept are those with a
    sample for the winner."""
    lm = ScriptedLM({"passage_answer": sampled({"Doc 0": ["B", "B", "unknown"], "Doc 1": ["A", "C", "A"],
                                                "Doc 2": ["A", "D", "D"]})})
    pred = run(programs.get("postfusion", retriever=retriever, samples=3), lm)
    assert lm.call_names == ["passage_answer"] * 15
    assert pred.answer == "A" and [p.title for p in pred.passages] == ["Doc 1", "Doc 2"]
    assert pred.votes == ["B", "A", "D", "unknown", "unknown"] and pred.vote_counts == {"b": 2, "a": 3, "c": 1,
                                                                                          "d": 2}
    # %NM reads the pool the vote counted: gold "C" was among the samples (not among the per-passage majorities)
    from ragzoo.metrics import DIAGNOSTICS

    gold_c = dspy.Example(question=Q, answers=["C"])
    assert DIAGNOSTICS["vote_miss"](gold_c, pred) == 1.0 and pred.answer_pool[:3] == ["B", "B", "unknown"]
    tied = ScriptedLM({"passage_answer": sampled({"Doc 1": ["Ann", "unknown"], "Doc 3": ["Bob", "Bob"],
                                                  "Doc 0": ["unknown", "Ann"]})})
    assert run(programs.get("postfusion", retriever=retriever, samples=2), tied).answer == "Ann"  # 2-2: best rank


def test_concat_pf_with_samples_falls_back_when_abstentions_outnumber_the_answer(retriever):
    """Notes §1.8: round 1 is the majority of the p concatenation samples with "unknown" counted: one known
    answer among nine abstentions falls back; a tie keeps the known answer."""
    def concat(answers):
        replies = iter(answers)
        return lambda context: {"answer": next(replies)}

    lm = ScriptedLM({"concat_answer": concat(["unknown"] * 9 + ["Eve"]),
                     "passage_answer": sampled({"Doc 2": ["Ann"]})})
    pred = run(programs.get("concat_pf", retriever=retriever, samples=10), lm)
    assert pred.fallback is True and pred.concat_answer == "Eve" and pred.answer == "Ann"
    assert lm.call_names == ["concat_answer"] * 10 + ["passage_answer"] * 50
    lm = ScriptedLM({"concat_answer": concat(["unknown", "Eve", "Eve", "unknown"])})
    pred = run(programs.get("concat_pf", retriever=retriever, samples=4), lm)
    assert pred.fallback is False and pred.answer == "Eve" and lm.call_names == ["concat_answer"] * 4


def test_samples_reach_fig5s_largest_p():
    assert programs.resolve_knobs("concat", {"samples": 50})["samples"] == 50
    with pytest.raises(ConfigError):
        programs.resolve_knobs("concat", {"samples": 51})


def test_pf_concat_with_one_sample_is_the_greedy_table_row(retriever):
    lm = ScriptedLM({"passage_answer": sampled({"Doc 1": ["Ann"]}), "distill": {"answer": "Ann"}})
    pred = run(programs.get("pf_concat", retriever=retriever), lm)
    assert lm.call_names == ["passage_answer"] * 5 + ["distill"]
    assert all("temperature" not in entry["kwargs"] and "rollout_id" not in entry["kwargs"] for entry in lm.history)
    assert pred.answer == "Ann" and pred.candidates == ["Ann"]


# --- candidates: every answer the program produced before choosing ------------------------------------------


def test_candidates_hold_every_distinct_sampled_answer_in_call_order(retriever):
    answers = iter(["Ann", "unknown", "Bob", "Bob"])
    lm = ScriptedLM({"concat_answer": lambda c: {"answer": next(answers)}})
    pred = run(programs.get("concat", retriever=retriever, samples=4), lm)
    assert pred.answer == "Bob" and pred.candidates == ["Ann", "Bob"]
    lm = ScriptedLM({"concat_answer": {"answer": "unknown"},
                     "passage_answer": sampled({"Doc 2": ["Cy", "Dee"], "Doc 3": ["Dee"], "Doc 4": ["unknown", "Dee"]})})
    pred = run(programs.get("concat_pf", retriever=retriever, samples=2), lm)
    assert pred.fallback is True and pred.answer == "Dee" and pred.candidates == ["Cy", "Dee"]
    lm = ScriptedLM({"concat_answer": {"answer": "Eve"}})
    assert run(programs.get("concat", retriever=retriever), lm).candidates == ["Eve"]


# --- item 13: the passage-QA instruction says what the reply must be and why, in our own words ----------------


def test_the_passage_qa_instruction_states_the_two_replies_and_why_not_the_papers_prompt(retriever):
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}, "passage_answer": {"answer": "Ann"}})
    run(programs.get("concat_pf", retriever=retriever), lm)
    run(programs.get("postfusion", retriever=retriever), lm)
    told = {call.signature.instructions for call in lm.calls}
    assert len(told) == 1  # one prompt for Concatenation and Post-Fusion, as the paper's Fig. 7
    (text,) = told
    lowered = " ".join(text.lower().split())
    # why the form matters: the reply is kept, counted as a vote, or read as an abstention
    assert "vote" in lowered and "abstention" in lowered and "the single word unknown" in lowered
    for phrase in ("factoid phrase", "try your best", "guess an extractive", "don't know the answer",
                   "background contexts", "one of the context"):
        assert phrase not in lowered, phrase


# --- item 2: "with gold passage" fed by datasets that ship gold passages ---------------------------------------


def test_every_gold_paragraph_not_retrieved_replaces_a_random_passage_when_none_holds_the_answer(retriever, docs):
    """HotPotQA ships two supporting paragraphs per question: both go in (each at its own seeded position,
    k kept), except one already among the top-k; none goes in when a retrieved passage holds the answer."""
    gold = [{"title": "Bridge", "text": "Doc two was written by the author of Bridge."},
            {"title": "Doc 3", "text": "Text of  doc 3"}]  # retrieved already (spacing and case aside)
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}})
    program = programs.get("concat", retriever=retriever, gold_passage=True)
    pred = run(program, lm, gold_passage=gold, answers=["Ann Author"])
    (position,) = pred.gold_inserted  # "Doc 3" is retrieved already: only "Bridge" goes in
    titles = [p.title for p in pred.retrieved]
    assert len(titles) == 5 and titles[position] == "Bridge" and "Doc 3" in titles
    both = run(program, lm, gold_passage=[gold[0], {"title": "Elsewhere", "text": "Ann Author wrote it."}],
               answers=["Ann Author"])
    assert len(both.gold_inserted) == 2 and len(both.retrieved) == 5
    assert {both.retrieved[i].title for i in both.gold_inserted} == {"Bridge", "Elsewhere"}
    assert run(program, lm, gold_passage=gold, answers=["Doc 2"]).gold_inserted == []  # the top-k hold it


def test_a_retrieved_passage_of_the_gold_paragraphs_article_does_not_stand_in_for_it(retriever):
    """SQuAD: many paragraphs per article (and the 21M corpus: many chunks). A retrieved passage with the gold's
    title but not its text lacks the paragraph the setting adds; the gold goes in. A gold passage given without
    text is matched by its title."""
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}})
    program = programs.get("concat", retriever=retriever, gold_passage=True)
    other_paragraph = {"title": "Doc 3", "text": "Ann Author grew up in the town of Doc 3."}
    pred = run(program, lm, gold_passage=other_paragraph, answers=["Ann Author"])
    (position,) = pred.gold_inserted
    assert pred.retrieved[position].text == other_paragraph["text"] and len(pred.retrieved) == 5
    assert run(program, lm, gold_passage={"title": "doc 3", "text": ""}, answers=["Ann Author"]).gold_inserted == []


def test_gold_passages_from_the_hotpotqa_distractor_split_reach_the_program_through_evaluate(tmp_path):
    from ragzoo.cli import main

    out = tmp_path / "run"
    assert main(["evaluate", "--method", "concat", "--knob", "gold_passage=true", "--dataset", "hotpotqa",
                 "--split", "dev_distractor", "-n", "3", "--seed", "0", "--lm", "dry-run", "--metric", "em",
                 "--out", str(out)]) == 0
    import json

    from ragzoo import data

    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [record["error"] for record in records] == [None] * 3
    questions = {e.id: e for e in data.load("hotpotqa", "dev_distractor", n=3, seed=0)}
    inserted = 0
    for record in records:
        titles = [passage["title"] for passage in record["passages"]]  # what the concatenation was given
        assert len(titles) == 5
        assert all(passage["title"] in titles for passage in questions[record["id"]].gold_passage)
        inserted += sum(passage["pid"].startswith("gold") for passage in record["passages"])
    assert inserted > 0  # some were not retrieved: they went in


def test_the_fig5_example_grid_runs_the_three_curves_with_valid_knobs():
    from pathlib import Path

    from ragzoo.grid.spec import load_grid

    grid = load_grid(Path(__file__).resolve().parents[2] / "examples" / "postfusion-fig5.toml")
    curves = {(m.id, m.knobs["samples"]) for m in grid.methods}
    assert curves == {(method, p) for method in ("concat", "pf_concat", "concat_pf") for p in (1, 5, 10)}
    for method in grid.methods:
        assert programs.resolve_knobs(method.id, dict(method.knobs))["samples"] == method.knobs["samples"]


def test_gold_passage_forms_empty_retrieval_and_untitled_matches(retriever, docs):
    """A "Title | text" string keeps its title; with nothing retrieved every gold passage is the context
    (positions 0..n-1); an untitled gold passage whose text a retrieved passage has is not inserted again."""
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}})
    program = programs.get("concat", retriever=retriever, gold_passage=True)
    pred = run(program, lm, gold_passage="Gold | Ann wrote it.", answers=["Ann"])
    (position,) = pred.gold_inserted
    assert lm.calls[-1].inputs["context"].splitlines()[position] == f"[{position + 1}] «Gold | Ann wrote it.»"
    untitled = run(program, lm, gold_passage=[{"title": "", "text": docs[2].text}], answers=["Ann"])
    assert untitled.gold_inserted == [] and [p.pid for p in untitled.retrieved] == [d.pid for d in docs[:5]]
    fresh = run(program, lm, gold_passage=[{"title": "", "text": "Ann wrote doc two."}], answers=["Ann"])
    assert len(fresh.gold_inserted) == 1 and fresh.retrieved[fresh.gold_inserted[0]].text == "Ann wrote doc two."
    empty = programs.get("concat", retriever=StaticRetriever([], by_query={Q: []}), gold_passage=True)
    alone = run(empty, lm, gold_passage=[{"title": "A", "text": "Ann."}, {"title": "B", "text": "Bo."}],
                answers=["Ann"])
    assert alone.gold_inserted == [0, 1] and [p.title for p in alone.retrieved] == ["A", "B"]


def test_an_unreadable_distilling_sample_casts_no_vote_and_says_so(retriever):
    from ragzoo.adapters import make_adapter
    from ragzoo.tracing import trace_example

    distilled = iter(["I am not following any format here.", "[[ ## answer ## ]]\nAnn\n\n[[ ## completed ## ]]"])
    lm = ScriptedLM({"passage_answer": sampled({"Doc 1": ["Ann"], "Doc 2": ["Bob"]}),
                     "distill": lambda c: next(distilled)})
    with trace_example() as trace, dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=0)):
        pred = programs.get("pf_concat", retriever=retriever, samples=2)(question=Q)
    assert pred.answer == "Ann" and pred.distilled is True
    assert [(d["where"], d["what"]) for d in trace.degradations] == [("distill", "this sample casts no vote")]


def test_distinct_candidates_keep_refusal_phrasings_unless_lenient():
    from ragzoo.programs.voting import distinct_candidates

    assert distinct_candidates(["not enough context", "Ann", "unknown"]) == ["not enough context", "Ann"]
    assert distinct_candidates(["not enough context", "Ann", "unknown"], lenient=True) == ["Ann"]
