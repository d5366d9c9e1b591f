"""The Post-Fusion family: Concatenation, Post-Fusion, Concat+PF (post-fusion as fallback), PF+Concat
(concatenation as distiller), and the Pruning and Summary prompts.

Paper: Liu, Yavuz, Meng, Bhat, Joty, Xiong, Zhou, "Modeling Uncertainty and Using Post-fusion as Fallback
Improves Retrieval Augmented Generation with LLMs", arXiv 2308.12574 (v2). Sec. 3.2.1 (Eq. 1-2), 3.2.2
(Figs. 8-9), 3.3 (Fig. 2); prompts in Figs. 7-9. Notes: `seeds/notes/postfusion.md`.

One class, one method id per strategy (the registry fixes `mode`); all retrieve top-k once with q:

| method id   | paper name                       | LM calls per question           | retrievals |
|-------------|----------------------------------|---------------------------------|------------|
| concat      | Concatenation (Eq. 1)            | 1                               | 1          |
| postfusion  | Post-Fusion (Eq. 2)              | k                               | 1          |
| concat_pf   | Concat+PF, PF as the fallback    | 1, or 1 + k if concat "unknown" | 1          |
|             | (the paper's recommendation)     | (expected 1 + k·P(unknown))     |            |
| pf_concat   | PF+Concat, concat as distiller   | k + 1 (k if every passage says  | 1          |
|             |                                  | unknown, or if unanimous and    |            |
|             |                                  | skip_distill_if_unanimous)      |            |
| pruning     | Pruning Prompt (Fig. 8)          | 1                               | 1          |
| summary     | Summary Prompt (Fig. 9)          | 1                               | 1          |

Predictor names (`lm.call_names`): concat -> `concat_answer`; postfusion -> `passage_answer` x k;
concat_pf -> `concat_answer` [+ `passage_answer` x k]; pf_concat -> `passage_answer` x k [+ `distill`];
pruning -> `pruning_answer`; summary -> `summary_answer`.

Choices where the paper is open:
- "unknown" detection and the vote live in `ragzoo.programs.voting` (SQuAD normalization; exact
  "unknown" or empty; "unknown" answers do not vote; ties go to the best retrieval rank; all unknown ->
  "unknown"). We do not use `dspy.majority`; `voting.py` says why. `lenient_unknown=True` also treats
  common refusal phrasings as unknown (off by default: the prompt asks for the literal word).
- Concatenation and post-fusion use the same signature (the paper uses one prompt, Fig. 7) but two
  predictors, `concat_answer` and `passage_answer`, so an optimizer can give the one-passage calls
  one-passage demos. Uncompiled they send the same instructions.
- Passage format: `[i] «Title | text»` per line in retrieval order (the Fig. 8/9 style); a post-fusion
  call sees exactly one passage, `[1] «...»`.
- The paper's context-free Q/A "format examples" (Fig. 7) and the one-shot Outerbridge demo (Figs. 8-9)
  are not shipped: demos are what compiling adds (e.g. a 1-demo LabeledFewShot reproduces the one-shot
  setting). Pruning/Summary use `dspy.Predict` with an explicit `rationale` output, not ChainOfThought's
  generic reasoning field, so the two prompts differ only in how the rationale is asked for (as in the paper).
- PF+Concat distiller (prompt not in the paper): sees the passages whose own answer was not unknown, in
  retrieval order, and the distinct candidate answers (deduplicated after normalization, first seen
  first). When every passage said unknown the answer is "unknown" and no distilling call is made (k
  calls). Skipping the distiller when all candidates agree saves a call but is not in the paper, so it is
  the knob `skip_distill_if_unanimous` (default False).
- `passages` in the prediction = the passages the final answer came from: all k for single-call methods
  and for concat_pf when concat answered; the passages that voted for the winner when the vote decided
  (none if every passage said unknown); the distiller's passages for pf_concat. `retrieved` always holds
  all k.
- Self-consistency (Sec. 4.4, sampling p outputs) is an LM sampling setting and is not implemented here;
  `majority_vote` is what it would aggregate with.
- A parse failure of any call raises (DSPy's AdapterParseError); the paper has no fallback for it.
"""

from __future__ import annotations

from typing import Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK
from ragzoo.programs.voting import UNKNOWN, distinct_candidates, is_unknown, majority_vote
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.postfusion import DistillAnswer, PassageQA, PruningQA, SummaryQA

PAPER = "Post-Fusion as Fallback (Liu et al. 2023, arXiv 2308.12574)"
SHORT = "Post-Fusion as Fallback (Liu et al. 2023)"
Mode = Literal["concat", "postfusion", "concat_pf", "pf_concat", "pruning", "summary"]


def numbered_passages(passages: list[Passage]) -> str:
    """`[1] «Title | text»` per line, in retrieval order."""
    if not passages:
        return "(none)"
    return "\n".join(f"[{i}] «{p.long_text}»" for i, p in enumerate(passages, start=1))


@register("summary", paper=PAPER, short=SHORT, calls="1", mode="summary",
          summary="one-shot-style CoT that summarizes the relevant sources, then answers")
@register("pruning", paper=PAPER, short=SHORT, calls="1", mode="pruning",
          summary="one-shot-style CoT that eliminates irrelevant sources, then answers")
@register("pf_concat", paper=PAPER, short=SHORT, calls="k + 1 (k if all unknown)", mode="pf_concat",
          summary="per-passage answers, drop 'unknown' passages, one distilling call over the rest + candidates")
