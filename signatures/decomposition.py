"""Signatures of the decomposition and interleaving baselines of RA-ISF's Table 1: Least-to-most prompting
(Zhou et al. 2023, arXiv 2205.10625) and IRCoT (Trivedi et al. 2023, arXiv 2212.10509).

Instructions are our own words.
"""

from __future__ import annotations

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
CONTEXT = "retrieved passages, each 'Title | text'"


class ReduceToSubquestions(dspy.Signature):
    """List the simpler questions that must be answered first, in the order to answer them, so that the
    last one settles the original question. Later questions may build on the answers to earlier ones."""

    question: str = dspy.InputField()
    sub_questions: list[str] = with_dry_run(
        dspy.OutputField(desc="sub-questions, easiest first"), ["dry-run sub-question 1", "dry-run sub-question 2"])


class AnswerWithSolvedSteps(dspy.Signature):
    """Answer the question from what you know, using the answers to the questions solved before it."""

    solved: list[str] = dspy.InputField(desc="earlier questions with their answers, 'Q: ... A: ...'")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class NextReasoningSentence(dspy.Signature):
    """Continue the step-by-step reasoning toward the answer by ONE sentence, using the passages. Set done
    when the reasoning has reached the answer."""

    context: list[str] = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    reasoning_so_far: list[str] = dspy.InputField(desc="the reasoning sentences written so far")
    next_sentence: str = dspy.OutputField(desc="one new sentence of reasoning")
    # Dry run takes the longest path (the step budget), so its call count is the upper bound.
    done: bool = with_dry_run(dspy.OutputField(desc="true when the reasoning states the answer"), False)


class AnswerFromReasoning(dspy.Signature):
    """Give the answer to the question that the reasoning over the passages arrives at."""

    context: list[str] = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    reasoning: str = dspy.InputField(desc="step-by-step reasoning about the question")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
