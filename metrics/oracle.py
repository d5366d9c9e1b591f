"""Best-of-n ("oracle") answer metrics: a base answer metric's best score over the candidate answers a method
produced (`pred.candidates`, see `ragzoo.metrics.fields.predicted_candidates`), falling back to `pred.answer`
when it produced none.

They score what a perfect selector would get from the candidates, an upper bound, for the rows that report
one: BlendFilter's Fig. 5 (three sampled answers; "if one of the answers is correct, its EM will be 1, and the
F1 score is the highest one of the three") and ActiveRAG's Table 3 (Oracle Rerank over the agents' answers).
The candidates, when present, ARE the pool: the method's own final answer counts only as one of them (an
oracle reranker picks among the agents' answers, not the method's pick). A failed prediction scores 0.
"""

from __future__ import annotations

from typing import Callable

from ragzoo.metrics.answer import accuracy, contains, exact_match, f1
from ragzoo.metrics.fields import (field, gold_answers, gold_yes_no, predicted_answer,
                                   predicted_candidates)


def candidate_pool(pred) -> list[str]:
    """The answers an oracle chooses from: the candidates, else the answer alone ([] for a failed one)."""
    candidates = predicted_candidates(pred)
    if candidates:
        return candidates
    if pred is None or isinstance(pred, BaseException) or isinstance(field(pred, "answer"), BaseException):
        return []
    return [predicted_answer(pred)]


def best_of(score: Callable[[str], float], pred) -> float:
    """The best `score(answer)` over the candidate pool (0.0 when it is empty)."""
    return max((score(answer) for answer in candidate_pool(pred)), default=0.0)


def _best_against(score, gold, pred) -> float:
    return best_of(lambda answer: score(answer, gold), pred)


def oracle_em(example, pred, trace=None) -> float:
    """1.0 when any candidate answer exactly matches a gold answer (BlendFilter Fig. 5's best-of-3 EM)."""
    return _best_against(exact_match, gold_answers(example), pred)


def oracle_f1(example, pred, trace=None) -> float:
    """The highest token F1 of any candidate answer (BlendFilter Fig. 5's best-of-3 F1)."""
    return _best_against(f1, gold_answers(example), pred)


def oracle_acc(example, pred, trace=None) -> float:
    """Yes/no accuracy of the best candidate (StrategyQA)."""
    return _best_against(accuracy, gold_yes_no(example), pred)


def oracle_contains(example, pred, trace=None) -> float:
    """A gold answer occurs in some candidate (ActiveRAG's "acc" under Oracle Rerank)."""
    return _best_against(contains, gold_answers(example), pred)
