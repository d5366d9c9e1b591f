"""Signatures of ActiveRAG (Xu et al. 2024, arXiv 2402.13547): the initial chain of thought, the four
knowledge-construction agents (Table 6), their four cognitive-nexus calls (Table 7), and the two Table 3
ablations whose nexus is fed the raw passages or reading notes instead of constructed knowledge.

Instructions are written from what each call must produce, not from the paper's wording: each agent is
defined by WHAT it extracts (knowledge the model likely has plus what extends it; knowledge the model likely
lacks; facts that support inference; facts that contradict likely beliefs), and each nexus by how it checks
and repairs the first reasoning with that extract.

What each call sees: the initial chain of thought, the question only; a knowledge-construction agent, the
question and the passages; a nexus, the question, the whole initial reply (reasoning and answer) and the
agent's extract, exactly the three inputs the paper's nexus prompts list (Table 7). The official code runs
the nexus as the second turn of the agent's chat, so the passages are in its context there: the
`*_WITH_PASSAGES` variants (knob `nexus_passages=True` of the program) add them.
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
    """From the passages, extract what bears on the question at two levels: the well-known facts a language
    model most likely has already, and the less common details that extend them. Say what each level adds,
    then combine both into one account of the question that is broader and deeper than the well-known facts
    alone."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="well-known facts, extending details, and what each adds")


class AnchoringKnowledge(dspy.Signature):
    """From the passages, extract what a language model most likely does NOT already know but needs for this
    question: background, little-known entities, unfamiliar terms or concepts. For each, say how it helps
    to understand or answer the question."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="unfamiliar knowledge from the passages and how each piece helps")


class LogicianKnowledge(dspy.Signature):
    """From the passages, extract the facts from which the answer can be inferred: causes, relations,
    dates, quantities, the links between entities. Merge them into a compact set of premises and show how
    they lead, step by step, toward the answer."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="merged premises and how they support the inference")


class CognitionKnowledge(dspy.Signature):
    """Take the passages as correct. Extract from them whatever is likely to contradict or correct what a
    language model would believe about this question: common misconceptions, outdated facts, easily
    confused entities. For each, say which wrong answer it rules out."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(
        desc="knowledge that contradicts or updates likely beliefs, and what it rules out")


class ReadingNotes(dspy.Signature):
    """Write short reading notes on the passages for this question: the key point of each passage and
    whether it is relevant to the question (Table 3's "w. Note" ablation feeds these notes to the nexus)."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="one note per passage: key point and relevance to the question")


# ------------------------------------------------------------------------------------ cognitive nexus


class _NexusFields(dspy.Signature):
    question: str = dspy.InputField()
    initial_reasoning: str = dspy.InputField(desc=INITIAL)
    knowledge: str = dspy.InputField(desc="knowledge constructed from the retrieved passages")
    enhanced_reasoning: str = dspy.OutputField(
        desc="a check of the initial reasoning for errors, then the reasoning improved with the knowledge")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class AssociateNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. The knowledge pairs facts the
    model already knew with details that extend them. Find where the attempt goes wrong or stops short,
    rebuild the reasoning so it uses the extending details, and answer from the rebuilt reasoning."""


class AnchoringNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. The knowledge supplies background
    and entities the model probably did not know. Find where the attempt goes wrong or lacks that
    background, rebuild the reasoning on top of it, and answer from the rebuilt reasoning."""


class LogicianNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. The knowledge lists premises the
    answer can be inferred from. Find the faulty or missing steps of the attempt, rebuild the chain of
    inference from those premises one step at a time, and answer from the rebuilt chain."""


class CognitionNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. The knowledge, taken as correct,
    names beliefs it contradicts. Find the claims of the attempt that the knowledge refutes, replace them,
    rebuild the reasoning without them, and answer from the rebuilt reasoning."""


class PassagesNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. Check it against the retrieved
    passages given as knowledge, fix what they contradict or fill in what they add, and answer from the
    checked reasoning. (Table 3's "CoT w. Passage": raw passages instead of constructed knowledge.)"""


class NotesNexus(_NexusFields):
    """The initial reasoning is a model's first attempt at the question. Check it against the reading notes
    on the retrieved passages given as knowledge, fix what they contradict or fill in what they add, and
    answer from the checked reasoning. (Table 3's "CoT w. Note".)"""


def _with_passages(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """`signature` with the retrieved passages as a second input (the official code's chat context)."""
    extended = signature.insert(1, "passages", dspy.InputField(desc=PASSAGES), type_=list[str])
    extended.__name__ = extended.__qualname__ = f"{signature.__name__}WithPassages"
    return extended


Agent = Literal["associate", "anchoring", "logician", "cognition"]
AGENTS: tuple[str, ...] = typing.get_args(Agent)
KNOWLEDGE_SIGNATURES = {"associate": AssociateKnowledge, "anchoring": AnchoringKnowledge,
                        "logician": LogicianKnowledge, "cognition": CognitionKnowledge}
NEXUS_SIGNATURES = {"associate": AssociateNexus, "anchoring": AnchoringNexus,
                    "logician": LogicianNexus, "cognition": CognitionNexus}
NEXUS_SIGNATURES.update(passages=PassagesNexus, notes=NotesNexus)  # Table 3's ablations
NEXUS_WITH_PASSAGES = {agent: _with_passages(signature) for agent, signature in NEXUS_SIGNATURES.items()}


def initial_reply(reasoning: str, answer: str) -> str:
    """The initial chain of thought as the nexus sees it: the whole reply, reasoning and answer."""
    return f"Reasoning process: {reasoning}\nAnswer: {answer}"
