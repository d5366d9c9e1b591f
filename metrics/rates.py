"""Post-Fusion's diagnostic rates: %Unk (the model said "unknown") and %NM (vote miss).

"Unknown" is defined HERE, once, for the programs that act on it (`ragzoo.programs.voting`, hence Concat+PF's
fallback and PF+Concat's dropped passages; RA-ISF's `decompose_if_unknown`; the yes/no reader
`ragzoo.programs.base.YesNoPredict`) and for the %Unk rate that reports it, so %Unk counts exactly the
abstentions the programs acted on:
- an answer is unknown when it normalizes (SQuAD normalization) to exactly "unknown", or to nothing (an
  empty or missing answer is an abstention too; an answer made only of an article, e.g. "A", is not empty);
- with `refusals=True` (the programs' `lenient_unknown` knob), refusal phrasings ("not provided", "no
  context", "cannot be determined", "N/A", ...) count as well; off by default because the paper's prompt asks
  for the literal word, and so they can be reported separately, as the notes recommend. RA-ISF's official
  code spells its abstention label "unknow": a misspelling of the word asked for, so it is one of these
  (issue 22: RA-ISF no longer keeps its own wider list). `unknown_lenient` is %Unk in that reading.
A FAILED prediction (None, or an exception an evaluator recorded) is not an abstention: `unknown_metric` and
`unknown_rate` score it 0, so %Unk and the error rate stay apart.

Vote miss (%NM): a gold answer (by exact match) is in the answer pool of the per-passage votes but the final
answer is not correct. The pool is read from the prediction's `answer_pool` (the answers its vote counted, where
they are not one per passage: Post-Fusion's p·k pooled samples), else `votes`, else `candidates`;
a prediction without a pool (e.g. Concat+PF answered in round 1) is not a miss. The paper does not state the
denominator: `vote_miss_rate` takes it as a parameter ("all" questions by default, or only "pool_has_gold").
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from ragzoo.metrics.answer import exact_match, normalize_answer
from ragzoo.metrics.fields import field, gold_answers, predicted_answer

UNKNOWN = "unknown"
# Searched in normalized text (lower case, no punctuation, no articles).
REFUSAL = re.compile(
    r"\b(i (do not|dont|don t) know|not (enough|sufficient) (information|context)"
    r"|insufficient (information|context)|no (relevant )?(context|information)"
    r"|(cannot|can not|cant|unable to) (be )?(determined?|answer(ed)?)"
    r"|(does not|doesnt|do not|dont) (provide|contain|mention|say)"
    r"|not (provided|mentioned|given|specified|stated|available)|^n ?a$|^unknow$)\b")
POOL_FIELDS = ("answer_pool", "votes", "candidates")


def is_unknown(answer: Any, *, refusals: bool = False) -> bool:
    """True when `answer` is an abstention: it normalizes to "unknown" or to nothing (None and "" included);
    with `refusals`, also when it is a refusal phrase."""
    if isinstance(answer, BaseException):
        return False
    text = "" if answer is None else str(answer)
    normalized = normalize_answer(text)
    if normalized == UNKNOWN or (not normalized and not text.strip()):
        return True
    return refusals and bool(REFUSAL.search(normalized))


def _failed(pred: Any) -> bool:
    return pred is None or isinstance(pred, BaseException) or isinstance(field(pred, "answer"), BaseException)


def prediction_is_unknown(pred: Any, *, refusals: bool = False) -> bool:
    """The prediction abstained (see `is_unknown`); a failed prediction did not."""
    return not _failed(pred) and is_unknown(predicted_answer(pred), refusals=refusals)


def unknown_metric(example, pred, trace=None) -> float:
    """1.0 when the prediction's answer is "unknown" (per-example form of %Unk)."""
    return float(prediction_is_unknown(pred))


def unknown_lenient_metric(example, pred, trace=None) -> float:
    """1.0 when the prediction's answer is "unknown" or a refusal phrasing (%Unk of a `lenient_unknown` run)."""
    return float(prediction_is_unknown(pred, refusals=True))


def unknown_rate(preds: Iterable[Any], *, refusals: bool = False) -> float:
    """Share of predictions (or answer strings) that are "unknown"; 0.0 for no predictions."""
    flags = [prediction_is_unknown(pred, refusals=refusals) for pred in preds]
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
