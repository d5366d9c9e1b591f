"""Issue 14, "Format slips": where a predictor's reply stays unreadable (`UnreadableOutput`), each method
degrades as its paper allows, records the degradation in the example's trace, and still answers."""

from __future__ import annotations

import dspy
import pytest

from ragzoo.adapters import UnreadableOutput, make_adapter
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages
from ragzoo.tracing import trace_example

GARBAGE = "I am not following any format here."  # no field markers: unreadable for every signature


def run(program, lm, **inputs):
    """Run under the lenient chat adapter without re-asks, so an unreadable reply raises at once."""
    with trace_example() as trace, dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=0)):
        pred = program(**inputs)
    return pred, trace


def degraded(trace) -> list[str]:
    return [d["where"] for d in trace.degradations]


def context_of(lm, name, field="context") -> str:
    return str(lm.calls_to(name)[-1].inputs[field])


# ---------------------------------------------------------------------------------------------------------
# The helper


def test_degrade_catches_only_unreadable_output():
    from dspy.utils.exceptions import AdapterParseError

    from ragzoo.programs.base import degrade

    def unreadable():
        raise UnreadableOutput("p", 1, "no fields", AdapterParseError("chat", dspy.Signature("a -> b"), "x"))

    with trace_example() as trace:
        assert degrade(unreadable, "fb", "p", "used fb") == "fb"
        assert degrade(unreadable, where="p", what="computed", otherwise=lambda: 7) == 7
        assert degrade(lambda: 1, "fb", "p", "never") == 1
        with pytest.raises(ValueError):
            degrade(lambda: int("x"), "fb", "p", "never")
        with pytest.raises(AdapterParseError):  # a plain parse failure is not a degradation
            degrade(lambda: (_ for _ in ()).throw(AdapterParseError("chat", dspy.Signature("a -> b"), "x")),
                    "fb", "p", "never")
    assert trace.degradations == [{"where": "p", "what": "used fb"}, {"where": "p", "what": "computed"}]


def test_final_answer_call_has_no_fallback():
    from ragzoo.programs.filco import Filco

    lm = ScriptedLM({"filter": {"selected": [0]}, "generate": GARBAGE})
    with pytest.raises(UnreadableOutput):
        run(Filco(StaticRetriever(make_passages(3))), lm, question="q?")


# ---------------------------------------------------------------------------------------------------------
# BlendFilter

from ragzoo.programs.blendfilter import BlendFilter  # noqa: E402

BF_Q = "Which doc answers the question?"
BF_EX = "Doc 3 says so. So the answer is three."
BF_IN = "A passage about doc eight."


def bf_script(**overrides):
    responses = {
        "external_cot": {"reasoning": BF_EX},
        "write_passage": {"passage": BF_IN},
        "filter_topic": {"topic": "documents"},
        "filter_analysis": {"relevance_analysis": "knowledge 0 is relevant"},
        "filter_ids": {"relevant_ids": [0]},
        "answer_cot": {"reasoning": "Doc 0 it is. So the answer is zero."},
        "extract_answer": {"answer": "three"},
    }
    responses.update(overrides)
    return ScriptedLM(responses)


@pytest.fixture
def bf_retriever():
    docs = make_passages(12)
    return StaticRetriever(docs, by_query={BF_Q: docs[0:5], f"{BF_EX} {BF_Q}": docs[3:8],
                                           f"{BF_IN} {BF_Q}": docs[6:11]})


@pytest.mark.parametrize("failing", ["filter_topic", "filter_analysis", "filter_ids"])
def test_blendfilter_unreadable_filter_keeps_that_set_unfiltered(bf_retriever, failing):
    # only the first set's (q's) call is unreadable: that set is kept whole, the others filtered to id 0
    good = bf_script().responses[failing]
    lm = bf_script(**{failing: [GARBAGE, good]})
    pred, trace = run(BlendFilter(bf_retriever), lm, question=BF_Q)
    assert pred.answer == "three"
    assert pred.kept_ids == {"q": [0, 1, 2, 3, 4], "q_ex": [0], "q_in": [0]}
    assert [p.pid for p in pred.passages] == ["0", "1", "2", "3", "4", "6"]
    knowledge = context_of(lm, "answer_cot", "knowledge")
    assert all(f"text of doc {i}" in knowledge for i in (0, 1, 2, 3, 4, 6))
    assert degraded(trace) == [failing]
    # the chain stops at the unreadable call: fewer calls for that set
    chain = ["filter_topic", "filter_analysis", "filter_ids"]
    assert len(lm.call_names) == 13 - (2 - chain.index(failing))


