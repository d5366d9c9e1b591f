"""Baselines: direct, cot, rag, cot_rag, iter_retgen, self_ask, multihop.

For each: the exact predictor calls and retrievals for one question, what each call sees, how the answer
is formed, edge cases, named_predictors, JSON save/load, and parse failures."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from ragzoo import programs
from ragzoo.errors import ConfigError
from ragzoo.signatures.common import step_text
from ragzoo.testing import ScriptedLM, StaticRetriever, make_passages
from ragzoo.tracing import trace_example

QUESTION = "what does doc 7 say"


def run(program, lm, question: str = QUESTION):
    with dspy.context(lm=lm):
        return program(question=question)


def context_of(call) -> list[str]:
    """The passage list a call saw (list[str] inputs are formatted as JSON)."""
    return json.loads(call.inputs["context"])


def titles(passages) -> list[str]:
    return [p.title for p in passages]


# --- direct / cot --------------------------------------------------------------------------------------


def test_direct_answers_in_one_call_without_retrieval(static_retriever):
    program = programs.get("direct")
    lm = ScriptedLM({"generate_answer": {"answer": "Paris"}})
    prediction = run(program, lm)
    assert lm.call_names == ["generate_answer"]
    assert lm.calls[0].inputs == {"question": QUESTION}
    assert "reasoning" not in lm.calls[0].signature.output_fields
    assert prediction.answer == "Paris" and prediction.passages == []
    assert static_retriever.queries == []


def test_cot_reasons_before_answering():
    program = programs.get("cot")
    lm = ScriptedLM({"generate_answer": {"reasoning": "Paris is the capital.", "answer": "Paris"}})
    prediction = run(program, lm)
    assert lm.call_names == ["generate_answer"]
    assert list(lm.calls[0].signature.output_fields) == ["reasoning", "answer"]
    assert (prediction.answer, prediction.reasoning) == ("Paris", "Paris is the capital.")


def test_answer_fields_ask_for_short_answers(static_retriever):
    # EM is the metric: every final-answer field asks for a few words.
    for method_id in ("direct", "cot", "rag", "cot_rag", "iter_retgen", "multihop", "self_ask"):
        program = programs.get(method_id, retriever=static_retriever)
        answer_fields = [predictor.signature.output_fields["answer"] for _, predictor in program.named_predictors()
                         if "answer" in predictor.signature.output_fields]
        assert answer_fields, method_id
        assert all("few words" in field.json_schema_extra["desc"] for field in answer_fields), method_id


# --- rag / cot_rag -------------------------------------------------------------------------------------


def test_rag_retrieves_k_for_the_question_and_answers_over_them(static_retriever):
    program = programs.get("rag", retriever=static_retriever)
    lm = ScriptedLM({"generate_answer": {"answer": "Doc 7"}})
    prediction = run(program, lm)
    assert static_retriever.queries == [(QUESTION, 5)]
    assert lm.call_names == ["generate_answer"]
    expected = [p.long_text for p in StaticRetriever(static_retriever.passages)(QUESTION, 5)]
    assert context_of(lm.calls[0]) == expected and expected[0] == "Doc 7 | text of doc 7"
    assert lm.calls[0].inputs["question"] == QUESTION
    assert prediction.answer == "Doc 7"
    assert [p.long_text for p in prediction.passages] == expected


def test_cot_rag_uses_k_knob_and_chain_of_thought(static_retriever):
    program = programs.get("cot_rag", retriever=static_retriever, k="2")
    lm = ScriptedLM({"generate_answer": {"reasoning": "Doc 7 says so.", "answer": "Doc 7"}})
    prediction = run(program, lm)
    assert static_retriever.queries == [(QUESTION, 2)]
    assert len(context_of(lm.calls[0])) == 2
    assert list(lm.calls[0].signature.output_fields) == ["reasoning", "answer"]
    assert (prediction.answer, prediction.reasoning, len(prediction.passages)) == ("Doc 7", "Doc 7 says so.", 2)


def test_yes_no_answer_mode_types_the_answer(static_retriever):
    program = programs.get("rag", retriever=static_retriever, answer_mode="yes_no")
    assert run(program, ScriptedLM({"generate_answer": {"answer": "yes"}})).answer == "yes"
    with pytest.raises(AdapterParseError):
        run(programs.get("rag", retriever=static_retriever, answer_mode="yes_no"),
            ScriptedLM({"generate_answer": {"answer": "maybe"}}))


# --- iter_retgen ---------------------------------------------------------------------------------------


def iter_retgen_lm() -> ScriptedLM:
    return ScriptedLM({"generate": [
        {"reasoning": "It mentions doc 3 here", "answer": "three"},
        {"reasoning": "Now doc 5 appears", "answer": "five"},
        {"reasoning": "Finally doc 7", "answer": "seven"},
    ]})


def test_iter_retgen_retrieves_with_previous_generation_then_question(passages):
    retriever = StaticRetriever(passages)
    program = programs.get("iter_retgen", retriever=retriever)
    lm = iter_retgen_lm()
    prediction = run(program, lm, "Which one?")
    assert lm.call_names == ["generate"] * 3
    assert retriever.queries == [
        ("Which one?", 5),
        ("It mentions doc 3 here three Which one?", 5),
        ("Now doc 5 appears five Which one?", 5),
    ]
    # Each iteration generates over its own retrieval and the ORIGINAL question, not earlier generations.
    fresh = StaticRetriever(passages)
    for call, (query, k) in zip(lm.calls, list(retriever.queries)):
        assert context_of(call) == [p.long_text for p in fresh(query, k)]
        assert call.inputs["question"] == "Which one?"
    assert context_of(lm.calls[1])[0] == "Doc 3 | text of doc 3"
    assert context_of(lm.calls[2])[0] == "Doc 5 | text of doc 5"
    # The last iteration's answer and passages are the output.
    assert prediction.answer == "seven"
    assert titles(prediction.passages) == [t.split(" | ")[0] for t in context_of(lm.calls[2])]
    assert prediction.generations[0] == "It mentions doc 3 here three"
    assert len(prediction.queries) == 3


def test_iter_retgen_T_knob_and_validation(static_retriever):
    lm = iter_retgen_lm()
    prediction = run(programs.get("iter_retgen", retriever=static_retriever, T=1, k=2), lm)
    assert lm.call_names == ["generate"] and static_retriever.queries == [(QUESTION, 2)]
    assert prediction.answer == "three"
    with pytest.raises(ConfigError, match="T >= 1"):
        programs.get("iter_retgen", retriever=static_retriever, T=0)


# --- multihop ------------------------------------------------------------------------------------------


def test_multihop_generates_a_query_per_hop_over_the_context_so_far():
    docs = make_passages(6)
    retriever = StaticRetriever(docs, by_query={"first hop": [docs[0], docs[1], docs[2]],
                                                "second hop": [docs[2], docs[3], docs[4]]})
    program = programs.get("multihop", retriever=retriever)
    lm = ScriptedLM({
        "generate_query": [{"reasoning": "r1", "search_query": "first hop"},
                           {"reasoning": "r2", "search_query": "second hop"}],
        "generate_answer": {"reasoning": "r3", "answer": "Doc 4"},
    })
    prediction = run(program, lm)
    assert lm.call_names == ["generate_query", "generate_query", "generate_answer"]
    assert retriever.queries == [("first hop", 3), ("second hop", 3)]
    hop1, hop2, answer = lm.calls
    assert context_of(hop1) == []
    assert context_of(hop2) == [d.long_text for d in docs[:3]]
    # Deduplicated union in hop order: doc 2 appears once.
    assert context_of(answer) == [d.long_text for d in docs[:5]]
    assert all(call.inputs["question"] == QUESTION for call in lm.calls)
    assert prediction.answer == "Doc 4"
    assert titles(prediction.passages) == titles(docs[:5])
    assert prediction.queries == ["first hop", "second hop"]


def test_multihop_hops_knob(static_retriever):
    lm = ScriptedLM({"generate_query": {"reasoning": "r", "search_query": "doc 1"},
                     "generate_answer": {"reasoning": "r", "answer": "a"}})
    run(programs.get("multihop", retriever=static_retriever, hops=3, k=1), lm)
    assert lm.call_names == ["generate_query"] * 3 + ["generate_answer"]
    assert static_retriever.queries == [("doc 1", 1)] * 3
    with pytest.raises(ConfigError, match="hops >= 1"):
        programs.get("multihop", retriever=static_retriever, hops=0)


# --- self_ask ------------------------------------------------------------------------------------------


def ask(follow_up: str) -> dict:
    return {"done": False, "follow_up": follow_up, "answer": ""}


def finish(answer: str) -> dict:
    return {"done": True, "follow_up": "", "answer": answer}


def test_self_ask_follow_ups_until_done(passages):
    retriever = StaticRetriever(passages)
    program = programs.get("self_ask", retriever=retriever, k=2)
    lm = ScriptedLM({"next_step": [ask("doc 3"), ask("doc 5"), finish("Doc 5")],
                     "answer_follow_up": [{"answer": "three"}, {"answer": "five"}]})
    prediction = run(program, lm)
    assert lm.call_names == ["next_step", "answer_follow_up", "next_step", "answer_follow_up", "next_step"]
    assert retriever.queries == [("doc 3", 2), ("doc 5", 2)]
    step1, inter1, step2, inter2, step3 = lm.calls
    # The intermediate answer sees its follow-up and only that follow-up's passages.
    assert inter1.inputs["question"] == "doc 3"
    fresh = StaticRetriever(passages)
    assert context_of(inter1) == [p.long_text for p in fresh("doc 3", 2)]
    assert context_of(inter2) == [p.long_text for p in fresh("doc 5", 2)]
    # The step predictor sees the original question, the answered follow-ups and everything retrieved.
    assert all(call.inputs["question"] == QUESTION for call in (step1, step2, step3))
    assert json.loads(step1.inputs["steps"]) == [] and context_of(step1) == []
    assert json.loads(step2.inputs["steps"]) == [step_text("doc 3", "three")]
    assert json.loads(step3.inputs["steps"]) == [step_text("doc 3", "three"), step_text("doc 5", "five")]
    assert context_of(step3) == [p.long_text for p in prediction.passages]
    assert titles(prediction.passages) == ["Doc 3", "Doc 0", "Doc 5"]  # deduplicated, doc 0 once
    assert (prediction.answer, prediction.stop_reason) == ("Doc 5", "done")
    assert prediction.follow_ups == ["doc 3", "doc 5"]


def test_self_ask_answers_at_once_when_no_follow_up_is_needed(static_retriever):
    lm = ScriptedLM({"next_step": finish("Paris")})
    prediction = run(programs.get("self_ask", retriever=static_retriever), lm)
    assert lm.call_names == ["next_step"] and static_retriever.queries == []
    assert (prediction.answer, prediction.passages, prediction.stop_reason) == ("Paris", [], "done")


def test_self_ask_stops_at_max_steps_with_a_final_answer(static_retriever):
    lm = ScriptedLM({"next_step": ask("doc 1"), "answer_follow_up": {"answer": "one"},
                     "final_answer": {"answer": "Doc 1"}})
    prediction = run(programs.get("self_ask", retriever=static_retriever, max_steps=2), lm)
    assert lm.call_names == ["next_step", "answer_follow_up"] * 2 + ["final_answer"]
    assert static_retriever.queries == [("doc 1", 5)] * 2
    final = lm.calls[-1]
    assert final.inputs["question"] == QUESTION
    assert json.loads(final.inputs["steps"]) == [step_text("doc 1", "one")] * 2
    assert (prediction.answer, prediction.stop_reason) == ("Doc 1", "max_steps")


def test_self_ask_default_budget_is_four_follow_ups(static_retriever):
    lm = ScriptedLM({"next_step": ask("doc 1"), "answer_follow_up": {"answer": "one"},
                     "final_answer": {"answer": "x"}})
    run(programs.get("self_ask", retriever=static_retriever), lm)
    assert len(lm.calls) == 9 and len(static_retriever.queries) == 4


@pytest.mark.parametrize("step, reason", [(finish(""), "done_without_answer"), (ask(""), "no_follow_up")])
def test_self_ask_malformed_step_goes_to_final_answer(static_retriever, step, reason):
    lm = ScriptedLM({"next_step": step, "final_answer": {"answer": "fallback"}})
    prediction = run(programs.get("self_ask", retriever=static_retriever), lm)
    assert lm.call_names == ["next_step", "final_answer"] and static_retriever.queries == []
    assert (prediction.answer, prediction.stop_reason) == ("fallback", reason)


# --- every baseline ------------------------------------------------------------------------------------

NAMED_PREDICTORS = {
    "direct": ["generate_answer"],
    "cot": ["generate_answer"],  # ReasonThenAnswer: a plain Predict whose signature reasons first
    "rag": ["generate_answer"],
    "cot_rag": ["generate_answer.predict"],
    "iter_retgen": ["generate.predict"],
    "multihop": ["generate_query.predict", "generate_answer.predict"],
    "self_ask": ["next_step", "answer_follow_up", "final_answer"],
}

# A script answering every call site of every baseline (self_ask asks once, then finishes).
SCRIPT = {
    "generate_answer": {"reasoning": "because", "answer": "Doc 1"},
    "generate": {"reasoning": "doc 1", "answer": "Doc 1"},
    "generate_query": {"reasoning": "hop", "search_query": "doc 1"},
    "next_step": [ask("doc 1"), finish("Doc 1")],
    "answer_follow_up": {"answer": "one"},
    "final_answer": {"answer": "Doc 1"},
}

CALLS = {  # (LM calls, retrievals) per question with SCRIPT and default knobs
    "direct": (1, 0), "cot": (1, 0), "rag": (1, 1), "cot_rag": (1, 1),
    "iter_retgen": (3, 3), "multihop": (3, 2), "self_ask": (3, 1),
}


def build(method_id: str, retriever):
    return programs.get(method_id, retriever=retriever)


@pytest.mark.parametrize("method_id", sorted(NAMED_PREDICTORS))
def test_named_predictors_list_every_call_site(method_id, static_retriever):
    program = build(method_id, static_retriever)
    assert [name for name, _ in program.named_predictors()] == NAMED_PREDICTORS[method_id]
    lm = ScriptedLM(SCRIPT)
    run(program, lm)
    sites = {name.removesuffix(".predict") for name in NAMED_PREDICTORS[method_id]}
    assert set(lm.call_names) <= sites


@pytest.mark.parametrize("method_id", sorted(CALLS))
def test_calls_and_retrievals_are_traced(method_id, static_retriever):
    program = build(method_id, static_retriever)
    lm = ScriptedLM(SCRIPT)
    with trace_example() as trace:
        prediction = run(program, lm)
    assert (len(lm.calls), len(trace.retrievals)) == CALLS[method_id]
    assert prediction.answer == "Doc 1"
    assert isinstance(prediction.passages, list)


@pytest.mark.parametrize("method_id", sorted(NAMED_PREDICTORS))
def test_save_load_json_round_trip(method_id, static_retriever, tmp_path):
    program = build(method_id, static_retriever)
    for _, predictor in program.named_predictors():
        fields = {**{name: "demo input" for name in predictor.signature.input_fields},
                  **{name: "demo output" for name in predictor.signature.output_fields}}
        predictor.demos = [dspy.Example(**fields).with_inputs(*predictor.signature.input_fields)]
    path = tmp_path / "program.json"
    program.save(str(path))
    assert json.loads(path.read_text())  # JSON state, not a pickle

    loaded = build(method_id, static_retriever)
    assert all(not p.demos for _, p in loaded.named_predictors())
    loaded.load(str(path))
    assert loaded.dump_state() == program.dump_state()

    before, after = ScriptedLM(SCRIPT), ScriptedLM(SCRIPT)
    first, second = run(program, before), run(loaded, after)
    assert (first.answer, titles(first.passages)) == (second.answer, titles(second.passages))
    assert [c.prompt_text for c in before.calls] == [c.prompt_text for c in after.calls]
    assert all(call.demos == 1 for call in after.calls)  # the loaded demos reach the prompt


@pytest.mark.parametrize("method_id", sorted(NAMED_PREDICTORS))
def test_unparseable_output_raises_adapter_parse_error(method_id, static_retriever):
    program = build(method_id, static_retriever)
    lm = ScriptedLM(default="no fields here at all")
    with pytest.raises(AdapterParseError):
        run(program, lm)
    # DSPy retries a failed ChatAdapter parse with the JSONAdapter: one failing predictor call = 2 LM calls.
    assert len(lm.calls) == 2


def test_a_yes_no_answer_that_is_neither_is_re_asked_under_ragzoos_adapter(static_retriever):
    """Review: a yes/no reply that read as neither failed the question at once, 0 re-asks (it was read after the
    adapter), and `--retry-failed` replayed it from the cache. Under ragzoo's adapter it is re-asked: the re-ask
    is a new conversation, showing the reply that could not be read."""
    import dspy

    from ragzoo.adapters import make_adapter
    from ragzoo.tracing import trace_example

    lm = ScriptedLM({"generate_answer": [{"answer": "maybe"}, {"answer": "Yes, it is."}]})
    program = programs.get("rag", retriever=static_retriever, answer_mode="yes_no")
    with trace_example() as trace, dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=2)):
        assert program(question="q?").answer == "yes"
    assert lm.call_names == ["generate_answer", "generate_answer"] and len(trace.reasks) == 1
    second = lm.calls_to("generate_answer")[1]
    assert "maybe" in second.prompt_text and "could not be read" in second.prompt_text
    never = ScriptedLM({"generate_answer": {"answer": "maybe"}})
    with dspy.context(lm=never, adapter=make_adapter("chat", max_reasks=1)), pytest.raises(AdapterParseError):
        programs.get("rag", retriever=static_retriever, answer_mode="yes_no")(question="q?")
    assert never.call_names == ["generate_answer"] * 2


def test_the_stub_server_answers_a_yes_no_field_yes(static_retriever):
    """Review: under the README's rehearsal stub every StrategyQA question failed (placeholder text where the
    program reads yes or no)."""
    import dspy

    from ragzoo.adapters import make_adapter
    from ragzoo.lm import make_lm
    from ragzoo.stubserver import StubLMServer

    with StubLMServer() as server:
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        with dspy.context(lm=lm, adapter=make_adapter("chat")):
            prediction = programs.get("rag", retriever=static_retriever, answer_mode="yes_no")(question="q?")
        assert prediction.answer == "yes" and server.requests == 1


def test_a_yes_no_reply_the_adapter_could_not_read_at_all_is_not_re_asked_again(static_retriever):
    """Diff review: the yes/no re-asks wrapped the adapter's own: an unreadable reply cost 9 calls, not 3."""
    import dspy

    from ragzoo.adapters import make_adapter

    lm = ScriptedLM({"generate_answer": "no fields here at all"})
    with dspy.context(lm=lm, adapter=make_adapter("chat", max_reasks=2)), pytest.raises(AdapterParseError):
        programs.get("rag", retriever=static_retriever, answer_mode="yes_no")(question="q?")
    assert lm.call_names == ["generate_answer"] * 3
