"""Answer voting for post-fusion style programs: "unknown" detection and a majority vote over answers.

Reusable by any program that asks one question of several contexts (post-fusion, self-consistency
samples, ...). Pure Python, no LM.

Rules (Liu et al., arXiv 2308.12574, Sec. 3.2.1; the paper does not spell them out, see
`seeds/notes/postfusion.md` §1.3 and §6):

- Answers are compared after SQuAD-style normalization (`dspy.evaluate.normalize_text`: lowercase,
  strip punctuation and articles, collapse whitespace), the same normalization the EM metric uses.
  An answer the normalizer empties (e.g. "A") is compared by its lowercased surface form instead.
- An answer is "unknown" when it normalizes to exactly ``unknown``, or is empty (an empty answer is an
  abstention too). ``lenient=True`` also treats common refusal phrasings ("not enough context",
  "cannot be determined", ...) as unknown; exact match is the default because the paper's prompt asks for
  the literal word and lenient matching would hide prompt-following failures. The definition is
  `ragzoo.metrics.rates.is_unknown`, shared with the %Unk rate, so the rate counts exactly the abstentions
  the programs act on.
- "unknown" answers do not vote. The winner is the most frequent remaining answer; a tie goes to the
  answer whose first occurrence has the best retrieval rank (the answers are given in rank order). The
  surface form returned is that first occurrence. When every answer is unknown the result is ``unknown``.

Why not `dspy.majority`: it has the same tie rule (earlier completion wins) and can ignore values whose
normalizer returns None, but it takes `Prediction`/`Completions` objects, returns only the winning
completion (we want the tally and the winner's rank for inspection and the vote-miss metric), and when
every value is ignored it silently falls back to voting among the ignored ones instead of returning
"unknown". So the rule is written here in a few lines instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from dspy.evaluate import normalize_text

from ragzoo.metrics.rates import is_unknown as _is_unknown

UNKNOWN = "unknown"


def normalize_answer(answer: str) -> str:
    """SQuAD-style normalization used for comparing and counting answers. An answer that normalizes to
    nothing (e.g. "A", an article) keeps its lowercased surface form, so it is still an answer."""
    answer = (answer or "").strip()
    return normalize_text(answer) or answer.lower()


def is_unknown(answer: str | None, lenient: bool = False) -> bool:
    """True when `answer` is an abstention, by the one definition ragzoo has
    (`ragzoo.metrics.rates.is_unknown`, which the %Unk rate also uses): "unknown" after normalization, or
    empty; with `lenient`, refusal phrasings too."""
    return _is_unknown(answer, refusals=lenient)


@dataclass(frozen=True)
class Vote:
    """Result of `majority_vote`. `counts` maps normalized answers to votes, in first-seen (rank) order."""

    answer: str
    counts: dict[str, int] = field(default_factory=dict)
    winner_rank: int | None = None
    unknown_votes: int = 0
    tied: bool = False

    @property
    def is_unknown(self) -> bool:
        return self.winner_rank is None

    def supporters(self, answers: Sequence[str]) -> list[int]:
        """Ranks (indices) of the answers that agree with the winner."""
        if self.winner_rank is None:
            return []
        winner = normalize_answer(self.answer)
        return [rank for rank, answer in enumerate(answers) if normalize_answer(answer) == winner]


def majority_vote(answers: Sequence[str], lenient: bool = False) -> Vote:
    """Plurality over `answers` (given in retrieval-rank order), ignoring unknowns; ties by best rank."""
    counts: dict[str, int] = {}
    first_rank: dict[str, int] = {}
    unknown_votes = 0
    for rank, answer in enumerate(answers):
        if is_unknown(answer, lenient):
            unknown_votes += 1
            continue
        key = normalize_answer(answer)
        counts[key] = counts.get(key, 0) + 1
        first_rank.setdefault(key, rank)
    if not counts:
        return Vote(answer=UNKNOWN, counts={}, winner_rank=None, unknown_votes=unknown_votes)
    best = max(counts.values())
    leaders = [key for key, count in counts.items() if count == best]
    winner = min(leaders, key=first_rank.__getitem__)
    rank = first_rank[winner]
    return Vote(answer=answers[rank].strip(), counts=counts, winner_rank=rank, unknown_votes=unknown_votes,
                tied=len(leaders) > 1)


def distinct_candidates(answers: Sequence[str], lenient: bool = False) -> list[str]:
    """Known answers deduplicated after normalization, first-seen (rank) order, surface form kept."""
    seen: set[str] = set()
    candidates: list[str] = []
    for answer in answers:
        if is_unknown(answer, lenient):
            continue
        key = normalize_answer(answer)
        if key not in seen:
            seen.add(key)
            candidates.append(answer.strip())
    return candidates