def test_blendfilter_unreadable_external_cot_retrieves_with_q(bf_retriever):
    lm = bf_script(external_cot=GARBAGE)
    pred, trace = run(BlendFilter(bf_retriever), lm, question=BF_Q)
    assert pred.answer == "three"
    assert pred.queries["q_ex"] == BF_Q
    assert [q for q, _ in bf_retriever.queries] == [BF_Q, BF_Q, f"{BF_IN} {BF_Q}"]
    assert degraded(trace) == ["external_cot"]


def test_blendfilter_unreadable_write_passage_retrieves_with_q(bf_retriever):
    lm = bf_script(write_passage=GARBAGE)
    pred, trace = run(BlendFilter(bf_retriever), lm, question=BF_Q)
    assert pred.answer == "three"
    assert pred.queries["q_in"] == BF_Q
    assert [q for q, _ in bf_retriever.queries] == [BF_Q, f"{BF_EX} {BF_Q}", BF_Q]
    assert degraded(trace) == ["write_passage"]


def test_blendfilter_unreadable_extraction_uses_the_cot_answer(bf_retriever):
    lm = bf_script(extract_answer=GARBAGE)
    pred, trace = run(BlendFilter(bf_retriever), lm, question=BF_Q)
    assert pred.answer == "zero"
    assert degraded(trace) == ["extract_answer"]
    assert len(lm.call_names) == 13


# ---------------------------------------------------------------------------------------------------------
# Per-passage answers: post-fusion family, REPLUG

from ragzoo import programs  # noqa: E402

Q = "Who is it?"
DOCS = make_passages(5)


def by_passage(replies: dict[int, object], default: object):
    """Reply to a call by which "text of doc i" its inputs hold (robust to call order)."""
    def respond(context):
        seen = str(context.inputs)
        for i, reply in replies.items():
            if f"text of doc {i}" in seen:
                return reply
        return default
    return respond


def retriever5():
    return StaticRetriever(DOCS, by_query={Q: DOCS})


@pytest.mark.parametrize("method", ["postfusion", "concat_pf", "replug"])
def test_unreadable_passage_answer_casts_no_vote(method):
    # docs 0 and 1 (best ranked, largest weights) would vote Ann, but their replies cannot be read
    answers = by_passage({0: GARBAGE, 1: GARBAGE, 2: {"answer": "Bob"}}, {"answer": "unknown"})
    lm = ScriptedLM({"passage_answer": answers, "concat_answer": {"answer": "unknown"}})
    pred, trace = run(programs.get(method, retriever=retriever5()), lm, question=Q)
    assert pred.answer == "Bob"
    assert pred.votes[:3] == ["unknown", "unknown", "Bob"]
    assert [p.pid for p in pred.passages] == ["2"]
    assert len(lm.calls_to("passage_answer")) == 5
    assert degraded(trace) == ["passage_answer", "passage_answer"]


def test_concat_pf_unreadable_concatenation_falls_back_to_post_fusion():
    lm = ScriptedLM({"concat_answer": GARBAGE,
                     "passage_answer": by_passage({3: {"answer": "Cy"}}, {"answer": "unknown"})})
    pred, trace = run(programs.get("concat_pf", retriever=retriever5()), lm, question=Q)
    assert pred.answer == "Cy"
    assert pred.fallback is True and pred.concat_answer == "unknown"
    assert lm.call_names == ["concat_answer"] + ["passage_answer"] * 5
    assert degraded(trace) == ["concat_answer"]


def test_pf_concat_unreadable_passage_answer_and_distill():
    answers = by_passage({0: GARBAGE, 1: {"answer": "Ann"}, 2: {"answer": "Bob"}, 3: {"answer": "Bob"}},
                         {"answer": "unknown"})
    lm = ScriptedLM({"passage_answer": answers, "distill": GARBAGE})
    pred, trace = run(programs.get("pf_concat", retriever=retriever5()), lm, question=Q)
    assert pred.answer == "Bob"  # the majority of the candidates (Ann 1, Bob 2)
    assert pred.distilled is False
    assert pred.candidates == ["Ann", "Bob"]
    assert lm.call_names == ["passage_answer"] * 5 + ["distill"]
    assert degraded(trace) == ["passage_answer", "distill"]


@pytest.mark.parametrize("method", ["concat", "pruning", "summary"])
def test_single_answer_call_of_the_family_still_fails(method):
    lm = ScriptedLM(default=GARBAGE)
    with pytest.raises(UnreadableOutput):
        run(programs.get(method, retriever=retriever5()), lm, question=Q)


