"""`--adapter two-step`: DSPy's TwoStepAdapter (free-text answer, then an extraction call by the same LM
unless another is given), read by the lenient chat adapter, counted, and recorded like the others."""

from __future__ import annotations

import argparse

import dspy
import pytest

from ragzoo import programs
from ragzoo.adapters import TwoStepLenientAdapter, UnreadableOutput, adapter_name, make_adapter
from ragzoo.commands.common import add_lm_args, build_adapter
from ragzoo.errors import ConfigError
from ragzoo.testing import ScriptedLM
from ragzoo.tracing import trace_example

FREE_TEXT = "Looking at the passages, doc 7 is the one that matters. So my final answer: Doc 7."


def is_extraction(context) -> bool:
    return "extract the fields from the text verbatim" in context.system


def two_step_responder(context):
    if is_extraction(context):  # the second step: read the fields out of the first step's text
        assert FREE_TEXT in context.prompt_text
        return {"reasoning": "doc 7 is the one that matters", "answer": "Doc 7"}
    return FREE_TEXT  # the first step: free text, no field headers at all


def test_a_method_runs_under_two_step_with_the_same_lm_extracting(static_retriever):
    program = programs.get("cot_rag", retriever=static_retriever)
    lm = ScriptedLM(default=two_step_responder)
    with dspy.context(lm=lm, adapter=make_adapter("two-step")), trace_example() as trace:
        prediction = program(question="what does doc 7 say")
    assert prediction.answer == "Doc 7"
    assert len(lm.calls) == 2  # one answer + one extraction, both by the same LM
    main, extraction = lm.calls
    assert not is_extraction(main) and is_extraction(extraction)
    assert "[[ ## answer ## ]]" not in main.prompt_text  # the main prompt asks for free text
    assert "question: what does doc 7 say" in main.prompt_text
    assert len(trace.lm_calls) == 2  # the extraction is counted like any call


def test_a_given_extraction_lm_reads_the_replies(static_retriever):
    program = programs.get("rag", retriever=static_retriever)
    main = ScriptedLM(default=lambda context: "The answer is Doc 7.")
    reader = ScriptedLM(default={"answer": "Doc 7"})
    with dspy.context(lm=main, adapter=make_adapter("two-step", extraction_lm=reader)):
        prediction = program(question="what does doc 7 say")
    assert prediction.answer == "Doc 7"
    assert len(main.calls) == 1 and len(reader.calls) == 1 and is_extraction(reader.calls[0])


def test_an_unreadable_extraction_is_reasked_then_raises_unreadable_output():
    lm = ScriptedLM(default=lambda context: "no fields here" if is_extraction(context) else FREE_TEXT)
    with dspy.context(lm=lm, adapter=make_adapter("two-step", max_reasks=1)):
        with pytest.raises(UnreadableOutput):
            dspy.Predict("question -> answer: int")(question="how many?")
    assert [is_extraction(call) for call in lm.calls] == [False, True, True]  # 1 answer, extraction + 1 re-ask


def test_two_step_is_an_option_recorded_like_the_others():
    parser = argparse.ArgumentParser()
    add_lm_args(parser)
    args = parser.parse_args(["--adapter", "two-step", "--max-reasks", "1"])
    adapter = build_adapter(vars(args))
    assert isinstance(adapter, TwoStepLenientAdapter) and adapter.max_reasks == 1
    assert adapter_name(adapter) == "two-step" and adapter_name(dspy.TwoStepAdapter(ScriptedLM())) == "two-step"
    with pytest.raises(ConfigError, match="two-step adapter only"):
        make_adapter("chat", extraction_lm=ScriptedLM())
    with pytest.raises(ConfigError, match="two-step"):
        make_adapter("three-step")


@pytest.mark.parametrize("shape", ["empty", "length"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_empty_or_cut_main_reply_is_asked_again_not_extracted(shape, asynchronous):
    """Review: the main call's reply was never checked: cut off, it was extracted as if whole ('{"answer": "');
    empty, the question was lost (sync) or the extraction made an answer up (async)."""
    import asyncio

    from ragzoo.lm import make_lm
    from ragzoo.stubserver import StubLMServer

    with StubLMServer(slips=[shape]) as server:  # the first request slips; the rest are answered
        lm = make_lm("openai/stub-model", api_base=server.base_url + "/v1", cache=False, num_retries=0)
        predict = dspy.Predict("question -> answer")
        with dspy.context(lm=lm, adapter=make_adapter("two-step")), trace_example() as trace:
            if asynchronous:
                prediction = asyncio.run(predict.acall(question="Capital of France?"))
            else:
                prediction = predict(question="Capital of France?")
        bodies = server.bodies if hasattr(server, "bodies") else None
    assert len(trace.reasks) == 1 and len(trace.lm_calls) == 3  # the slipped answer, its re-ask, the extraction
    assert prediction.answer and not prediction.answer.startswith('{"answer"')
    assert bodies is None or "Answer again" in str(bodies[1])


def test_a_main_reply_that_stays_empty_ends_in_unreadable_output():
    lm = ScriptedLM(default=lambda context: "" if not is_extraction(context) else {"answer": "made up"})
    with dspy.context(lm=lm, adapter=make_adapter("two-step", max_reasks=1)):
        with pytest.raises(UnreadableOutput, match="empty"):
            dspy.Predict("question -> answer")(question="how many?")
    assert [is_extraction(call) for call in lm.calls] == [False, False]  # nothing extracted from nothing


def test_the_main_calls_reask_turns_are_not_in_the_extraction_prompt():
    """Review: the extraction ran while the main call's re-ask was set, so its prompt ended asking for free text."""
    replies = iter(["", FREE_TEXT])
    lm = ScriptedLM(default=lambda context: {"answer": "Doc 7"} if is_extraction(context) else next(replies))
    with dspy.context(lm=lm, adapter=make_adapter("two-step")):
        assert dspy.Predict("question -> answer")(question="q?").answer == "Doc 7"
    main, again, extraction = lm.calls
    assert "Answer again" in again.prompt_text and "Answer again" not in extraction.prompt_text
