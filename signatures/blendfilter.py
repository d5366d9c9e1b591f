"""Signatures of BlendFilter (Wang, Zhao, Gao, arXiv 2402.11129): chain-of-thought over knowledge, the
"write a passage" internal augmentation, the three-stage knowledge filter, and answer extraction.

Instructions are our own words; the paper's prompts (Appendix B) fixed only what each call sees and
returns. Knowledge is given as one string, `knowledge i : Title | text` per line with 0-based ids, so the
ids the filter returns index the list the program holds (the paper labels its documents the same way).
"""

from __future__ import annotations

from typing import Literal

import dspy

KNOWLEDGE = "numbered knowledge passages, one per line: 'knowledge <id> : Title | text'"


class KnowledgeCoT(dspy.Signature):
    """Answer the question using the knowledge given. Reason step by step, connecting the facts needed, and
    end the reasoning with one sentence of the form "So the answer is <answer>."."""

    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    question: str = dspy.InputField()
    reasoning: str = dspy.OutputField(desc="step-by-step reasoning ending with 'So the answer is ...'")


class WritePassage(dspy.Signature):
    """Write a short encyclopedia-style passage, from what you know, that answers the question."""

    question: str = dspy.InputField()
    passage: str = dspy.OutputField(desc="a passage of a few sentences")


class FilterTopic(dspy.Signature):
    """Say which general topic the question is about."""

    question: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="a few words naming the topic")


class TopicRelevanceAnalysis(dspy.Signature):
    """Judge the listed knowledge passages on their own terms: what you already believe about the topic does
    not count, only what each passage says. For each passage in turn, give a verdict on whether it bears on
    the question and a short reason, then list the ones that do. Any number of them may."""

    topic: str = dspy.InputField(desc="the topic of the question; set your own background on it aside")
    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="a per-passage relevance verdict with a short reason")


class RelevanceAnalysis(dspy.Signature):
    """For each listed knowledge passage in turn, give a verdict on whether it bears on the question and a
    short reason, then list the ones that do. Be strict: none of them may."""

    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="a per-passage relevance verdict with a short reason")


class SelectRelevantIds(dspy.Signature):
    """Turn the relevance analysis in the context into the list of ids of the knowledge passages it found
    relevant to the question, using the ids of the knowledge list. The list may be empty."""

    context: str = dspy.InputField(desc="the relevance analysis of these passages")
    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevant_ids: list[int] = dspy.OutputField(desc="ids of the relevant passages, e.g. [0, 3]; [] if none")


class SelectRelevantIdsDirect(dspy.Signature):
    """Check each knowledge passage against the question and output only the ids of the passages that are
    relevant to it. Use the ids shown in the knowledge list; the list may be empty."""

    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevant_ids: list[int] = dspy.OutputField(desc="ids of the relevant passages, e.g. [0, 3]; [] if none")


class ExtractShortAnswer(dspy.Signature):
    """Give the answer to the question that the reasoning in the context arrives at, in one or a few words."""

    context: str = dspy.InputField(desc="step-by-step reasoning about the question")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="one or a few words, not a sentence")


class ExtractYesNo(dspy.Signature):
    """Give the answer to the yes/no question that the reasoning in the context arrives at."""

    context: str = dspy.InputField(desc="step-by-step reasoning about the question")
    question: str = dspy.InputField()
    answer: Literal["yes", "no"] = dspy.OutputField()