# ---------------------------------------------------------------------------------------------------------
# FILCO

from ragzoo.programs.filco import Filco  # noqa: E402
from ragzoo.retrieval.base import Passage  # noqa: E402

PARIS = Passage(pid="p1", title="Paris", text="Paris is a large city. It is the capital of France. "
                                              "The Seine flows through it.")
LYON = Passage(pid="p2", title="Lyon", text="Lyon is a city in France. The Rhone flows through it.")


@pytest.mark.parametrize("granularity", ["sentence", "passage"])
def test_filco_unreadable_filter_uses_the_full_passage(granularity):
    retriever = StaticRetriever([PARIS, LYON], by_query={Q: [PARIS, LYON]})
    good = {"selected": [0]} if granularity == "sentence" else {"keep": False}
    lm = ScriptedLM({"filter": [GARBAGE, good], "generate": {"answer": "Seine"}})
    pred, trace = run(Filco(retriever, k=2, granularity=granularity), lm, question=Q)
    assert pred.answer == "Seine"
    assert pred.kept_ids == (["p1", "p2"] if granularity == "sentence" else ["p1"])
    context = context_of(lm, "generate")
    assert "It is the capital of France." in context and "The Seine flows through it." in context
    assert ("The Rhone" in context) is False
    assert lm.call_names == ["filter", "filter", "generate"]
    assert degraded(trace) == ["filter"]


# ---------------------------------------------------------------------------------------------------------
# ActiveRAG

from ragzoo.programs.activerag import ActiveRag  # noqa: E402


def activerag_script(**overrides):
    responses = {"initial_cot": {"reasoning": "I recall Ann.", "answer": "Ann"}}
    for agent in ("associate", "anchoring", "logician", "cognition"):
        responses[f"{agent}_kc"] = {"knowledge": f"{agent} knowledge"}
        responses[f"{agent}_nexus"] = {"enhanced_reasoning": f"{agent} checks.", "answer": f"{agent} answer"}
    responses.update(overrides)
    return ScriptedLM(responses)


def test_activerag_unreadable_initial_cot_is_empty():
    lm = activerag_script(initial_cot=GARBAGE)
    pred, trace = run(ActiveRag(retriever5()), lm, question=Q)
    assert pred.answer == "associate answer"
    assert pred.initial_reasoning == "" and pred.initial_answer == ""
    assert lm.calls_to("associate_nexus")[0].inputs["initial_reasoning"] == "(none)"
    assert lm.call_names == ["initial_cot", "associate_kc", "associate_nexus"]
    assert degraded(trace) == ["initial_cot"]


def test_activerag_unreadable_knowledge_drops_that_agent():
    lm = activerag_script(associate_kc=GARBAGE)
    pred, trace = run(ActiveRag(retriever5(), agents=("associate", "logician")), lm, question=Q)
    assert pred.answer == "logician answer"
    assert pred.winner == "logician" and list(pred.agent_answers) == ["logician"]
    assert lm.call_names == ["initial_cot", "associate_kc", "logician_kc", "logician_nexus"]
    assert degraded(trace) == ["associate_kc"]


def test_activerag_unreadable_knowledge_of_the_only_agent_leaves_the_nexus_without_knowledge():
    lm = activerag_script(associate_kc=GARBAGE)
    pred, trace = run(ActiveRag(retriever5()), lm, question=Q)
    assert pred.answer == "associate answer"
    assert lm.calls_to("associate_nexus")[0].inputs["knowledge"] == "(none)"
    assert degraded(trace) == ["associate_kc"]


# ---------------------------------------------------------------------------------------------------------
# RA-ISF

from ragzoo.programs.raisf import RAISF  # noqa: E402


def raisf_script(**overrides):
    responses = {
        "self_knowledge": {"can_answer": False},
        "direct_answer": {"answer": "direct"},
        "relevance_judge": {"relevant": False},
        "relevance_joint": {"relevant_ids": []},
        "passages_answer": {"answer": "from passages"},
        "decompose": {"sub_questions": []},
        "synthesize": {"answer": "synth"},
    }
    responses.update(overrides)
    return ScriptedLM(responses)


def test_raisf_unreadable_self_knowledge_retrieves():
    retriever = retriever5()
    lm = raisf_script(self_knowledge=GARBAGE, relevance_judge={"relevant": True})
    pred, trace = run(RAISF(retriever), lm, question=Q)
    assert (pred.answer, pred.route) == ("from passages", "relevant_passages")
    assert len(retriever.queries) == 1 and "direct_answer" not in lm.call_names
    assert degraded(trace) == ["self_knowledge"]


