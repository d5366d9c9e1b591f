"""Shared question-answering signatures: closed-book answers (direct, or reasoning first), passage-grounded
answers, search-query writing, and the Self-Ask step. The baselines use them; any method may reuse them.

Instructions are our own words. Answers are asked to be short (a few words) because the benchmarks score
exact match. `with_answer_mode(signature, "yes_no")` types the answer as yes/no for StrategyQA-style questions.
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
CONTEXT = "retrieved passages, each 'Title | text'"


class AnswerQuestion(dspy.Signature):
    """Answer the question from your own knowledge."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class ReasonThenAnswer(dspy.Signature):
    """Answer the question from your own knowledge and show the work: `reasoning` lays out the facts you
    recall and each inference drawn from them, in order, and `answer` is where that reasoning ends up."""

    # ActiveRAG's Table 8 has one chain-of-thought prompt, used by its CoT row, by its own first step and by
    # Guideline's first call; this is that one prompt here (`cot`, `activerag`'s `initial_cot`, `guideline`'s
    # `cot`), so the three send the same text.
    question: str = dspy.InputField()
    reasoning: str = dspy.OutputField(desc="the recalled facts and inferences, step by step")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class AnswerWithContext(dspy.Signature):
    """Answer the question using the passages in the context; where they fall short, use what you know."""

    # The answering prompt of every "Vanilla RAG" row, and (ActiveRAG's Table 8: "same as Vanilla RAG") of
    # Self-Rerank's and Self-Refine's answering call: the kept passages, or the summary, fill `context`.
    context: list[str] = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class GenerateSearchQuery(dspy.Signature):
    """Write one search query for the information that is still missing to answer the question, given what
    the context already says. The query goes to a Wikipedia search engine."""

    context: list[str] = dspy.InputField(desc=CONTEXT + " found so far (may be empty)")
    question: str = dspy.InputField()
    search_query: str = with_dry_run(dspy.OutputField(desc="a short keyword query"), "search query")


class SelfAskStep(dspy.Signature):
    """Solve the question by asking simpler follow-up questions one at a time. Given the follow-up questions
    answered so far and the passages found for them, either ask the next follow-up question whose answer is
    still missing, or, when what is known suffices, give the final answer to the original question."""

    context: list[str] = dspy.InputField(desc=CONTEXT + " found for the follow-up questions (may be empty)")
    question: str = dspy.InputField()
    steps: list[str] = dspy.InputField(desc="follow-up questions asked so far with their intermediate answers")
    # Dry run takes the longest path (max_steps follow-ups), so its call count is the upper bound.
    done: bool = with_dry_run(
        dspy.OutputField(desc="true if the final answer can be given now, false if a follow-up is needed"), False)
    follow_up: str = with_dry_run(
        dspy.OutputField(desc="the next follow-up question when not done; empty when done"), "follow-up question")
    answer: str = dspy.OutputField(desc="when done, " + SHORT_ANSWER + "; empty otherwise")


class SelfAskFinalAnswer(dspy.Signature):
    """The follow-up questions below were asked and answered to solve the question. Give the final answer to
    the original question."""

    context: list[str] = dspy.InputField(desc=CONTEXT + " found for the follow-up questions")
    question: str = dspy.InputField()
    steps: list[str] = dspy.InputField(desc="follow-up questions with their intermediate answers")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


def step_text(follow_up: str, intermediate_answer: str) -> str:
    """How one answered follow-up question is shown to later calls."""
    return f"Follow-up: {follow_up} -> Intermediate answer: {intermediate_answer}"


AnswerMode = Literal["short", "yes_no"]


def with_answer_mode(signature: type[dspy.Signature], answer_mode: AnswerMode,
                     field: str = "answer") -> type[dspy.Signature]:
    """The signature unchanged for "short" answers, or with `field` typed `Literal["yes", "no"]` for "yes_no"
    (StrategyQA). The knob is named `answer_mode` in every method, so one flag switches a whole comparison;
    programs validate it as a knob (see `ragzoo.programs.base`), so it is not re-checked here."""
    if answer_mode == "short":
        return signature
    return signature.with_updated_fields(field, type_=Literal["yes", "no"], desc="yes or no")
