"""Post-Fusion family: concat, postfusion, concat_pf, pf_concat, pruning, summary — calls, what each call
sees, votes with unknowns and ties, fallback, distiller, edge cases, registry, save/load."""

from __future__ import annotations


import dspy
import pytest

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.programs.postfusion import PostFusionFamily, numbered_passages
from ragzoo.engines import PLACEHOLDER_TEXT
from ragzoo.lm import make_dry_run_lm
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages

Q = "Who wrote doc two?"
METHODS = ("concat", "postfusion", "concat_pf", "pf_concat", "pruning", "summary")


@pytest.fixture
def docs():
    return make_passages(8)


@pytest.fixture
def retriever(docs):
    return StaticRetriever(docs, by_query={Q: docs[:5]})


def per_passage(answers: dict[str, str], default: str = "unknown"):
    """Answer each post-fusion call by which passage it sees (robust to call order)."""
    def respond(context):
        for title, answer in answers.items():
            if f"«{title} |" in context.inputs["context"]:
                return {"answer": answer}
        return {"answer": default}
    return respond


def run(program, lm, question=Q):
    with dspy.context(lm=lm):
        return program(question=question)


def build(method, retriever, **knobs):
    return programs.get(method, retriever=retriever, **knobs)



def passage_count(context_text: str) -> int:
    return context_text.count("«")


# --- concat -----------------------------------------------------------------------------------------------

def test_concat_is_one_call_over_all_k_passages_in_rank_order(retriever, docs):
    lm = ScriptedLM({"concat_answer": {"answer": "Author Two"}})
    pred = run(build("concat", retriever), lm)
    assert lm.call_names == ["concat_answer"]
    assert retriever.queries == [(Q, 5)]
    context = lm.calls_to("concat_answer")[0].inputs["context"]
    assert context == "\n".join(f"[{i + 1}] «{d.long_text}»" for i, d in enumerate(docs[:5]))
    assert pred.answer == "Author Two" and pred.unknown is False
    assert [p.pid for p in pred.passages] == ["0", "1", "2", "3", "4"]


def test_concat_may_answer_unknown(retriever):
    lm = ScriptedLM({"concat_answer": {"answer": "Unknown."}})
    pred = run(build("concat", retriever), lm)
    assert pred.unknown is True and pred.fallback is False
    # issue 12: `fallback` is a constant for concat; what can fail is that concat alone never falls back
    assert lm.call_names == ["concat_answer"] and pred.votes is None and pred.answer == "Unknown."


# --- postfusion -------------------------------------------------------------------------------------------

def test_postfusion_makes_one_call_per_passage_each_seeing_exactly_that_passage(retriever, docs):
    lm = ScriptedLM({"passage_answer": per_passage({"Doc 1": "Ann", "Doc 3": "Bob", "Doc 4": "ann"})})
    pred = run(build("postfusion", retriever), lm)
    assert lm.call_names == ["passage_answer"] * 5
    assert len(retriever.queries) == 1
    for call, doc in zip(lm.calls_to("passage_answer"), docs[:5]):
        assert passage_count(call.inputs["context"]) == 1
        assert call.inputs["context"] == f"[1] «{doc.long_text}»"
        assert call.inputs["question"] == Q
    assert pred.votes == ["unknown", "Ann", "unknown", "Bob", "ann"]
    assert pred.vote_counts == {"ann": 2, "bob": 1}
    assert pred.answer == "Ann"
    assert [p.pid for p in pred.passages] == ["1", "4"]  # the supporters of the winner
    assert len(pred.retrieved) == 5


def test_postfusion_tie_goes_to_retrieval_rank(retriever):
    lm = ScriptedLM({"passage_answer": per_passage({"Doc 0": "unknown", "Doc 1": "Bob", "Doc 2": "Ann",
                                                    "Doc 3": "Ann", "Doc 4": "Bob"})})
    pred = run(build("postfusion", retriever), lm)
    assert pred.answer == "Bob"
    assert [p.pid for p in pred.passages] == ["1", "4"]


def test_postfusion_all_unknown_is_unknown(retriever):
    lm = ScriptedLM({"passage_answer": {"answer": "unknown"}})
    pred = run(build("postfusion", retriever), lm)
    assert pred.answer == "unknown" and pred.unknown is True
    assert pred.passages == [] and pred.candidates == []


# --- concat_pf --------------------------------------------------------------------------------------------

def test_concat_pf_answers_in_one_call_when_concat_knows(retriever):
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}, "passage_answer": {"answer": "Bob"}})
    pred = run(build("concat_pf", retriever), lm)
    assert lm.call_names == ["concat_answer"]
    assert pred.answer == "Ann" and pred.fallback is False and pred.votes is None