@pytest.mark.parametrize("relevance", ["per_passage", "joint"])
def test_raisf_unreadable_relevance_keeps_the_passages(relevance):
    # per passage: docs 1 and 3 cannot be judged (kept), the rest are irrelevant; joint: all kept
    judge = by_passage({1: GARBAGE, 3: GARBAGE}, {"relevant": False})
    lm = raisf_script(relevance_judge=judge, relevance_joint=GARBAGE)
    pred, trace = run(RAISF(retriever5(), relevance=relevance), lm, question=Q)
    assert (pred.answer, pred.route) == ("from passages", "relevant_passages")
    kept = ["1", "3"] if relevance == "per_passage" else ["0", "1", "2", "3", "4"]
    assert pred.relevant_ids == kept
    seen = context_of(lm, "passages_answer", "passages")
    assert all(f"text of doc {i}" in seen for i in kept) and "decompose" not in lm.call_names
    assert degraded(trace) == (["relevance_judge"] * 2 if relevance == "per_passage" else ["relevance_joint"])


def test_raisf_unreadable_decomposition_answers_from_all_retrieved_passages():
    lm = raisf_script(decompose=GARBAGE)
    pred, trace = run(RAISF(retriever5()), lm, question=Q)
    assert pred.answer == "from passages"
    assert pred.route == "unreadable_decomposition:passages"
    assert all(f"text of doc {i}" in context_of(lm, "passages_answer", "passages") for i in range(5))
    assert lm.call_names == ["self_knowledge", *["relevance_judge"] * 5, "decompose", "passages_answer"]
    assert degraded(trace) == ["decompose"]


# ---------------------------------------------------------------------------------------------------------
# Iterative and decomposition baselines


def test_multihop_unreadable_query_searches_with_the_question():
    retriever = retriever5()
    lm = ScriptedLM({"generate_query": [GARBAGE, {"reasoning": "r", "search_query": "doc 4"}],
                     "generate_answer": {"reasoning": "r", "answer": "Doc 4"}})
    pred, trace = run(programs.get("multihop", retriever=retriever), lm, question=Q)
    assert pred.answer == "Doc 4"
    assert pred.queries == [Q, "doc 4"] and retriever.queries == [(Q, 3), ("doc 4", 3)]
    assert degraded(trace) == ["generate_query"]


def ask(follow_up):
    return {"done": False, "follow_up": follow_up, "answer": ""}


def test_self_ask_unreadable_step_goes_to_the_final_answer():
    retriever = retriever5()
    lm = ScriptedLM({"next_step": [ask("doc 2"), GARBAGE], "answer_follow_up": {"answer": "two"},
                     "final_answer": {"answer": "Doc 2"}})
    pred, trace = run(programs.get("self_ask", retriever=retriever), lm, question=Q)
    assert pred.answer == "Doc 2" and pred.stop_reason == "unreadable_step"
    assert lm.call_names == ["next_step", "answer_follow_up", "next_step", "final_answer"]
    assert len(retriever.queries) == 1
    assert degraded(trace) == ["next_step"]


def test_self_ask_unreadable_follow_up_answer_is_unknown():
    lm = ScriptedLM({"next_step": [ask("doc 2"), {"done": True, "follow_up": "", "answer": "Doc 2"}],
                     "answer_follow_up": GARBAGE})
    pred, trace = run(programs.get("self_ask", retriever=retriever5()), lm, question=Q)
    assert pred.answer == "Doc 2" and pred.stop_reason == "done"
    assert "unknown" in str(pred.steps[0]) and "unknown" in str(lm.calls_to("next_step")[1].inputs["steps"])
    assert degraded(trace) == ["answer_follow_up"]


def test_iter_retgen_unreadable_round_keeps_the_previous_generation_and_stops():
    retriever = retriever5()
    lm = ScriptedLM({"generate": [{"reasoning": "Doc 1 says.", "answer": "one"}, GARBAGE,
                                  {"reasoning": "never", "answer": "never"}]})
    pred, trace = run(programs.get("iter_retgen", retriever=retriever), lm, question=Q)
    assert pred.answer == "one" and pred.reasoning == "Doc 1 says." and pred.stopped_early is True
    assert pred.generations == ["Doc 1 says. one"]
    assert [p.pid for p in pred.passages] == ["0", "1", "2", "3", "4"]  # round 1's passages
    assert lm.call_names == ["generate", "generate"] and len(retriever.queries) == 2
    assert degraded(trace) == ["generate"]


