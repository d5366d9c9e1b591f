"""Signatures of ActiveRAG's prompt-based baselines (Xu et al. 2024, arXiv 2402.13547, Table 8):
Chain-of-Note (Yu et al. 2023), Self-Rerank and Self-Refine (both "inspired by Self-RAG", no fine-tuning),
and Guideline. Instructions are our own words, written from what each call must produce.
"""

from __future__ import annotations

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
PASSAGES = "retrieved passages, each '[i] Title | text', numbered from 1"


class NotesThenAnswer(dspy.Signature):
    """Write a reading note on each passage: its key point and whether it bears on the question. If some
    passages bear on it, answer from them; if none does, answer from your own knowledge instead."""

    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    notes: str = dspy.OutputField(desc="one note per passage: key point, and relevance to the question")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class TagPassages(dspy.Signature):
    """Tag every passage twice with a short reason: is it USEFUL for answering the question, and is it
    RELEVANT to the question's topic? Return the numbers of the useful passages and of the relevant ones."""

    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    reasons: str = dspy.OutputField(desc="'passage i: useful|useless, relevant|irrelevant, because ...' per passage")
    useful: list[int] = with_dry_run(dspy.OutputField(desc="numbers of the useful passages; [] if none"), [1])
    relevant: list[int] = with_dry_run(dspy.OutputField(desc="numbers of the relevant passages; [] if none"), [1])


class SummarizePassages(dspy.Signature):
    """Pull out of the passages what matters for the question, and write it up as a short summary with an
    analysis of how it bears on the question."""

    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    summary: str = dspy.OutputField(desc="summary and analysis of the useful content")


class AnswerFromTexts(dspy.Signature):
    """Answer the question based on the texts given."""

    texts: list[str] = dspy.InputField(desc="the texts to answer from (may be empty)")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class GuidingAnalysis(dspy.Signature):
    """Write a step-by-step analysis that would guide a student toward solving the question: the facts to
    recall and the steps to take. Do not state the final answer."""

    question: str = dspy.InputField()
    analysis: str = dspy.OutputField(desc="a guiding analysis that stops short of the answer")


class MergeReasoning(dspy.Signature):
    """Two analyses of the question are given: a guiding analysis and another reasoning with its answer.
    Combine them, check the combined reasoning for mistakes, write the improved reasoning, and answer."""

    question: str = dspy.InputField()
    analysis: str = dspy.InputField(desc="the guiding analysis")
    other_reasoning: str = dspy.InputField(desc="another reasoning process and its answer; it may be wrong")
    reasoning: str = dspy.OutputField(desc="the combined, checked reasoning")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