def test_concat_pf_falls_back_to_post_fusion_on_unknown(retriever, docs):
    lm = ScriptedLM({"concat_answer": {"answer": "UNKNOWN"},
                     "passage_answer": per_passage({"Doc 2": "Bob", "Doc 4": "Bob", "Doc 0": "Ann"})})
    pred = run(build("concat_pf", retriever), lm)
    assert lm.call_names == ["concat_answer"] + ["passage_answer"] * 5
    assert len(retriever.queries) == 1  # the fallback reuses the same k passages
    assert [c.inputs["context"] for c in lm.calls_to("passage_answer")] == [f"[1] «{d.long_text}»" for d in docs[:5]]
    assert pred.fallback is True
    assert pred.concat_answer == "UNKNOWN"
    assert pred.answer == "Bob" and pred.vote_counts == {"ann": 1, "bob": 2}


def test_concat_pf_unknown_only_when_both_stages_are(retriever):
    lm = ScriptedLM({"concat_answer": {"answer": "unknown"}, "passage_answer": {"answer": "Unknown"}})
    pred = run(build("concat_pf", retriever), lm)
    assert len(lm.call_names) == 6
    assert pred.answer == "unknown" and pred.unknown is True and pred.fallback is True


def test_lenient_unknown_triggers_the_fallback_on_refusal_phrases(retriever):
    script = {"concat_answer": {"answer": "The context does not provide this."}, "passage_answer": {"answer": "Ann"}}
    strict, lenient = ScriptedLM(script), ScriptedLM(script)
    assert run(build("concat_pf", retriever), strict).fallback is False
    pred = run(build("concat_pf", retriever, lenient_unknown=True), lenient)
    assert pred.fallback is True and pred.answer == "Ann"


# --- pf_concat --------------------------------------------------------------------------------------------

def test_pf_concat_distills_over_surviving_passages_and_candidates(retriever, docs):
    lm = ScriptedLM({"passage_answer": per_passage({"Doc 1": "Ann", "Doc 2": "Bob", "Doc 4": "ann."}),
                     "distill": {"answer": "Bob"}})
    pred = run(build("pf_concat", retriever), lm)
    assert lm.call_names == ["passage_answer"] * 5 + ["distill"]
    distill = lm.calls_to("distill")[0].inputs
    # Only passages whose own answer was not unknown, renumbered, in retrieval order.
    assert distill["context"] == "\n".join(f"[{i + 1}] «{docs[j].long_text}»" for i, j in enumerate([1, 2, 4]))
    assert distill["candidate_answers"] == '["Ann", "Bob"]'
    assert distill["question"] == Q
    assert pred.answer == "Bob" and pred.distilled is True
    assert pred.candidates == ["Ann", "Bob"]
    assert [p.pid for p in pred.passages] == ["1", "2", "4"]


def test_pf_concat_all_unknown_skips_the_distiller(retriever):
    lm = ScriptedLM({"passage_answer": {"answer": "unknown"}, "distill": {"answer": "Ann"}})
    pred = run(build("pf_concat", retriever), lm)
    assert lm.call_names == ["passage_answer"] * 5
    assert pred.answer == "unknown" and pred.distilled is False and pred.passages == []


def test_pf_concat_unanimous_skip_is_a_knob(retriever):
    script = {"passage_answer": per_passage({"Doc 1": "Ann", "Doc 3": "ann"}), "distill": {"answer": "Bob"}}
    default, skipping = ScriptedLM(script), ScriptedLM(script)
    assert run(build("pf_concat", retriever), default).answer == "Bob"
    assert len(default.call_names) == 6
    pred = run(build("pf_concat", retriever, skip_distill_if_unanimous=True), skipping)
    assert skipping.call_names == ["passage_answer"] * 5
    assert pred.answer == "Ann" and pred.distilled is False


# --- pruning / summary ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, predictor", [("pruning", "pruning_answer"), ("summary", "summary_answer")])
def test_single_call_cot_prompts(retriever, method, predictor):
    lm = ScriptedLM({predictor: {"rationale": "Source 3 fits.", "answer": "Ann"}})
    pred = run(build(method, retriever), lm)
    assert lm.call_names == [predictor]
    assert passage_count(lm.calls[0].inputs["context"]) == 5
    assert pred.answer == "Ann" and pred.rationale == "Source 3 fits."


def test_pruning_and_summary_differ_only_in_how_they_reason(retriever):
    pruning = build("pruning", retriever).pruning_answer.signature
    summary = build("summary", retriever).summary_answer.signature
    assert list(pruning.fields) == list(summary.fields) == ["context", "question", "rationale", "answer"]
    assert "eliminat" in pruning.instructions and "summar" in summary.instructions