def test_iter_retgen_unreadable_first_round_fails():
    lm = ScriptedLM({"generate": GARBAGE})
    with pytest.raises(UnreadableOutput):
        run(programs.get("iter_retgen", retriever=retriever5()), lm, question=Q)


def test_react_unreadable_step_finishes_with_what_was_observed():
    retriever = retriever5()
    lm = ScriptedLM({"step": [{"thought": "look", "action": "search", "argument": "doc 3"}, GARBAGE],
                     "finish": {"answer": "Doc 3"}})
    pred, trace = run(programs.get("react", retriever=retriever), lm, question=Q)
    assert pred.answer == "Doc 3" and pred.stop_reason == "unreadable_step"
    assert lm.call_names == ["step", "step", "finish"] and retriever.queries == [("doc 3", 5)]
    assert "text of doc 3" in str(lm.calls_to("finish")[0].inputs["trajectory"])
    assert degraded(trace) == ["step"]


def test_ircot_unreadable_step_stops_reasoning_and_reads():
    retriever = retriever5()
    lm = ScriptedLM({"reason": [{"next_sentence": "Doc 1 names it.", "done": False}, GARBAGE],
                     "read": {"answer": "Doc 1"}})
    pred, trace = run(programs.get("ircot", retriever=retriever), lm, question=Q)
    assert pred.answer == "Doc 1" and pred.stop_reason == "unreadable_step"
    assert lm.call_names == ["reason", "reason", "read"] and len(retriever.queries) == 2
    assert lm.calls_to("read")[0].inputs["reasoning"] == "Doc 1 names it."
    assert degraded(trace) == ["reason"]


def test_least_to_most_unreadable_reduce_solves_directly():
    lm = ScriptedLM({"reduce": GARBAGE, "final_answer": {"answer": "B"}})
    pred, trace = run(programs.get("least_to_most"), lm, question=Q)
    assert pred.answer == "B" and pred.sub_questions == []
    assert lm.call_names == ["reduce", "final_answer"]
    assert degraded(trace) == ["reduce"]


def test_least_to_most_unreadable_solve_step_skips_that_sub_question():
    lm = ScriptedLM({"reduce": {"sub_questions": ["s1?", "s2?", "s3?"]},
                     "solve_step": [{"answer": "a1"}, GARBAGE, {"answer": "a3"}], "final_answer": {"answer": "B"}})
    pred, trace = run(programs.get("least_to_most"), lm, question=Q)
    assert pred.answer == "B"
    assert pred.solved == ["Q: s1? A: a1", "Q: s3? A: a3"] and pred.skipped == ["s2?"]
    assert "s2?" not in str(lm.calls_to("final_answer")[0].inputs["solved"])
    assert lm.call_names == ["reduce", "solve_step", "solve_step", "solve_step", "final_answer"]
    assert degraded(trace) == ["solve_step"]


def test_self_rerank_unreadable_tags_keep_every_passage():
    lm = ScriptedLM({"tag": GARBAGE, "answer": {"answer": "x"}})
    pred, trace = run(programs.get("self_rerank", retriever=retriever5()), lm, question=Q)
    assert pred.answer == "x" and [p.pid for p in pred.passages] == ["0", "1", "2", "3", "4"]
    assert all(f"text of doc {i}" in context_of(lm, "answer") for i in range(5))
    assert degraded(trace) == ["tag"]


def test_self_refine_unreadable_summary_answers_from_the_passages():
    lm = ScriptedLM({"summarize": GARBAGE, "answer": {"answer": "x"}})
    pred, trace = run(programs.get("self_refine", retriever=retriever5()), lm, question=Q)
    assert pred.answer == "x" and pred.summary is None
    assert all(f"text of doc {i}" in context_of(lm, "answer") for i in range(5))
    assert lm.call_names == ["summarize", "answer"]
    assert degraded(trace) == ["summarize"]


def test_guideline_unreadable_guide_answers_without_the_guideline():
    lm = ScriptedLM({"cot": {"reasoning": "I recall B.", "answer": "B"}, "guide": GARBAGE,
                     "merge": {"reasoning": "checked", "answer": "M"}})
    pred, trace = run(programs.get("guideline"), lm, question=Q)
    assert pred.answer == "M" and pred.analysis is None
    merge = lm.calls_to("merge")[0].inputs
    assert merge["analysis"] == "(none)" and "I recall B." in merge["other_reasoning"]
    assert degraded(trace) == ["guide"]
