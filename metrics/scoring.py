"""Metrics as optimizers and evaluations use them: by name (`em`, `f1`, `acc`, `contains`, anything `ragzoo.metrics` knows) or
a Python callable `(example, prediction, trace=None) -> float | bool`, wrapped so that a metric that raises, a
missing prediction (the program failed to parse or call the LM) or a non-numeric value scores 0 instead of
stopping the optimizer."""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

from ragzoo.errors import ConfigError

logger = logging.getLogger(__name__)


def resolve_metric(metric: str | Callable) -> tuple[str, Callable]:
    """(name, function) of a metric given by name or as a callable."""
    if callable(metric):
        return getattr(metric, "__name__", type(metric).__name__), metric
    if not isinstance(metric, str) or not metric.strip():
        raise ConfigError(f"metric {metric!r} is neither a metric name nor a function")
    from ragzoo.metrics import get_metric

    return metric.strip(), get_metric(metric.strip())


def resolve_metrics(metrics: str | Callable | list) -> list[tuple[str, Callable]]:
    """Several metrics: a comma-separated string, a list of names/callables, or one of either."""
    if isinstance(metrics, str):
        items: list[Any] = [part for part in (p.strip() for p in metrics.split(",")) if part]
    elif callable(metrics):
        items = [metrics]
    elif isinstance(metrics, (list, tuple)):
        items = list(metrics)
    else:
        raise ConfigError(f"metrics must be a name, a list of names or a metric function, got {metrics!r}")
    if not items:
        raise ConfigError("no metric given; pass e.g. --metric em,f1")
    return [resolve_metric(item) for item in items]


def score_value(value: Any) -> float:
    """A metric result as a float in the usual sense: bools -> 0/1, NaN or non-numbers -> 0."""
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(number) else number


class SafeMetric:
    """`metric(example, pred, trace=None, *extra)` that never raises: failures score 0.

    Extra positional/keyword arguments (GEPA passes `pred_name` and `pred_trace`) are accepted and ignored.
    """

    def __init__(self, metric: str | Callable):
        self.name, self.fn = resolve_metric(metric)
        self.__name__ = self.name
        self.failures = 0

    def __call__(self, example, pred, trace=None, *args, **kwargs) -> float:
        return self.scored(example, pred, trace)[0]

    def scored(self, example, pred, trace=None) -> tuple[float, str | None]:
        """(score, None), or (0.0, "ErrorType: message") when the metric raised: a run records which questions'
        scores are such zeros rather than scores."""
        if pred is None:
            return 0.0, None
        try:
            return score_value(self.fn(example, pred, trace)), None
        except Exception as error:  # a metric bug or an odd prediction must not stop an optimizer
            self.failures += 1
            logger.debug("metric %s failed on %r: %s", self.name, example, error)
            return 0.0, f"{type(error).__name__}: {error}"


def safe_metric(metric: str | Callable) -> SafeMetric:
    return metric if isinstance(metric, SafeMetric) else SafeMetric(metric)
