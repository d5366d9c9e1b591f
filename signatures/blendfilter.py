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
    """Put aside what you already know about the topic and rely only on the knowledge listed. Go through the
    knowledge passages one at a time and decide whether each helps to answer the question; discard the
    irrelevant ones and state which remain. Several passages may be relevant. Work step by step."""

    topic: str = dspy.InputField(desc="the topic of the question, whose background knowledge to set aside")
    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="a per-passage relevance verdict with a short reason")


class RelevanceAnalysis(dspy.Signature):
    """Go carefully through the knowledge passages one at a time and decide whether each helps to answer the
    question; discard every irrelevant one and state which remain. It is possible that none is relevant."""

    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="a per-passage relevance verdict with a short reason")


class SelectRelevantIds(dspy.Signature):
    """Following the relevance analysis given as context, output only the ids of the knowledge passages
    that are relevant to the question. Use the ids shown in the knowledge list; the list may be empty."""

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
