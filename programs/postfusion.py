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
- Pruning and Summary are one-shot prompts in the paper (§3.2.2, Figs. 8-9): what defines each is its
  worked demo (elimination vs summary). Each ships with ONE demo of our own (`PRUNING_DEMO` /
  `SUMMARY_DEMO` in `signatures/postfusion.py`: three sources about Lake Baikal railways, one answering;
  not the paper's Outerbridge example), set on the predictor at construction, so an uncompiled program is
  one-shot as in the paper; compiling replaces it with the optimizer's demos. `one_shot=False` is the
  zero-shot ablation. The context-free Q/A "format examples" of Fig. 7 are not shipped (they show format
  only; the typed output fields do that). Pruning/Summary use `dspy.Predict` with an explicit `rationale`
  output, not ChainOfThought's generic reasoning field.
- PF+Concat distiller (prompt not in the paper): sees the passages whose own answer was not unknown, in
  retrieval order, and the distinct candidate answers (deduplicated after normalization, first seen
  first). When every passage said unknown the answer is "unknown" and no distilling call is made (k
  calls). Skipping the distiller when all candidates agree saves a call but is not in the paper, so it is
  the knob `skip_distill_if_unanimous` (default False).
- `passages` in the prediction = the passages the final answer came from: all k for single-call methods
  and for concat_pf when concat answered; the passages that voted for the winner when the vote decided
  (none if every passage said unknown); the distiller's passages for pf_concat. `retrieved` always holds
  all k.
- Self-consistency (§4.4, Fig. 5's three curves: Concatenation, PF+Concat, Concat+PF) is the knob `samples`
  (p): each answering call is made p times at temperature 0.7 (the paper's setting), each with its own
  `rollout_id` so the samples are distinct requests (and distinct cache entries), and the p answers are
  reduced by `majority_vote` (unknowns do not vote, ties to the first sample; so a call is "unknown" only
  when all its samples abstain). Concatenation: p calls -> one answer; Post-Fusion: p per passage, and the
  p·k outputs pooled into one vote (§4.4's "p×k outputs"; ties to the best rank, then the earliest sample);
  Concat+PF falls back when abstentions outnumber the concatenation samples' most frequent known answer
  ("unknown" counted here, notes §1.8; a tie keeps the answer); PF+Concat: p per passage (a passage survives when its majority is known), the distiller sees
  every distinct known answer of all p·k samples (passage rank, then sample order: sampling widens the
  pool it distils) and is itself sampled p times, its majority the answer (p·k + p calls). The paper does
  not say how the multi-round methods use samples; these are our readings. p = 1 (default) is one greedy
  call, as in the main tables. Calls per question are multiplied by p (an API that returns n completions
  per request could serve one call; DSPy's n is not used because not every LM behind ragzoo supports it).
- `candidates` (the convention every method that produces several answers follows): every distinct known
  answer the answering calls produced before the final choice, deduplicated after normalization, "unknown"
  left out, in call order: the concatenation's samples first (concat, concat_pf), then per passage in
  retrieval rank its samples in order (postfusion, the concat_pf fallback, pf_concat: the pool the
  distiller chose from). The distiller's own answer and the Pruning/Summary answer are the final choice;
  for single-answer calls `candidates` is `[answer]` (or `[]` when it is unknown).
- "With gold passage" (Table 1, knob `gold_passage`): the paper says the gold passage is "randomly inserted"
  into the top-5 when they lack the answer; whether it replaces one or is added is open: it REPLACES the
  passage at a random position (seeded by the question), keeping k. Whether the top-k "contain the answer"
  is a normalized whole-token string inclusion of a gold answer (FILCO's STRINC); without `answers` the gold
  passage is always inserted. The gold passage and answers are per-question inputs of `forward`, which an
  evaluation passes from the dataset (`oracle_inputs`). Datasets that ship gold passages: HotPotQA's
  distractor setting (`hotpotqa/dev_distractor`: its two supporting paragraphs, both inserted, each only if
  not already retrieved, at distinct random positions) and SQuAD's paragraphs (`squad_open/dev_paragraphs`,
  through the hub); the paper's NQ/TQA gold passages (DPR's positive contexts) are not shipped, so
  `ragzoo reproduce postfusion-table1` stands HotPotQA in for them. `gold_inserted` lists the positions
  replaced ([] when the top-k held the answer).
- Instructions (issue 22) are our own words; the paper's prompt text is not kept in the repository. What
  each says, beside what the paper's call does:
  - `PassageQA` <- Fig. 7 (Concatenation and Post-Fusion): a task line (answer from the contexts with a short
    factoid phrase), three context-free question/answer format examples, a line asking for a best-guess
    extractive answer and for the word unknown when the answer is not known. Ours starts from why the reply's
    form matters (a program keeps it, counts it as a vote, or treats unknown as an abstention that triggers a
    fallback) and then states the two allowed replies and when each applies; the format examples are not
    shipped (the typed output field and its description carry the format).
  - `PruningQA` / `SummaryQA` <- Figs. 8-9: a one-shot chain of thought whose worked demo eliminates sources
    one by one (Pruning) or summarises the relevant ones (Summary) before the answer. Ours describes the
    procedure as steps; the demo is ours (`PRUNING_DEMO`, `SUMMARY_DEMO`).
  - `DistillAnswer` <- no prompt in the paper (§3.3 describes the input: the passages that did not answer
    unknown, and the candidate answers); the instruction is ours.
- Unreadable replies (issue 14; `ragzoo.programs.base.degrade`, each recorded as a degradation in the
  trace): a per-passage answer (`passage_answer`) that cannot be read counts as "unknown" and casts no
  vote; in concat_pf an unreadable `concat_answer` is treated as "unknown", i.e. the post-fusion vote
  runs; in pf_concat an unreadable `distill` gives the majority vote of the candidates (with samples, an
  unreadable distilling sample casts no vote, and only when all are unreadable does the candidates' vote decide). The single answer
  call of concat, pruning and summary has no fallback: its unreadable reply fails the question. Any
  other parse failure raises (DSPy's AdapterParseError).
"""

from __future__ import annotations

from typing import Annotated, Literal

import dspy

from ragzoo.errors import ConfigError
from ragzoo.knobs import Range
from ragzoo.programs import register
from ragzoo.programs.base import RagProgram, TopK, degrade
from ragzoo.programs.voting import UNKNOWN, distinct_candidates, is_unknown, majority_vote
from ragzoo.retrieval.base import Passage
from ragzoo.signatures.postfusion import (PRUNING_DEMO, SUMMARY_DEMO, DistillAnswer, PassageQA, PruningQA,
                                          SummaryQA)

PAPER = "Post-Fusion as Fallback (Liu et al. 2023, arXiv 2308.12574)"
SHORT = "Post-Fusion as Fallback (Liu et al. 2023)"
NO_VOTE = "counted as unknown: the passage casts no vote"
SAMPLING_TEMPERATURE = 0.7  # §4.4's self-consistency setting
Mode = Literal["concat", "postfusion", "concat_pf", "pf_concat", "pruning", "summary"]


def _gold_passage(gold, rank: int) -> Passage:
    if isinstance(gold, Passage):
        return gold
    default_id = "gold" if rank == 0 else f"gold-{rank + 1}"
    if isinstance(gold, dict):
        return Passage(pid=str(gold.get("pid") or gold.get("id") or default_id), title=gold.get("title", ""),
                       text=gold.get("text", ""))
    title, _, text = str(gold).partition(" | ")
    return Passage(pid=default_id, title=title if text else "", text=text or title)


def _already_retrieved(gold: Passage, retrieved: Passage) -> bool:
    """Whether a retrieved passage already holds the gold paragraph's text. A shared title is not enough: a SQuAD
    article has many paragraphs and the 21M corpus cuts an article into many chunks, so a retrieved passage of the
    right article may lack the paragraph (and the answer) the setting exists to add. The title decides only for a
    gold passage given with no text."""
    if not gold.text.strip():
        return bool(gold.title) and gold.title.casefold() == retrieved.title.casefold()
    return " ".join(gold.text.casefold().split()) in " ".join(retrieved.text.casefold().split())


def insert_gold(question: str, passages: list[Passage], gold, answers) -> tuple[list[Passage], list[int]]:
    """Table 1's setting: if no passage contains a gold answer, the gold passage(s) not already retrieved replace
    passages at random positions (seeded by the question, so a run is repeatable); returns the passages and
    those positions. A gold passage is already retrieved when a retrieved passage holds its text, not merely its
    title. `gold` is one passage (a {"title", "text"} dict, a "Title | text" string or a `Passage`)
    or a list of them (HotPotQA's two supporting paragraphs); at most k are inserted."""
    import random

    from ragzoo.programs.filco_oracle import string_inclusion

    if gold is None or (isinstance(gold, (list, tuple)) and not gold):
        raise ConfigError("post-fusion knob gold_passage=true needs the gold passage: call "
                          "program(question=..., gold_passage=..., answers=[...]), or evaluate on a split that "
                          "ships gold passages (hotpotqa dev_distractor, squad_open dev_paragraphs)")
    golds = [_gold_passage(g, rank) for rank, g in enumerate(gold if isinstance(gold, (list, tuple)) else [gold])]
    if answers and any(string_inclusion(p.long_text, answers) for p in passages):
        return passages, []
    missing = [g for g in golds if not any(_already_retrieved(g, p) for p in passages)]
    if not passages:
        return missing, list(range(len(missing)))
    positions = random.Random(question).sample(range(len(passages)), min(len(missing), len(passages)))
    passages = list(passages)
    for position, passage in zip(positions, missing):
        passages[position] = passage
    return passages, sorted(positions)


def numbered_passages(passages: list[Passage]) -> str:
    """`[1] «Title | text»` per line, in retrieval order."""
    if not passages:
        return "(none)"
    return "\n".join(f"[{i}] «{p.long_text}»" for i, p in enumerate(passages, start=1))


@register("summary", paper=PAPER, short=SHORT, calls="1", mode="summary",
          summary="one-shot CoT that summarizes the relevant sources, then answers")
@register("pruning", paper=PAPER, short=SHORT, calls="1", mode="pruning",
          summary="one-shot CoT that eliminates irrelevant sources, then answers")
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
        one_shot: pruning/summary only: start from our one worked demo (the paper's prompts are one-shot);
            false = zero-shot. Compiling replaces it.
        samples: self-consistency (§4.4): p sampled answers (temperature 0.7) per answering call, majority
            vote over them; 1 = one greedy call; up to 50, Fig. 5's largest p.
        gold_passage: Table 1's "with gold passage" setting: when no retrieved passage holds a gold answer,
            the gold passage (forward(question, gold_passage=..., answers=...)) replaces one at a random
            position.
    """

    def __init__(
        self,
        retriever=None,
        k: TopK = 5,
        mode: Mode = "concat_pf",
        lenient_unknown: bool = False,
        skip_distill_if_unanimous: bool = False,
        one_shot: bool = True,
        samples: Annotated[int, Range(1, 50)] = 1,
        gold_passage: bool = False,
    ):
        super().__init__(retriever)
        if skip_distill_if_unanimous and mode != "pf_concat":
            raise ConfigError(f"PostFusionFamily knob skip_distill_if_unanimous applies to pf_concat only, "
                              f"not {mode!r}")
        if not one_shot and mode not in ("pruning", "summary"):
            raise ConfigError(f"PostFusionFamily knob one_shot applies to pruning and summary only, not {mode!r}")
        if samples > 1 and mode not in ("concat", "postfusion", "concat_pf", "pf_concat"):
            raise ConfigError(f"PostFusionFamily knob samples (self-consistency, §4.4, Fig. 5) applies to concat, "
                              f"postfusion, concat_pf and pf_concat, not {mode!r}")
        self.one_shot, self.samples, self.gold_passage = one_shot, samples, gold_passage
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
            self.pruning_answer.demos = [PRUNING_DEMO] if one_shot else []
        if mode == "summary":
            self.summary_answer = dspy.Predict(SummaryQA)
            self.summary_answer.demos = [SUMMARY_DEMO] if one_shot else []

    @property
    def oracle_inputs(self) -> tuple[str, ...]:
        """Gold fields an evaluation passes at test time: Table 1's "with gold passage" setting."""
        return ("gold_passage", "answers") if self.gold_passage else ()

    # Stage diagnostics (ragzoo.diagnostics), in run order; a strategy records only the stages it runs.
    STAGES = {"retrieval": (), "concat": ("concat_answer",), "rationale": ("pruning_answer", "summary_answer"),
              "fallback": (), "passage_answers": ("passage_answer",), "vote": (), "distill": ("distill",)}

    def forward(self, question: str, gold_passage=None, answers=None) -> dspy.Prediction:
        passages = self.retrieve(question, self.k)
        gold_inserted = []
        if self.gold_passage:
            passages, gold_inserted = insert_gold(question, passages, gold_passage, answers)
        run = {
            "concat": self._concat,
            "postfusion": self._postfusion,
            "concat_pf": self._concat_pf,
            "pf_concat": self._pf_concat,
            "pruning": self._cot,
            "summary": self._cot,
        }[self.mode]
        fields = dict(concat_answer=None, votes=None, vote_counts=None, fallback=False, distilled=False,
                      rationale=None)
        fields.update(run(question, passages))
        # every distinct answer the answering calls produced before the final choice (see the docstring)
        fields["candidates"] = distinct_candidates(fields.pop("sampled", None) or [fields["answer"]],
                                                   self.lenient_unknown)
        return dspy.Prediction(retrieved=passages, unknown=is_unknown(fields["answer"], self.lenient_unknown),
                               gold_inserted=gold_inserted, stages=self._stages(passages, fields), **fields)

    def _stages(self, passages: list[Passage], fields: dict) -> dict:
        """What each stage this strategy ran produced. The vote (or pf_concat's dropping of "unknown"
        passages) is the filter: "kept" = the passages the final answer rests on."""
        stages: dict = {"retrieval": {"passages": passages}}
        if self.mode in ("concat", "concat_pf"):
            stages["concat"] = {"answer": fields["concat_answer"]}
        if self.mode in ("pruning", "summary"):
            stages["rationale"] = {"answer": fields["answer"]}
        if self.mode == "concat_pf":  # the concatenation said "unknown": fall back to the per-passage vote
            stages["fallback"] = {"decision": bool(fields["fallback"])}
        if fields.get("votes") is not None:
            stages["passage_answers"] = {"answers": list(fields["votes"])}
            stages["vote"] = {"passages": passages, "kept": list(fields["passages"]),
                              "counts": fields.get("vote_counts")}
        if self.mode == "pf_concat":
            stages["distill"] = {"decision": bool(fields["distilled"])}
        return stages

    # Strategies. Each returns the prediction fields it determines.

    def _ask(self, predictor, unreadable: tuple[str, str] | None = None, **inputs) -> tuple[str, list[str]]:
        """One answer and the answers it was chosen from: a greedy call (`[answer]`), or (self-consistency)
        the majority of `samples` sampled calls (all of them, in sample order). With `unreadable` =
        (predictor name, what that means), a call whose reply cannot be read answers "unknown" (a
        degradation); without it, it raises."""
        def call(**config):
            if unreadable is None:
                return predictor(**inputs, **config).answer
            return degrade(lambda: predictor(**inputs, **config).answer, UNKNOWN, *unreadable)

        if self.samples == 1:
            answer = call()
            return answer, [answer]
        answers = [call(config=self._sampling(i)) for i in range(self.samples)]
        return majority_vote(answers, self.lenient_unknown).answer, answers

    @staticmethod
    def _sampling(i: int) -> dict:
        # its own rollout_id, so the samples are distinct requests (and distinct cache entries)
        return {"temperature": SAMPLING_TEMPERATURE, "rollout_id": i}

    def _concat(self, question: str, passages: list[Passage], unreadable: tuple[str, str] | None = None) -> dict:
        """Eq. 1: one call over all k passages."""
        answer, sampled = self._ask(self.concat_answer, unreadable, context=numbered_passages(passages),
                                    question=question)
        return dict(answer=answer, passages=passages, concat_answer=answer, sampled=sampled)

    def _passage_answers(self, question: str, passages: list[Passage]) -> tuple[list[str], list[str]]:
        """One answer per passage (each seeing only its passage), and every answer sampled on the way, in
        rank order then sample order. An unreadable reply is "unknown": it casts no vote."""
        votes, sampled = [], []
        for p in passages:
            answer, answers = self._ask(self.passage_answer, ("passage_answer", NO_VOTE),
                                        context=numbered_passages([p]), question=question)
            votes.append(answer)
            sampled.extend(answers)
        return votes, sampled

    def _vote(self, question: str, passages: list[Passage]) -> dict:
        """Eq. 2: one call per passage, then the majority vote over the answer pool. With samples (§4.4: "p
        samples per passage, p x k outputs") the pool is every sample, one vote each, ties to the best rank
        and then the earliest sample; `votes` keeps each passage's own majority for inspection."""
        votes, sampled = self._passage_answers(question, passages)
        if self.samples == 1:
            vote = majority_vote(votes, self.lenient_unknown)
            return dict(answer=vote.answer, passages=[passages[i] for i in vote.supporters(votes)], votes=votes,
                        vote_counts=vote.counts, sampled=sampled)
        vote = majority_vote(sampled, self.lenient_unknown)
        p = self.samples
        kept = [i for i in range(len(passages)) if vote.supporters(sampled[i * p:(i + 1) * p])]
        # `answer_pool`: what the vote counted, which %NM (vote_miss) reads before the per-passage `votes`
        return dict(answer=vote.answer, passages=[passages[i] for i in kept], votes=votes, vote_counts=vote.counts,
                    sampled=sampled, answer_pool=list(sampled))

    def _postfusion(self, question: str, passages: list[Passage]) -> dict:
        return self._vote(question, passages)

    def _concat_pf(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.3, Fig. 2 top: concatenation; post-fusion only when it answers unknown."""
        first = self._concat(question, passages,
                             ("concat_answer", "treated as unknown: fell back to the post-fusion vote"))
        if not self._abstains(first["answer"], first["sampled"]):
            return first
        fallback = self._vote(question, passages)
        return dict(fallback, concat_answer=first["answer"], fallback=True,
                    sampled=first["sampled"] + fallback["sampled"])

    def _abstains(self, answer: str, sampled: list[str]) -> bool:
        """Whether Concat+PF's first round abstained: its answer is unknown; with samples, abstentions outnumber
        the most frequent known answer (notes §1.8: the majority of the p samples, "unknown" counted; a tie
        keeps the known answer). Counting only known samples, one known answer among p abstentions would
        keep almost every question from the fallback as p grows."""
        if self.samples == 1:
            return is_unknown(answer, self.lenient_unknown)
        vote = majority_vote(sampled, self.lenient_unknown)
        return vote.unknown_votes > max(vote.counts.values(), default=0)

    def _pf_concat(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.3, Fig. 2 bottom: per-passage answers, drop unknown passages, distill over the rest. With
        samples (Fig. 5), the pool the distiller chooses from holds every distinct sampled answer."""
        votes, sampled = self._passage_answers(question, passages)
        survivors = [p for p, a in zip(passages, votes) if not is_unknown(a, self.lenient_unknown)]
        candidates = distinct_candidates(sampled, self.lenient_unknown)
        fields = dict(votes=votes, sampled=sampled, passages=survivors)
        if not survivors:
            return dict(fields, answer=UNKNOWN)
        if self.skip_distill_if_unanimous and len(candidates) == 1:
            return dict(fields, answer=candidates[0])
        context = numbered_passages(survivors)

        def distill(**config):
            return degrade(lambda: self.distill(context=context, question=question, candidate_answers=candidates,
                                                **config).answer, None, "distill",
                           "answered with the majority vote of the candidates" if self.samples == 1
                           else "this sample casts no vote")

        if self.samples == 1:
            answers = [distill()]
        else:
            answers = [distill(config=self._sampling(i)) for i in range(self.samples)]
        readable = [answer for answer in answers if answer is not None]
        if not readable:
            return dict(fields, answer=majority_vote(votes, self.lenient_unknown).answer)
        answer = readable[0] if self.samples == 1 else majority_vote(readable, self.lenient_unknown).answer
        return dict(fields, answer=answer, distilled=True)

    def _cot(self, question: str, passages: list[Passage]) -> dict:
        """Sec. 3.2.2: one chain-of-thought call over all k passages (pruning or summary rationale)."""
        predictor = self.pruning_answer if self.mode == "pruning" else self.summary_answer
        out = predictor(context=numbered_passages(passages), question=question)
        return dict(answer=out.answer, passages=passages, rationale=out.rationale)
