"""Post-Fusion's diagnostic rates: %Unk (the model said "unknown") and %NM (vote miss).

Unknown detection follows the paper's uniform "just say unknown" instruction: the answer normalizes to
exactly "unknown". Refusal phrasings ("not provided", "no context", "cannot be determined", ...) are counted
only when asked (`refusals=True`) so they can be reported separately, as the notes recommend.

Vote miss (%NM): a gold answer (by exact match) is in the answer pool of the per-passage votes but the final
answer is not correct. The pool is read from the prediction's `votes` (else `candidates`, else `answer_pool`);
a prediction without a pool (e.g. Concat+PF answered in round 1) is not a miss. The paper does not state the
denominator: `vote_miss_rate` takes it as a parameter ("all" questions by default, or only "pool_has_gold").
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from ragzoo.metrics.answer import exact_match, normalize_answer
from ragzoo.metrics.fields import field, gold_answers, predicted_answer

UNKNOWN = "unknown"
_REFUSAL = re.compile(
    r"\b(not (provided|mentioned|given|specified|stated|available|enough information)|no (context|information)"
    r"|cannot be (determined|answered)|can ?not (determine|answer)|does not (contain|provide|mention)"
    r"|insufficient (information|context)|i don ?t know)\b")
POOL_FIELDS = ("votes", "candidates", "answer_pool")


def is_unknown(answer: Any, *, refusals: bool = False) -> bool:
    """True when the answer normalizes to "unknown" (with `refusals`, also a refusal phrase)."""
    if answer is None or isinstance(answer, BaseException):
        return False
    normalized = normalize_answer(str(answer))
    if normalized == UNKNOWN:
        return True
    return refusals and bool(_REFUSAL.search(normalized))


def unknown_metric(example, pred, trace=None) -> float:
    """1.0 when the prediction's answer is "unknown" (per-example form of %Unk)."""
    return float(is_unknown(predicted_answer(pred)))


def unknown_rate(preds: Iterable[Any], *, refusals: bool = False) -> float:
    """Share of predictions (or answer strings) that are "unknown"; 0.0 for no predictions."""
    flags = [is_unknown(predicted_answer(pred), refusals=refusals) for pred in preds]
    return sum(flags) / len(flags) if flags else 0.0


def _pool(pred: Any) -> list[str]:
    for name in POOL_FIELDS:
        value = field(pred, name)
        if isinstance(value, (list, tuple)):
            return [predicted_answer(item) if not isinstance(item, str) else item for item in value]
    return []


def vote_miss(final_answer: str | None, pool: Iterable[str], golds: Iterable[str] | str) -> bool:
    """The gold answer is in the pool but the final answer is wrong."""
    return any(exact_match(candidate, golds) for candidate in pool) and not exact_match(final_answer, golds)


def vote_miss_metric(example, pred, trace=None) -> float:
    return float(vote_miss(predicted_answer(pred), _pool(pred), gold_answers(example)))


def vote_miss_rate(examples: Sequence[Any], preds: Sequence[Any], *, denominator: str = "all") -> float:
    """%NM over "all" questions, or over the questions whose pool holds a gold answer ("pool_has_gold")."""
    if denominator not in ("all", "pool_has_gold"):
        raise ValueError("denominator must be 'all' or 'pool_has_gold'")
    misses = considered = 0
    for example, pred in zip(examples, preds, strict=True):
        golds, pool = gold_answers(example), _pool(pred)
        has_gold = any(exact_match(candidate, golds) for candidate in pool)
        if denominator == "all" or has_gold:
            considered += 1
            misses += has_gold and not exact_match(predicted_answer(pred), golds)
    return misses / considered if considered else 0.0
