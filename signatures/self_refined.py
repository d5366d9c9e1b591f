"""Signatures of ActiveRAG's prompt-based baselines (Xu et al. 2024, arXiv 2402.13547, Table 8):
Chain-of-Note (Yu et al. 2023), Self-Rerank and Self-Refine (both "inspired by Self-RAG", no fine-tuning),
and Guideline. Instructions are our own words, written from what each call must produce and why (issue 22,
item 13); the mapping to what each paper call does is in the docstring of the program that uses it.

Shared with other methods, on purpose: Self-Rerank's and Self-Refine's answering call is Vanilla RAG's
(`ragzoo.signatures.common.AnswerWithContext`), Guideline's first call is the chain of thought of the CoT row
and of ActiveRAG's first step (`ragzoo.signatures.common.ReasonThenAnswer`), as Table 8 has it.
"""

from __future__ import annotations

import dspy

from ragzoo.engines import with_dry_run  # dspy.OutputField drops a user json_schema_extra

SHORT_ANSWER = "a short answer of a few words (a name, date, number or short phrase), not a sentence"
PASSAGES = "retrieved passages, each '[i] Title | text', numbered from 1"


class NotesThenAnswer(dspy.Signature):
    """Retrieved passages often miss the point of a question, so the answer may lean on them only where they
    really address it. `notes` settles that first: one entry per passage, in order, giving what the passage
    says that matters here and a verdict on whether it addresses the question. `answer` then comes from the
    passages your notes judged to address it; when the notes judged that none does, from general knowledge."""

    # Chain-of-Note's one call (Yu et al. 2023, as ActiveRAG runs it in Table 8).
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    notes: str = dspy.OutputField(desc="per passage, in order: what matters in it, and whether it addresses "
                                       "the question")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)


class TagPassages(dspy.Signature):
    """Only some of these passages will be shown when the question is answered; your judgements decide which.
    Judge each passage on two separate counts, since a passage can be on the question's subject yet lack
    what the answer needs, or the other way round: `relevant` lists the numbers of the passages about the
    question's subject, `useful` the numbers of those holding information the answer depends on. `reasons`
    backs both judgements, passage by passage."""

    # Self-Rerank's first call (ActiveRAG's Table 8): two binary tags per passage, with a reason.
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    reasons: str = dspy.OutputField(desc="'passage i: useful|useless, relevant|irrelevant, because ...' per passage")
    useful: list[int] = with_dry_run(dspy.OutputField(desc="numbers of the useful passages; [] if none"), [1])
    relevant: list[int] = with_dry_run(dspy.OutputField(desc="numbers of the relevant passages; [] if none"), [1])


class SummarizePassages(dspy.Signature):
    """The question will be answered from what you write here rather than from the passages, so `summary`
    has to carry every fact in them that the answer depends on, and leave out the rest: the facts that
    bear on the question, followed by a short analysis of what they imply for it."""

    # Self-Refine's first call (ActiveRAG's Table 8): extract, summarize and analyse the passages.
    passages: list[str] = dspy.InputField(desc=PASSAGES)
    question: str = dspy.InputField()
    summary: str = dspy.OutputField(desc="the facts the answer depends on, and what they imply")


class GuidingAnalysis(dspy.Signature):
    """Map out the route to the answer of the question without reaching it: `analysis` names the facts to
    recall and the order of the steps, as guidance a learner could follow, and stops before any conclusion;
    the answer itself is worked out later, from this guidance."""

    # Guideline's first prompt (ActiveRAG's Table 8): a guiding, step-by-step analysis without the result.
    question: str = dspy.InputField()
    analysis: str = dspy.OutputField(desc="a guiding analysis that stops short of the answer")


class MergeReasoning(dspy.Signature):
    """Produce one line of reasoning for the question that is sounder than either of the two given. The
    `analysis` lays out how to approach the question without concluding; `other_reasoning` is a separate
    attempt that does conclude, possibly wrongly. `reasoning` keeps the steps of either that hold up and
    repairs or drops the ones that do not; `answer` is what that reasoning concludes."""

    # Guideline's second prompt (ActiveRAG's Table 8): combine with the CoT reply, verify, answer.
    question: str = dspy.InputField()
    analysis: str = dspy.InputField(desc="the guiding analysis")
    other_reasoning: str = dspy.InputField(desc="another reasoning process and its answer; it may be wrong")
    reasoning: str = dspy.OutputField(desc="the combined, checked reasoning")
    answer: str = dspy.OutputField(desc=SHORT_ANSWER)
