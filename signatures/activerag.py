"""Signatures of ActiveRAG (Xu et al. 2024, arXiv 2402.13547): the initial chain of thought, the four
knowledge-construction agents (Table 6), their four cognitive-nexus calls (Table 7), and the two Table 3
ablations whose nexus is fed the raw passages or reading notes instead of constructed knowledge.

Instructions are written from what each call must produce, not from the paper's wording: each agent is
defined by WHAT it extracts (knowledge the model likely has plus what extends it; knowledge the model likely
lacks; facts that support inference; facts that contradict likely beliefs), and each nexus by what its two
outputs must hold (a better version of the first reasoning; the answer it concludes), then by what its
agent's knowledge is and how to use it. Citations stay in comments: instructions are what the LM is sent.
The initial chain of thought is `ragzoo.signatures.common.ReasonThenAnswer`, the one CoT prompt Table 8
shares between the CoT row, ActiveRAG's first step and Guideline.

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

from ragzoo.signatures.common import ReasonThenAnswer

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
PASSAGES = "retrieved passages, each 'Title | text'"
INITIAL = ("the model's own earlier reasoning and answer, written from memory without the passages; "
           "it may be wrong")


# The initial chain of thought is the one CoT prompt of Table 8, shared with the CoT row and Guideline.
InitialChainOfThought = ReasonThenAnswer


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
    """`knowledge` is a list of corrections that a language model answering this question may need. Each
    correction pairs a belief about the question that such a model could plausibly hold and get wrong (a
    misconception, a fact that has since changed, one entity mistaken for a similarly named one) with what
    the passages state instead, and names the wrong answer it rules out. Where the passages and common
    belief disagree, the passages are authoritative."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(
        desc="knowledge that contradicts or updates likely beliefs, and what it rules out")


class ReadingNotes(dspy.Signature):
    """`knowledge` holds short reading notes on the passages, one per passage in order: its main point,
    and whether that point bears on what is asked."""

    # Table 3's "CoT w. Note" ablation: these notes reach the nexus in place of constructed knowledge.

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    knowledge: str = dspy.OutputField(desc="one note per passage: key point and relevance to the question")


# ------------------------------------------------------------------------------------ cognitive nexus


class _NexusFields(dspy.Signature):
    question: str = dspy.InputField()
    initial_reasoning: str = dspy.InputField(desc=INITIAL)
    knowledge: str = dspy.InputField(desc="knowledge constructed from the retrieved passages")
    enhanced_reasoning: str = dspy.OutputField(
        desc="the initial reasoning, corrected where the knowledge refutes it and extended where it adds")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


# Each nexus says what its two outputs must hold, then what this agent's knowledge is and how it is to be
# used; the paper's nexus prompts (Table 7) run the other way (the earlier answer, the goal, the knowledge,
# then a verify-enhance-answer request).


class AssociateNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge pairs facts the model already knew with details that go beyond them: use
    those details to take the reasoning further than the first attempt went."""


class AnchoringNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge supplies background, entities and terms the model probably did not know:
    ground every step that depended on them in what the knowledge says."""


class LogicianNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge lists premises the answer can be inferred from: make the better version an
    explicit chain of inference from them, one step at a time."""


class CognitionNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge, which is authoritative, names mistaken beliefs and corrects them: no claim
    it refutes may survive into the better version."""


class PassagesNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge is the retrieved passages themselves, unprocessed."""

    # Table 3's "CoT w. Passage": raw passages instead of constructed knowledge (prompt not given).


class NotesNexus(_NexusFields):
    """`enhanced_reasoning` is a better version of `initial_reasoning`, a model's first attempt at the
    question from memory: the steps the knowledge confirms stay, the ones it refutes are replaced, and
    gaps are filled. `answer` is what the better version concludes, whether or not it matches the first
    answer. Here the knowledge is a set of reading notes on the retrieved passages."""

    # Table 3's "CoT w. Note": reading notes instead of constructed knowledge (prompt not given).


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
