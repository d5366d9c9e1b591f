"""Signatures of the Post-Fusion family (Liu et al., "Modeling Uncertainty and Using Post-fusion as Fallback
Improves Retrieval Augmented Generation with LLMs", arXiv 2308.12574).

One answering signature serves Concatenation (all k passages as context) and Post-Fusion (one passage as
context), as the paper uses one prompt (Fig. 7) for both. Pruning and Summary are one-call chains of thought
(Figs. 8-9) with an explicit `rationale` output; the distiller of PF+Concat (prompt not given in the paper)
sees the surviving passages and the candidate answers. Instructions are our own words. Every answer may be
the literal word "unknown", the uncertainty signal the multi-round methods act on.

What each instruction says beside what the paper's call does: the docstring of `programs/postfusion.py`.
"""

from __future__ import annotations

import dspy

CONTEXT = "background passages, '[i] «Title | text»' per line"
ANSWER = ("the answer as a few words copied from the passages (a name, date, number or short phrase), "
          "or the single word 'unknown'")


class PassageQA(dspy.Signature):
    """Your reply is read by a program, not a person: it either keeps your answer as final, counts it as one
    vote among answers drawn from other passages, or, when you reply unknown, treats that as an abstention
    and tries another way. So the reply must be one of two things. If anything in the context bears on the
    question, the answer itself, copied as written there: a name, date, number or short phrase, with no
    sentence around it; weak support still earns an answer. If nothing in the context bears on the question,
    the single word unknown, so the abstention is recognised."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc=ANSWER)


class PruningQA(dspy.Signature):
    """Find the answer by elimination: take the numbered passages in turn, rule out each one that does not
    bear on the question and say why, and derive a short answer from the passage(s) left standing. Only
    when every passage is ruled out, answer with the single word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    rationale: str = dspy.OutputField(desc="passage-by-passage elimination that ends at the answer")
    answer: str = dspy.OutputField(desc=ANSWER)


class SummaryQA(dspy.Signature):
    """Find the answer by summarizing: pick out the numbered passages that bear on the question, condense
    what they say about it in a few sentences, and derive a short answer from that summary. Only when no
    passage bears on the question, answer with the single word unknown."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    rationale: str = dspy.OutputField(desc="a summary of the passages that bear on the question, ending at the answer")
    answer: str = dspy.OutputField(desc=ANSWER)


class DistillAnswer(dspy.Signature):
    """Each candidate answer came from reading one of these passages alone; now the passages are read
    together to settle on one answer. Reply with the candidate the passages support best, copied as
    written. If, read together, they point to an answer no candidate states, reply with that answer in a
    few words taken from them. Reply with the single word unknown only when they do not answer the
    question."""

    context: str = dspy.InputField(desc=CONTEXT)
    question: str = dspy.InputField()
    candidate_answers: list[str] = dspy.InputField(desc="answers proposed from individual passages, best-ranked first")
    answer: str = dspy.OutputField(desc=ANSWER)


# One-shot demos of our own (not the paper's Outerbridge example): three sources, one of which answers.
_DEMO_CONTEXT = "\n".join([
    "[1] «Lake Baikal | Lake Baikal is a rift lake in Siberia and the deepest lake in the world.»",
    "[2] «Trans-Siberian Railway | The Trans-Siberian Railway connects Moscow with Vladivostok; its main "
    "line was completed in 1916.»",
    "[3] «Circum-Baikal Railway | The Circum-Baikal Railway runs along the southern shore of Lake Baikal. "
    "It was opened in 1904 as part of the Trans-Siberian route.»",
])
_DEMO_QUESTION = "In what year did the railway along the southern shore of Lake Baikal open?"
PRUNING_DEMO = dspy.Example(
    context=_DEMO_CONTEXT, question=_DEMO_QUESTION,
    rationale="Passage 1 describes the lake itself and says nothing about a railway, so it is ruled out. "
              "Passage 2 is about the whole Trans-Siberian line and gives 1916 for its main line, not for the "
              "section along the lake, so it is ruled out. Passage 3 is about the railway on the southern "
              "shore and says it opened in 1904.",
    answer="1904")
SUMMARY_DEMO = dspy.Example(
    context=_DEMO_CONTEXT, question=_DEMO_QUESTION,
    rationale="Passages 2 and 3 concern railways near the lake. Together they say: the Trans-Siberian main "
              "line was finished in 1916, and its Circum-Baikal section, which follows the southern shore of "
              "Lake Baikal, opened in 1904. The railway along the southern shore therefore opened in 1904.",
    answer="1904")
