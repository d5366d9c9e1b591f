"""Typed signatures of RA-ISF (Liu et al., 2024, arXiv:2403.06840): the three gates the paper trains as
small models (self-knowledge, passage relevance, question decomposition) and the three answering calls of
the main LM (direct, from relevant passages, from sub-question answers). Instructions are our own words.

`dry_run` hints steer the dry-run LM (type-valid placeholders, no model) along the paper's central path:
the model does not know the answer (`can_answer=False`), so it retrieves, and the passages are judged
relevant (`relevant=True`), so it answers from them: 1 + k + 1 calls, 1 retrieval.
"""

from __future__ import annotations

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra


SHORT_ANSWER = ("a short answer: an entity, a date, a number, a short phrase, or yes/no; "
                "'unknown' only if it cannot be answered")


class SelfKnowledge(dspy.Signature):
    """Routing gate, run before any retrieval. Predict whether the answer you would give to this question
    with no documents at hand is correct. True sends the question straight to a closed-book answer; False
    sends it to retrieval, and from there possibly to sub-questions. A wrong True costs a wrong final answer
    and a wrong False only some extra calls, so reserve True for facts you would state with certainty."""

    question: str = dspy.InputField()
    can_answer: bool = with_dry_run(
        dspy.OutputField(desc="your closed-book answer would be correct: True, else False"), False)


class DirectAnswer(dspy.Signature):
    """Answer the question from your own knowledge."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class PassageRelevance(dspy.Signature):
    """Does this single passage state something that helps settle the question? Judge the passage alone."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField(desc="one retrieved passage, 'Title | text'")
    relevant: bool = with_dry_run(dspy.OutputField(desc="True if the passage helps answer the question"), True)


class PassagesRelevanceJoint(dspy.Signature):
    """Select the passages the answer will be written from. Only the passages you select are shown to the
    answering step, and selecting none sends the question on to be split into sub-questions instead. So
    return an empty list when the passages, read together, still lack something the answer needs (even if
    some are on the question's topic); otherwise list every passage that contributes to the answer."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="retrieved passages, numbered from 1")
    relevant_ids: list[int] = with_dry_run(
        dspy.OutputField(desc="numbers (from 1) of the selected passages; [] to split the question instead"), [1])


class RelevantPassagesAnswer(dspy.Signature):
    """The passages were judged to bear on the question. Base the answer on what they state."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="the passages the relevance gate kept")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class Decompose(dspy.Signature):
    """This question was not settled in one step, so it will be answered through simpler questions. Each
    question you write is solved separately by the same procedure, without seeing this question or the
    other questions' answers, and then all their answers are combined into this question's answer. Write
    as few as that combination needs, each naming its entities in full."""

    question: str = dspy.InputField()
    sub_questions: list[str] = with_dry_run(
        dspy.OutputField(desc="simpler questions, each understandable on its own"),
        ["dry-run sub-question 1", "dry-run sub-question 2"])


class SynthesizeAnswer(dspy.Signature):
    """Answer the original question from the answers to its sub-questions. A sub-answer may be
    'unknown'; then rely on the others and on your own knowledge."""

    question: str = dspy.InputField()
    sub_answers: list[str] = dspy.InputField(desc="one 'sub-question -> answer' pair per item")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
