"""Signatures of FILCO (Wang et al. 2023, arXiv 2311.08377): the context filter M_ctx and the generator M_gen.

The paper fine-tunes both; here they are DSPy predictors that an optimizer compiles, with demos built from
the paper's oracle measures (`ragzoo.programs.filco_oracle`). Instructions are our own words.

- `FilterSentences` is the sentence-level filter (FILCO proper): it sees the question and ONE passage split
  into numbered sentences, and returns the indices of the helpful sentences. The paper's M_ctx generates
  the sentence text; returning indices keeps the filtered context verbatim (no paraphrase), and the silver
  labels of the paper (one best sentence per passage) map onto it one to one.
- `FilterPassage` is the passage-level filter (the paper's PSG / PSGS baseline): keep or drop the whole passage.
- `AnswerFromFilteredContext` is M_gen: the question and the filtered context only.
- `AnswerFromRetrievedContext` is M_gen of the FULL baseline (the paper's M_gen trained and tested on the
  unfiltered top-k passages, `P ⊕ q`): the same answer, but told the truth about its context, which is every
  retrieved passage as retrieved (no filter ran, so the instructions must not say one did).
"""

from __future__ import annotations

from typing import Sequence

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"


def format_sentences(sentences: Sequence[str]) -> str:
    """How a passage's sentences are shown to the filter: one per line, prefixed with its 0-based index.
    The program and the oracle labels (`ragzoo.programs.filco_oracle.oracle_labels`) both use this, so
    compiled demos and live calls look the same."""
    return "\n".join(f"[{index}] {sentence}" for index, sentence in enumerate(sentences))


class FilterSentences(dspy.Signature):
    """You are given a question and one retrieved passage split into numbered sentences. Pick the sentence
    that most directly helps answer the question (the one stating the answer, or the fact the answer
    follows from); pick more than one only when the answer needs them together. Return an empty list when
    no sentence of this passage helps."""

    question: str = dspy.InputField()
    title: str = dspy.InputField(desc="title of the passage the sentences come from")
    sentences: str = dspy.InputField(desc="the passage's sentences, one per line, as '[index] sentence'")
    selected: list[int] = with_dry_run(
        dspy.OutputField(desc="indices of the helpful sentences, best first; [] if none helps"), [0])


class FilterPassage(dspy.Signature):
    """You are given a question and one retrieved passage. Decide whether the passage contains information
    that helps answer the question."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField(desc="'Title | text'")
    keep: bool = dspy.OutputField(desc="true if the passage helps answer the question")


class AnswerFromFilteredContext(dspy.Signature):
    """Answer the question. The context holds the parts of the retrieved passages judged helpful for it; it
    may be empty, and then answer from what you know."""

    context: list[str] = dspy.InputField(desc="filtered passages, each 'Title | selected sentences' (may be empty)")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class AnswerFromRetrievedContext(dspy.Signature):
    """Answer the question. The context holds the retrieved passages in retrieval order, whole; some may not
    bear on the question."""

    context: list[str] = dspy.InputField(desc="retrieved passages, each 'Title | text'")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
