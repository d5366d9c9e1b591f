"""Metrics: plain string functions and `(example, pred, trace=None) -> float` DSPy metrics.

Answer metrics read the golds from `example.answers` (list; falls back to `example.answer`) and the answer
from `pred.answer`. A prediction that is None, has no answer, an empty or None answer, or is an exception
object (a failed parse recorded by the evaluator) scores 0.0 and never raises. All metrics return floats.

    METRICS      higher is better: em, f1, acc, contains (answers); contains_reply (reasoning or notes, and answer,
                 as ActiveRAG scores); oracle_em, oracle_f1, oracle_acc,
                 oracle_contains (the best over `pred.candidates`, else the answer: best-of-n rows,
                 `ragzoo.metrics.oracle`); recall, precision, s_precision, all_gold (retrieved titles vs
                 `example.supporting_titles`, from `pred.passages`)
    DIAGNOSTICS  lower is better: unknown (%Unk), unknown_lenient (%Unk with refusal phrasings), vote_miss (%NM)
    JUDGED       by an LM (`--judge-lm`, `ragzoo.metrics.judge`): judge (SemanticF1-style), judge_faithful
    get_metric(name_or_callable) -> the metric function (ConfigError listing valid names otherwise)

A dataset's default metric (StrategyQA: acc, the others: em) is data, not a metric: it lives with the
dataset's other defaults in `ragzoo.data.registry.DEFAULTS` (`ragzoo.data.default_metric(name)`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ragzoo.errors import ConfigError
from ragzoo.metrics.answer import accuracy, contains, exact_match, f1, normalize_answer, token_f1, yes_no
from ragzoo.metrics.fields import gold_answers, gold_yes_no, predicted_answer, predicted_candidates, predicted_reply
from ragzoo.metrics.oracle import oracle_acc, oracle_contains, oracle_em, oracle_f1
from ragzoo.metrics.rates import (is_unknown, unknown_lenient_metric, unknown_metric, unknown_rate, vote_miss,
                                  vote_miss_metric, vote_miss_rate)
from ragzoo.metrics.retrieval import (all_gold_metric, all_gold_retrieved, gold_titles, normalize_title,
                                      precision_metric,
                                      predicted_passages, recall_metric, retrieval_report, retrieved_titles,
                                      s_precision, s_precision_metric, title_precision, title_recall)

Metric = Callable[..., float]


def em(example, pred, trace=None) -> float:
    """Exact match against any gold answer (SQuAD/HotPotQA normalization)."""
    return exact_match(predicted_answer(pred), gold_answers(example))


def f1_metric(example, pred, trace=None) -> float:
    """Best token F1 over the gold answers, with HotPotQA's yes/no/noanswer rule."""
    return f1(predicted_answer(pred), gold_answers(example))


def acc(example, pred, trace=None) -> float:
    """Yes/no accuracy (StrategyQA): gold from `example.answer_bool`, else the first gold answer."""
    return accuracy(predicted_answer(pred), gold_yes_no(example))


def contains_metric(example, pred, trace=None) -> float:
    """A normalized gold answer occurs in the normalized prediction (FlashRAG / ActiveRAG "acc")."""
    return contains(predicted_answer(pred), gold_answers(example))


def contains_reply_metric(example, pred, trace=None) -> float:
    """A normalized gold answer occurs anywhere in the normalized reply (reasoning or reading notes, and answer):
    ActiveRAG's own scoring (its evaluation reads the whole final reply, not an answer line)."""
    golds = gold_answers(example)
    return max((contains(part, golds) for part in predicted_reply(pred)), default=0.0)


METRICS: dict[str, Metric] = {
    "em": em,
    "f1": f1_metric,
    "acc": acc,
    "contains": contains_metric,
    "contains_reply": contains_reply_metric,
    "oracle_em": oracle_em,
    "oracle_f1": oracle_f1,
    "oracle_acc": oracle_acc,
    "oracle_contains": oracle_contains,
    "recall": recall_metric,
    "precision": precision_metric,
    "s_precision": s_precision_metric,
    "all_gold": all_gold_metric,
}

DIAGNOSTICS: dict[str, Metric] = {
    "unknown": unknown_metric,
    "unknown_lenient": unknown_lenient_metric,
    "vote_miss": vote_miss_metric,
}

# LM-judged (`ragzoo.metrics.judge`, needs --judge-lm): SemanticF1-style answer overlap, support by the passages
JUDGED = ("judge", "judge_faithful")


def get_metric(name_or_callable: str | Metric) -> Metric:
    """A metric by name (METRICS or DIAGNOSTICS), a "package.module:function" path, or a callable as is."""
    if callable(name_or_callable):
        return name_or_callable
    if not isinstance(name_or_callable, str):
        raise ConfigError(f"a metric must be a name or a callable, got {type(name_or_callable).__name__}")
    name = name_or_callable.strip()
    if name in METRICS:
        return METRICS[name]
    if name in DIAGNOSTICS:
        return DIAGNOSTICS[name]
    if name in JUDGED:  # judged by an LM (`ragzoo.metrics.judge`): bound to the configured --judge-lm
        from ragzoo.metrics.judge import judge_metric

        return judge_metric(name)
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            metric: Any = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise ConfigError(f"cannot import metric {name!r}: {error}") from None
        if not callable(metric):
            raise ConfigError(f"metric {name!r} is not callable")
        return metric
    valid = ", ".join([*METRICS, *DIAGNOSTICS, *JUDGED])
    raise ConfigError(f"unknown metric {name!r}; choose one of: {valid} (or module:function)")


__all__ = [
    "DIAGNOSTICS", "METRICS", "accuracy", "acc", "all_gold_metric", "all_gold_retrieved",
    "contains", "contains_metric", "em", "exact_match", "f1", "f1_metric", "get_metric",
    "gold_answers", "gold_titles", "gold_yes_no", "is_unknown", "normalize_answer", "oracle_acc",
    "oracle_contains", "oracle_em", "oracle_f1", "precision_metric", "predicted_answer", "predicted_candidates",
    "predicted_passages", "recall_metric", "retrieval_report", "retrieved_titles", "normalize_title",
    "s_precision", "s_precision_metric", "title_precision", "title_recall", "token_f1", "unknown_lenient_metric",
    "unknown_metric", "unknown_rate", "vote_miss", "vote_miss_metric", "vote_miss_rate", "yes_no",
]
