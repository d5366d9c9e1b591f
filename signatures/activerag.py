"""Signatures of ActiveRAG (Xu et al. 2024, arXiv 2402.13547): the initial chain of thought, the four
knowledge-construction agents (Table 6) and their four cognitive-nexus prompts (Table 7).

Instructions are our own words, keeping what distinguishes each agent: what it looks for in the passages,
and how its nexus uses that knowledge to check and improve the model's first reasoning.

The initial chain of thought sees the question only. Each knowledge-construction agent sees the question and
the passages. Each nexus sees the question, the passages (the official code runs the nexus as the second
turn of the agent's chat, so the passages are in its context), the initial reasoning with its answer, and
the agent's constructed knowledge.
"""

from __future__ import annotations

import typing
from typing import Literal

import dspy

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
PASSAGES = "retrieved passages, each 'Title | text'"
INITIAL = ("the model's own earlier reasoning and answer, written from memory without the passages; "
           "it may be wrong")


class InitialChainOfThought(dspy.Signature):
    """Think through the question step by step from what you know, then answer it."""

    question: str = dspy.InputField()
    reasoning: str = dspy.OutputField(desc="step-by-step reasoning")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


# ------------------------------------------------------------------------------ knowledge construction


class AssociateKnowledge(dspy.Signature):
    """Acting as a cognitive scientist helping to answer the question, read the passages and pull out two
    kinds of knowledge: the basic facts a language model probably already knows about the question, and the
    more advanced details that go beyond them. Explain what each contributes, and consolidate them into an
    understanding of the question that is deeper and wider than before."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="foundational knowledge, advanced information, and the role of each")


class AnchoringKnowledge(dspy.Signature):
    """Acting as a cognitive scientist helping to answer the question, read the passages and pull out what a
    language model is likely NOT to know already: background, unfamiliar entities and concepts needed to
    understand the question. Explain the role of each piece."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="unfamiliar knowledge from the passages and the role it plays")


class LogicianKnowledge(dspy.Signature):
    """Acting as a logician helping to answer the question, read the passages and pull out the content that
    supports causal and logical inference toward the answer. Consolidate it and explain how it strengthens
    the reasoning chain."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="consolidated facts for reasoning and how they support the inference")


class CognitionKnowledge(dspy.Signature):
    """Acting as a fact-checking researcher who guards language models against confident but false answers,
    read the passages (treat them as authoritative and correct) and pull out what is likely to contradict or
    correct the model's existing beliefs about the question. Explain which mistakes this knowledge prevents."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="knowledge that contradicts or updates likely beliefs, and its role")


# ------------------------------------------------------------------------------------ cognitive nexus


class _NexusFields(dspy.Signature):
    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    initial_reasoning: str = dspy.InputField(desc=INITIAL)
    knowledge: str = dspy.InputField(desc="knowledge constructed from the passages")
    enhanced_reasoning: str = dspy.OutputField(
        desc="a check of the initial reasoning for errors, then the reasoning improved with the knowledge")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class AssociateNexus(_NexusFields):
    """A language model answered the question with the initial reasoning below. Knowledge was gathered from
    the passages: basic facts the model is familiar with and advanced information beyond them. Check the
    initial reasoning for mistakes, then rework it with this knowledge so it understands the question more
    fully and reaches past what the model knew. Answer from the improved reasoning."""


class AnchoringNexus(_NexusFields):
    """A language model answered the question with the initial reasoning below. Knowledge was gathered from
    the passages that the model is unlikely to have known: background, unfamiliar entities and concepts.
    Check the initial reasoning for mistakes, then rework it grounded in this knowledge. Answer from the
    improved reasoning."""


class LogicianNexus(_NexusFields):
    """A language model answered the question with the initial reasoning below. Knowledge that supports
    causal and logical inference was gathered from the passages. Check the initial reasoning for mistakes,
    then rebuild its chain of inference step by step with this knowledge. Answer from the improved
    reasoning."""


class CognitionNexus(_NexusFields):
    """A language model answered the question with the initial reasoning below. Knowledge that may contradict
    what the model believes was gathered from the passages, which are authoritative and taken as correct.
    Check the initial reasoning for factual mistakes, correct them with this knowledge, and rework the
    reasoning so it avoids confident errors. Answer from the improved reasoning."""


Agent = Literal["associate", "anchoring", "logician", "cognition"]
AGENTS: tuple[str, ...] = typing.get_args(Agent)
KNOWLEDGE_SIGNATURES = {"associate": AssociateKnowledge, "anchoring": AnchoringKnowledge,
                        "logician": LogicianKnowledge, "cognition": CognitionKnowledge}
NEXUS_SIGNATURES = {"associate": AssociateNexus, "anchoring": AnchoringNexus,
                    "logician": LogicianNexus, "cognition": CognitionNexus}


def initial_reply(reasoning: str, answer: str) -> str:
    """The initial chain of thought as the nexus sees it: the whole reply, reasoning and answer."""
    return f"Reasoning process: {reasoning}\nAnswer: {answer}"