@register("concat_pf", paper=PAPER, short=SHORT, calls="1 + k·P(unknown)", mode="concat_pf",
          summary="concatenation; only if it says 'unknown', post-fusion vote (the paper's recommendation)")
@register("postfusion", paper=PAPER, short=SHORT, calls="k", mode="postfusion",
          summary="one call per passage, majority vote without 'unknown', ties by retrieval rank")
@register("concat", paper=PAPER, short=SHORT, calls="1", mode="concat",
          summary="one call over the k concatenated passages; may answer 'unknown'")
class PostFusionFamily(RagProgram):
    """Post-Fusion family (arXiv 2308.12574): concat, postfusion, concat_pf, pf_concat, pruning, summary.

    Knobs:
        k: passages retrieved for the question (one post-fusion call each).
        mode: the strategy (fixed by the method id: concat, postfusion, concat_pf, pf_concat, pruning,
            summary).
        lenient_unknown: also count refusal phrasings ("not enough context", ...) as "unknown", not only
            the literal word.
        skip_distill_if_unanimous: pf_concat only: skip the distilling call when all candidate answers
            agree (ours, saves a call).
    """

    def __init__(
        self,
        retriever=None,
        k: TopK = 5,
        mode: Mode = "concat_pf",
        lenient_unknown: bool = False,
        skip_distill_if_unanimous: bool = False,
    ):
        super().__init__(retriever)
        if skip_distill_if_unanimous and mode != "pf_concat":
            raise ConfigError(f"PostFusionFamily knob skip_distill_if_unanimous applies to pf_concat only, "
                              f"not {mode!r}")
        self.k = k
        self.mode = mode
        self.lenient_unknown = lenient_unknown
        self.skip_distill_if_unanimous = skip_distill_if_unanimous

        # Only the call sites this strategy uses, so optimizers and saved state see exactly those.
        if mode in ("concat", "concat_pf"):
            self.concat_answer = dspy.Predict(PassageQA)
        if mode in ("postfusion", "concat_pf", "pf_concat"):
            self.passage_answer = dspy.Predict(PassageQA)
        if mode == "pf_concat":
            self.distill = dspy.Predict(DistillAnswer)
        if mode == "pruning":
            self.pruning_answer = dspy.Predict(PruningQA)
        if mode == "summary":
            self.summary_answer = dspy.Predict(SummaryQA)

    def forward(self, question: str) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        run = {
            "concat": self._concat,
            "postfusion": self._postfusion,
            "concat_pf": self._concat_pf,
            "pf_concat": self._pf_concat,
            "pruning": self._cot,
            "summary": self._cot,
        }[self.mode]
        fields = dict(concat_answer=None, votes=None, vote_counts=None, candidates=None, fallback=False,
                      distilled=False, rationale=None)
        fields.update(run(question, passages))
        return dspy.Prediction(retrieved=passages, unknown=is_unknown(fields["answer"], self.lenient_unknown),
                               **fields)

    # Strategies. Each returns the prediction fields it determines.

    def _concat(self, question: str, passages: list[Passage]) -> dict:
        """Eq. 1: one call over all k passages."""
        answer = self.concat_answer(context=numbered_passages(passages), question=question).answer
        return dict(answer=answer, passages=passages, concat_answer=answer)

    def _vote(self, question: str, passages: list[Passage]) -> dict:
        """Eq. 2: one call per passage, then the majority vote over the answer pool."""
        votes = [self.passage_answer(context=numbered_passages([p]), question=question).answer for p in passages]
        vote = majority_vote(votes, self.lenient_unknown)
        return dict(answer=vote.answer, passages=[passages[i] for i in vote.supporters(votes)], votes=votes,
                    vote_counts=vote.counts, candidates=distinct_candidates(votes, self.lenient_unknown))

    def _postfusion(self, question: str, passages: list[Passage]) -> dict:
        return self._vote(question, passages)

    def _concat_pf(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.3, Fig. 2 top: concatenation; post-fusion only when it answers unknown."""
        first = self._concat(question, passages)
        if not is_unknown(first["answer"], self.lenient_unknown):
            return first
        return dict(self._vote(question, passages), concat_answer=first["answer"], fallback=True)

    def _pf_concat(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.3, Fig. 2 bottom: per-passage answers, drop unknown passages, distill over the rest."""
        votes = [self.passage_answer(context=numbered_passages([p]), question=question).answer for p in passages]
        survivors = [p for p, a in zip(passages, votes) if not is_unknown(a, self.lenient_unknown)]
        candidates = distinct_candidates(votes, self.lenient_unknown)
        fields = dict(votes=votes, candidates=candidates, passages=survivors)
        if not survivors:
            return dict(fields, answer=UNKNOWN)
        if self.skip_distill_if_unanimous and len(candidates) == 1:
            return dict(fields, answer=candidates[0])
        answer = self.distill(context=numbered_passages(survivors), question=question,
                              candidate_answers=candidates).answer
        return dict(fields, answer=answer, distilled=True)

    def _cot(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.2.2: one chain-of-thought call over all k passages (pruning or summary rationale)."""
        predictor = self.pruning_answer if self.mode == "pruning" else self.summary_answer
        out = predictor(context=numbered_passages(passages), question=question)
        return dict(answer=out.answer, passages=passages, rationale=out.rationale)
