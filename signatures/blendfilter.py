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
    """Name the subject area of the question. The name is handed to the passage screening that follows, so
    that the screener can set aside its own background on this subject and go by what the passages say."""

    question: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="a few words naming the subject area")


class TopicRelevanceAnalysis(dspy.Signature):
    """Screening notes for retrieved passages. The question will be answered from the passages that pass
    this screening and from nothing else, and a passage unrelated to it would mislead that answer. Your
    background on the topic is not evidence here: a passage passes only on what its own text says. Write
    one line per passage id with pass or drop and the reason."""

    topic: str = dspy.InputField(desc="what the question is about")
    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="per passage id: pass or drop, and why")


class RelevanceAnalysis(dspy.Signature):
    """Screening notes for retrieved passages. The question will be answered from the passages that pass
    this screening and from nothing else, and a passage unrelated to it would mislead that answer; dropping
    every passage is an acceptable outcome. Write one line per passage id with pass or drop and the reason."""

    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevance_analysis: str = dspy.OutputField(desc="per passage id: pass or drop, and why")


class SelectRelevantIds(dspy.Signature):
    """The context holds screening notes on the listed passages. Output the decision they reach, as data: the
    ids (as numbered in the knowledge list) of the passages that passed. Exactly those passages, and no
    others, will be given to the answering step."""

    context: str = dspy.InputField(desc="screening notes on these passages")
    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevant_ids: list[int] = dspy.OutputField(desc="ids of the passages that passed, e.g. [0, 3]; [] if none")


class SelectRelevantIdsDirect(dspy.Signature):
    """Screen retrieved passages: output the ids (as numbered in the knowledge list) of those whose own text
    bears on the question. Exactly those passages, and no others, will be used to answer it; an unrelated
    one would mislead the answer, and an empty list is an acceptable outcome."""

    question: str = dspy.InputField()
    knowledge: str = dspy.InputField(desc=KNOWLEDGE)
    relevant_ids: list[int] = dspy.OutputField(desc="ids of the passages that pass, e.g. [0, 3]; [] if none")


class ExtractShortAnswer(dspy.Signature):
    """State the conclusion the reasoning in the context reaches about the question, as a short phrase: a
    name, a date, a number or a few words, never a sentence."""

    context: str = dspy.InputField(desc="step-by-step reasoning about the question")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="one or a few words, not a sentence")


class ExtractYesNo(dspy.Signature):
    """State whether the reasoning in the context concludes yes or no about the question."""

    context: str = dspy.InputField(desc="step-by-step reasoning about the question")
    question: str = dspy.InputField()
    answer: Literal["yes", "no"] = dspy.OutputField()
