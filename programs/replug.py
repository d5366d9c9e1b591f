"""REPLUG-style ensembling through an API: one answer per passage, weighted by its retrieval score. RA-ISF's
"REPLUG" baseline, as far as an API allows.

Paper: Shi et al. 2023, "REPLUG: Retrieval-Augmented Black-Box Language Models", arXiv 2301.12652; a
retrieval baseline of RA-ISF (Liu et al. 2024, arXiv 2403.06840, Table 1, Llama-2-13B block).

REPLUG prepends each of the top-k passages SEPARATELY to the input and ensembles the k output distributions,
each weighted by λ(d, q) = softmax over the passages of the retrieval similarity s(d, q):
p(y | x) = Σ_d λ(d, x) · p(y | d ⊕ x)  (Eq. 1-2 of REPLUG).

What this program does (an API gives answers, not next-token distributions over a shared vocabulary):
- one call per passage answers from that passage alone (k calls, 1 retrieval);
- each answer is a vote weighted by λ(d, q) = softmax(s(d, q) / temperature) over the k retrieval scores
  (`Passage.score`); votes for the same normalized answer add up, the heaviest answer wins, ties go to the
  best-ranked passage. This is Eq. 1 with each passage's distribution collapsed to its greedy answer.
- Token-probability ensembling is NOT done: it needs log-probabilities of every candidate answer under every
  passage (k × candidates teacher-forced scorings), which chat APIs do not expose. Where an endpoint does,
  `ragzoo.programs.filco_oracle.CompletionLogprobScorer` is the building block.
- REPLUG LSR (the retriever fine-tuned on LM feedback) is not reproduced: the retriever is whatever spec is
  given. RA-ISF reports REPLUG with Llama-2-13B only, and describes it by that fine-tuning (§4.4), so this is
  a named difference (`PAPER_DIFFERENCES`: `ragzoo methods replug` and docs/paper_tables.md show it).

Choices where the papers are open:
- `temperature` (1.0) scales scores before the softmax; retrievers differ in score scale (BM25 vs dense),
  so it is a knob; `weighting="uniform"` gives every passage the same weight (plain majority).
- "unknown" answers (`ragzoo.metrics.rates.is_unknown`) do not vote; if every passage abstains, the answer is
  "unknown".
- `candidates` (the shared convention for methods with several answers): every passage's answer, in the
  passages' retrieval rank order, "unknown" where a passage abstained or its reply could not be read.
- Signature: `passage_answer` is `AnswerWithContext` (`signatures/common.py`, the shared answering prompt of
  `rag`) given ONE passage <- REPLUG's LM call on the passage prepended to the input, d ⊕ x.
- Unreadable replies (issue 14): a per-passage answer (`passage_answer`) whose reply cannot be read
  counts as "unknown" and casts no vote (`ragzoo.programs.base.degrade`, recorded as a degradation in the
  trace); if no passage's answer can be read, the answer is "unknown".
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import dspy

from ragzoo.knobs import Range
from ragzoo.metrics.answer import normalize_answer
from ragzoo.metrics.rates import is_unknown
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, degrade
from ragzoo.signatures.common import AnswerWithContext


def replug_weights(scores: list[float], temperature: float = 1.0, uniform: bool = False) -> list[float]:
    """λ(d, q): softmax of the retrieval scores (divided by `temperature`), or uniform weights."""
    if not scores:
        return []
    if uniform:
        return [1.0 / len(scores)] * len(scores)
    top = max(scores)
    exps = [math.exp((score - top) / temperature) for score in scores]
    total = sum(exps)
    return [value / total for value in exps]


def weighted_vote(answers: list[str], weights: list[float]) -> tuple[str, dict[str, float]]:
    """The answer with the largest summed weight (normalized answers), ties to the best rank; "unknown" if
    every answer abstains. Returns the winner's first surface form and the weight per normalized answer."""
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for rank, (answer, weight) in enumerate(zip(answers, weights)):
        if is_unknown(answer):
            continue
        key = normalize_answer(answer) or answer.strip().lower()
        totals[key] = totals.get(key, 0.0) + weight
        first.setdefault(key, rank)
    if not totals:
        return "unknown", {}
    best = max(totals.values())
    winner = min((key for key, total in totals.items() if math.isclose(total, best) or total == best),
                 key=first.__getitem__)
    return answers[first[winner]].strip(), totals


@register("replug", paper="REPLUG (Shi et al. 2023, arXiv 2301.12652), RA-ISF's baseline, answer-level ensemble",
          short="REPLUG (Shi et al. 2023)", calls="k",
          summary="one answer per retrieved passage, votes weighted by the softmax of retrieval scores")
class Replug(RagProgram):
    """REPLUG through an API: k single-passage answers, weighted by the softmax of their retrieval scores.

    Knobs:
        k: passages retrieved; one answering call each.
        temperature: softmax temperature over the retrieval scores (scores are divided by it).
        weighting: "softmax" (REPLUG's λ) or "uniform" (plain majority).
    """

    # What differs from REPLUG as the citing paper runs it, shown by `ragzoo methods replug` and in
    # docs/paper_tables.md. RA-ISF (§4.4) describes REPLUG by its retriever fine-tuning on LM feedback.
    PAPER_DIFFERENCES = (
        "RA-ISF describes REPLUG by its retriever fine-tuned on the LM's feedback (REPLUG LSR); that is not "
        "reproduced: the retriever is the one given (--retriever), unchanged",
        "the ensemble is answer-level: one answer per passage, weighted by the softmax of its retrieval score, "
        "instead of REPLUG's mix of next-token distributions (chat APIs do not return them)",
    )

    def __init__(self, retriever, k: TopK = 5, temperature: Annotated[float, Range(0.001)] = 1.0,
                 weighting: Literal["softmax", "uniform"] = "softmax"):
        super().__init__(retriever)
        self.k, self.temperature, self.weighting = k, temperature, weighting
        self.passage_answer = dspy.Predict(AnswerWithContext)

    # Stage diagnostics (ragzoo.diagnostics): one answer per passage, then the weighted vote (the passages the
    # winning answer rests on are what it "kept").
    STAGES = {"retrieval": (), "passage_answers": ("passage_answer",), "vote": ()}

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        answers = [degrade(lambda passage=passage: self.passage_answer(context=[passage.long_text],
                                                                       question=question).answer,
                           "unknown", "passage_answer", "counted as unknown: the passage casts no vote")
                   for passage in passages]
        weights = replug_weights([float(passage.score or 0.0) for passage in passages], self.temperature,
                                 uniform=self.weighting == "uniform")
        answer, totals = weighted_vote(answers, weights)
        key = normalize_answer(answer) or answer.lower()
        supporters = [p for p, a in zip(passages, answers) if (normalize_answer(a) or a.strip().lower()) == key]
        stages = {"retrieval": {"passages": passages}, "passage_answers": {"answers": answers},
                  "vote": {"passages": passages, "kept": supporters}}
        return dspy.Prediction(answer=answer, passages=supporters, votes=answers, candidates=answers,
                               weights=weights, stages=stages,
                               answer_weights=totals, retrieved=passages)