# --- shared behaviour -------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, names", [
    ("concat", ["concat_answer"]), ("postfusion", ["passage_answer"]),
    ("concat_pf", ["concat_answer", "passage_answer"]), ("pf_concat", ["passage_answer", "distill"]),
    ("pruning", ["pruning_answer"]), ("summary", ["summary_answer"]),
])
def test_named_predictors_list_every_call_site(retriever, method, names):
    assert [name for name, _ in build(method, retriever).named_predictors()] == names


def test_parse_failure_raises(retriever):
    from dspy.utils.exceptions import AdapterParseError

    lm = ScriptedLM({"concat_answer": {"answer": "unknown"}, "passage_answer": "[[ ## nothing ## ]]"})
    with pytest.raises(AdapterParseError):
        run(build("concat_pf", retriever), lm)
    assert lm.call_names == ["concat_answer", "passage_answer", "passage_answer"]  # ChatAdapter, then JSON retry


def test_save_load_round_trip(retriever, tmp_path):
    program = build("pf_concat", retriever)
    program.passage_answer.demos = [dspy.Example(context="[1] «X | y»", question="demo?", answer="unknown")]
    program.distill.demos = [dspy.Example(context="[1] «X | y»", question="demo?", candidate_answers=["y"],
                                          answer="y")]
    path = tmp_path / "pf_concat.json"
    program.save(str(path))
    loaded = build("pf_concat", retriever)
    loaded.load(str(path))
    script = {"passage_answer": per_passage({"Doc 1": "Ann", "Doc 2": "Bob"}), "distill": {"answer": "Bob"}}
    first, second = ScriptedLM(script), ScriptedLM(script)
    before, after = run(program, first), run(loaded, second)
    assert [c.prompt_text for c in first.calls] == [c.prompt_text for c in second.calls]
    assert second.calls_to("distill")[0].demos == 1
    assert (before.answer, before.votes) == (after.answer, after.votes)


def test_registry_ids_fix_the_mode_and_take_k(retriever):
    for method in METHODS:
        info = programs.info(method)
        assert info.cls is PostFusionFamily and info.fixed_knobs == {"mode": method}
        assert "mode" not in info.knobs
    program = programs.get("concat_pf", retriever=retriever, k="3")
    assert program.k == 3 and program.mode == "concat_pf"
    run(program, ScriptedLM({"concat_answer": {"answer": "Ann"}}))
    assert retriever.queries == [(Q, 3)]


@pytest.mark.parametrize("method, knobs", [
    ("concat", {"mode": "postfusion"}), ("concat", {"k": 0}), ("postfusion", {"nope": 1}),
    ("concat", {"skip_distill_if_unanimous": True}), ("pf_concat", {"lenient_unknown": "maybe"}),
])
def test_registry_rejects_bad_knobs(retriever, method, knobs):
    with pytest.raises(ConfigError):
        programs.get(method, retriever=retriever, **knobs)


def test_direct_construction_rejects_unknown_mode(retriever):
    with pytest.raises(ConfigError):
        PostFusionFamily(retriever, mode="fusion")


PLACEHOLDER_CALLS = {"concat": ["concat_answer"], "postfusion": ["passage_answer"] * 5,
                     "concat_pf": ["concat_answer"], "pf_concat": ["passage_answer"] * 5 + ["distill"],
                     "pruning": ["pruning_answer"], "summary": ["summary_answer"]}


@pytest.mark.parametrize("method", METHODS)
def test_runs_end_to_end_on_placeholders(method):
    retriever = StaticRetriever(make_passages(10))
    lm = make_dry_run_lm()
    pred = run(build(method, retriever), lm)
    assert pred.answer == PLACEHOLDER_TEXT["answer"]
    assert len(retriever.queries) == 1
    # issue 12: the placeholder answer is never "unknown", so the path is fixed: concat_pf answers in round
    # 1, pf_concat distills; the calls and what the last one saw can fail
    assert len(lm.history) == len(PLACEHOLDER_CALLS[method])
    assert pred.unknown is False and len(pred.retrieved) == 5


def test_empty_passage_list_formats_as_none():
    assert numbered_passages([]) == "(none)"


# --- issue 12 ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method, predictor", [("pruning", "pruning_answer"), ("summary", "summary_answer")])
def test_pruning_and_summary_see_the_question_and_the_passages_in_rank_order(retriever, docs, method, predictor):
    lm = ScriptedLM({predictor: {"rationale": "r", "answer": "Ann"}})
    run(build(method, retriever), lm)
    call = lm.calls_to(predictor)[0]
    assert call.inputs["question"] == Q
    assert call.inputs["context"] == "\n".join(f"[{i + 1}] «{d.long_text}»" for i, d in enumerate(docs[:5]))


