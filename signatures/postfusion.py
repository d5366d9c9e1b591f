"""Signatures of the Post-Fusion family (Liu et al., "Modeling Uncertainty and Using Post-fusion as Fallback
Improves Retrieval Augmented Generation with LLMs", arXiv 2308.12574).

One answering signature serves Concatenation (all k passages as context) and Post-Fusion (one passage as
context), as the paper uses one prompt (Fig. 7) for both. Pruning and Summary are one-call chains of thought
(Figs. 8-9) with an explicit `rationale` output; the distiller of PF+Concat (prompt not given in the paper)
sees the surviving passages and the candidate answers. Instructions are our own words. Every answer may be
the literal word "unknown", the uncertainty signal the multi-round methods act on.
"""

from __future__ import annotations

import dspy

CONTEXT = "background passages, '[i] «Title | text»' per line"
ANSWER = "a short factoid phrase taken from the context (often 1-5 words), or exactly 'unknown'"


class PassageQA(dspy.Signature):
    """Answer the question from the background context with a short factoid phrase drawn from the context.
    Make your best guess at an extractive answer. If the context does not let you answer, reply with exactly
    the word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=ANSWER)


class PruningQA(dspy.Signature):
    """Answer the question with a short factoid answer. First reason step by step by elimination: go through
    the sources one at a time, rule out the ones that do not bear on the question, and deduce the answer
    from what is left. If the context does not let you answer, reply with exactly the word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    rationale: str = dspy.OutputField(desc="step-by-step elimination of irrelevant sources leading to the answer")
    answer: str = dspy.OutputField(desc=ANSWER)


class SummaryQA(dspy.Signature):
    """Answer the question with a short factoid answer. First reason step by step by summarizing: find the
    sources that bear on the question, summarize what they say about it, and derive the answer from that
    summary. If the context does not let you answer, reply with exactly the word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    rationale: str = dspy.OutputField(desc="step-by-step summary of the relevant sources leading to the answer")
    answer: str = dspy.OutputField(desc=ANSWER)


class DistillAnswer(dspy.Signature):
    """Each candidate answer was proposed by reading one of the background passages on its own. Using the
    passages together, pick the single best candidate, or give a short factoid phrase from the context if
    none fits. If the context does not let you answer, reply with exactly the word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    candidate_answers: list[str] = dspy.InputField(desc="answers proposed from individual passages, best-ranked first")
    answer: str = dspy.OutputField(desc=ANSWER)
