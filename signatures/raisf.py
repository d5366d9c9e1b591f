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
    """Decide whether you can answer the question correctly from what you already know, without looking
    anything up. Say yes only if you are confident; say no if external documents are needed."""

    question: str = dspy.InputField()
    can_answer: bool = with_dry_run(dspy.OutputField(desc="True if you can answer from your own knowledge"), False)


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
    """Decide, for the numbered passages as a set, whether they can settle the question. If they can, give
    the numbers of the passages that are needed for it; if even all of them together leave the question
    open, give an empty list."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="retrieved passages, numbered from 1")
    relevant_ids: list[int] = with_dry_run(
        dspy.OutputField(desc="1-based numbers of the relevant passages; [] if none suffices"), [1])


class RelevantPassagesAnswer(dspy.Signature):
    """The passages were judged to bear on the question. Base the answer on what they state."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="passages judged relevant to the question")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class Decompose(dspy.Signature):
    """Break the question into a few simpler sub-questions that can each be answered on its own and whose
    answers together answer the original question."""

    question: str = dspy.InputField()
    sub_questions: list[str] = with_dry_run(
        dspy.OutputField(desc="self-contained sub-questions, simplest first"),
        ["dry-run sub-question 1", "dry-run sub-question 2"])


class SynthesizeAnswer(dspy.Signature):
    """Answer the original question from the answers to its sub-questions. A sub-answer may be
    'unknown'; then rely on the others and on your own knowledge."""

    question: str = dspy.InputField()
    sub_answers: list[str] = dspy.InputField(desc="one 'sub-question -> answer' pair per item")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