@pytest.mark.parametrize("method, predictor, marker", [("pruning", "pruning_answer", "ruled out"),
                                                       ("summary", "summary_answer", "Together they say")])
def test_pruning_and_summary_are_one_shot_with_our_own_demo_unless_compiled(retriever, method, predictor, marker):
    from ragzoo.signatures.postfusion import PRUNING_DEMO, SUMMARY_DEMO

    lm = ScriptedLM({predictor: {"rationale": "r", "answer": "Ann"}})
    program = build(method, retriever)
    run(program, lm)
    assert lm.calls_to(predictor)[0].demos == 1 and marker in lm.calls[0].prompt_text
    assert "Outerbridge" not in lm.calls[0].prompt_text  # our example, not the paper's
    assert getattr(program, predictor).demos == [PRUNING_DEMO if method == "pruning" else SUMMARY_DEMO]
    zero = ScriptedLM({predictor: {"rationale": "r", "answer": "Ann"}})
    run(build(method, retriever, one_shot=False), zero)
    assert zero.calls_to(predictor)[0].demos == 0
    compiled = dspy.LabeledFewShot(k=1).compile(
        build(method, retriever), trainset=[dspy.Example(context="[1] «A | b»", question="q?", rationale="x",
                                                         answer="b").with_inputs("context", "question")])
    assert [demo["question"] for demo in getattr(compiled, predictor).demos] == ["q?"]
    with pytest.raises(ConfigError):
        build("concat", retriever, one_shot=False)


def test_pf_concat_honours_lenient_unknown_when_dropping_passages(retriever, docs):
    script = {"passage_answer": per_passage({"Doc 1": "Ann", "Doc 2": "The context does not provide it."},
                                            default="unknown"),
              "distill": {"answer": "Ann"}}
    strict, lenient = ScriptedLM(script), ScriptedLM(script)
    pred = run(build("pf_concat", retriever), strict)
    assert [p.pid for p in pred.passages] == ["1", "2"]
    pred = run(build("pf_concat", retriever, lenient_unknown=True), lenient)
    assert [p.pid for p in pred.passages] == ["1"] and pred.candidates == ["Ann"]
    assert lenient.calls_to("distill")[0].inputs["context"] == f"[1] «{docs[1].long_text}»"


def test_self_consistency_samples_each_call_and_votes(retriever):
    answers = iter(["Ann", "unknown", "Bob", "Bob"] + ["Cy"] * 20)
    lm = ScriptedLM({"concat_answer": lambda c: {"answer": next(answers)}})
    pred = run(build("concat", retriever, samples=4), lm)
    assert lm.call_names == ["concat_answer"] * 4 and pred.answer == "Bob"
    assert [entry["kwargs"].get("temperature") for entry in lm.history] == [0.7] * 4
    assert sorted(entry["kwargs"].get("rollout_id") for entry in lm.history) == [0, 1, 2, 3]
    lm = ScriptedLM({"concat_answer": {"answer": "unknown"}, "passage_answer": per_passage({"Doc 2": "Ann"})})
    pred = run(build("concat_pf", retriever, samples=2), lm)
    assert lm.call_names == ["concat_answer"] * 2 + ["passage_answer"] * 10
    assert pred.fallback is True and pred.answer == "Ann"
    with pytest.raises(ConfigError):  # one-shot chains of thought: the paper samples none of them
        build("pruning", retriever, samples=3)


def test_gold_passage_replaces_a_random_passage_only_when_none_holds_the_answer(retriever, docs):
    lm = ScriptedLM({"concat_answer": {"answer": "Ann"}})
    program = build("concat", retriever, gold_passage=True)
    with dspy.context(lm=lm):
        pred = program(question=Q, gold_passage={"title": "Gold", "text": "Ann wrote it."}, answers=["Ann"])
        again = program(question=Q, gold_passage={"title": "Gold", "text": "Ann wrote it."}, answers=["Ann"])
        present = program(question=Q, gold_passage="Gold | Doc 2 wrote it.", answers=["doc 2"])
    (position,) = pred.gold_inserted
    assert again.gold_inserted == [position]  # repeatable
    context = lm.calls[0].inputs["context"].splitlines()
    assert len(context) == 5 and context[position] == f"[{position + 1}] «Gold | Ann wrote it.»"
    assert [p.pid for p in pred.retrieved if p.pid != "gold"] == [d.pid for i, d in enumerate(docs[:5])
                                                                if i != position]
    assert present.gold_inserted == [] and "Gold" not in lm.calls[2].inputs["context"]
    with pytest.raises(ConfigError):
        run(program, ScriptedLM({"concat_answer": {"answer": "x"}}))
