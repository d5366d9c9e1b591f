"""Statistics for comparing runs over the same questions: seeded bootstrap confidence intervals over
questions, a paired bootstrap interval for the difference of two runs, and an exact-or-sampled paired
permutation (sign-flip) test.

Everything is seeded (default seed 0), so a report printed twice prints the same intervals. Scores are per
question (0/1 for EM or accuracy, [0, 1] for F1); a failed example scores 0, as in `summary.json`.

- `bootstrap_ci(scores)`: percentile bootstrap over questions (resample questions with replacement, B
  resamples, default 10,000) -> `Interval(mean, low, high)`.
- `paired_bootstrap(a, b)`: the same on the per-question differences a_i - b_i of two runs on the same
  questions -> `Interval` of the mean difference.
- `paired_permutation_test(a, b)`: two-sided p-value of "the two runs are exchangeable on each question"
  (randomly swap a_i and b_i, i.e. flip the sign of each difference). Exact (all 2^m sign patterns of the
  m non-zero differences) when m <= 20, else a seeded Monte-Carlo estimate with the +1 correction
  ((hits + 1) / (R + 1)), never 0.
- `compare(a, b)`: all of it in one `Comparison` (difference, its CI, p-value, the test's name, counts of
  questions where the runs disagree).
- `holm(p_values)`: Holm's step-down adjustment of a family of p-values (several methods tested against one),
  and `format_p(p)`: "< 0.0001" below what four decimals can show, never "0.0000".

The bootstrap resamples positions, so callers pass scores in a canonical order (sorted by question): the same
scores then give the same interval whatever order the predictions were written in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_PERMUTATIONS = 10_000
EXACT_PERMUTATION_LIMIT = 20  # exact test up to 2^20 sign patterns
PAIRED_TEST_NAME = "paired permutation test (sign-flip over questions, two-sided)"
CI_METHOD_NAME = "percentile bootstrap over questions"


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def format(self, digits: int = 3, scale: float = 1.0) -> str:
        return (f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, "
                f"{self.high * scale:.{digits}f}]")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    n: int  # questions both runs answered
    mean_a: float
    mean_b: float
    difference: Interval  # mean of a - b with its paired bootstrap CI
    p_value: float
    test: str
    exact: bool
    a_better: int  # questions where a scored higher
    b_better: int
    ties: int

    def to_dict(self) -> dict:
        data = asdict(self)
        data["difference"] = self.difference.to_dict()
        return data


def _as_array(scores: Sequence[float], name: str = "scores") -> np.ndarray:
    array = np.asarray(list(scores), dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of per-question scores")
    if array.size == 0:
        raise ValueError(f"{name} is empty: no question to compute a statistic on")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds a non-finite value (NaN or inf)")
    return array


def _percentile_interval(values: np.ndarray, resampled_means: np.ndarray, confidence: float) -> Interval:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(resampled_means, [alpha, 1.0 - alpha])
    return Interval(float(values.mean()), float(low), float(high), int(values.size), confidence)


def _bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    rng = np.random.default_rng(seed)
    n = values.size
    means = np.empty(resamples, dtype=float)
    chunk = max(1, 2_000_000 // max(n, 1))  # bounded memory: at most ~2M indices at a time
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means


def bootstrap_ci(scores: Sequence[float], *, confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = 0) -> Interval:
    """Mean of per-question scores with a seeded percentile bootstrap CI (questions resampled)."""
    values = _as_array(scores)
    return _percentile_interval(values, _bootstrap_means(values, resamples, seed), confidence)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Interval:
    """Mean difference a - b over the same questions (same order) with a paired bootstrap CI: the questions
    are resampled, each keeping its pair of scores."""
    diffs = _differences(a, b)
    return _percentile_interval(diffs, _bootstrap_means(diffs, resamples, seed), confidence)


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    x, y = _as_array(a, "a"), _as_array(b, "b")
    if x.size != y.size:
        raise ValueError(f"paired statistics need the same questions: {x.size} scores vs {y.size}")
    return x - y


def _signed_sums(values: np.ndarray) -> np.ndarray:
    """The 2^len(values) sums of +-values."""
    sums = np.zeros(1)
    for value in values:
        sums = np.concatenate([sums + value, sums - value])
    return sums


def paired_permutation_test(a: Sequence[float], b: Sequence[float], *, permutations: int = DEFAULT_PERMUTATIONS,
                            seed: int = 0) -> tuple[float, bool]:
    """(two-sided p-value, exact?) of the paired sign-flip permutation test of mean(a - b) = 0."""
    diffs = _differences(a, b)
    nonzero = diffs[diffs != 0.0]
    m = nonzero.size
    if m == 0:
        return 1.0, True
    observed = abs(nonzero.sum())
    tolerance = 1e-12 * max(1.0, observed)
    if m <= EXACT_PERMUTATION_LIMIT:
        threshold = observed - tolerance
        if threshold <= 0:
            return 1.0, True
        # every signed sum is one of the first half's plus one of the second's: count the pairs reaching the
        # threshold with a sorted half (2 x 2^(m/2) sums) instead of listing all 2^m patterns (400 MB at m = 20)
        left, right = _signed_sums(nonzero[: m // 2]), np.sort(_signed_sums(nonzero[m // 2:]))
        above = right.size - np.searchsorted(right, threshold - left, side="left")
        below = np.searchsorted(right, -threshold - left, side="right")
        return float((above.sum() + below.sum()) / 2 ** m), True
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // m)
    for start in range(0, permutations, chunk):
        size = min(chunk, permutations - start)
        signs = rng.choice((1.0, -1.0), size=(size, m))
        hits += int(np.sum(np.abs(signs @ nonzero) >= observed - tolerance))
    return (hits + 1) / (permutations + 1), False


def compare(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
            resamples: int = DEFAULT_RESAMPLES, permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0) -> Comparison:
    """Everything a reviewer asks of two runs on the same questions (scores aligned by question)."""
    diffs = _differences(a, b)
    interval = paired_bootstrap(a, b, confidence=confidence, resamples=resamples, seed=seed)
    p_value, exact = paired_permutation_test(a, b, permutations=permutations, seed=seed)
    x = np.asarray(list(a), dtype=float)
    y = np.asarray(list(b), dtype=float)
    return Comparison(n=int(diffs.size), mean_a=float(x.mean()), mean_b=float(y.mean()), difference=interval,
                      p_value=float(p_value), test=PAIRED_TEST_NAME + (" exact" if exact else
                                                                       f" ({permutations} random sign flips)"),
                      exact=exact, a_better=int(np.sum(diffs > 0)), b_better=int(np.sum(diffs < 0)),
                      ties=int(np.sum(diffs == 0)))


P_FLOOR = 0.0001  # below this a p-value prints as "< 0.0001" (four decimals would show 0.0000)
HOLM_NAME = "Holm-adjusted"


def format_p(p: float) -> str:
    """A p-value as a table shows it: four decimals, or "< 0.0001" for one that would print as 0.0000."""
    return f"< {P_FLOOR:.4f}" if p < P_FLOOR else f"{p:.4f}"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given: the i-th smallest of m is
    multiplied by m - i + 1, made monotone (never below an earlier adjusted value) and capped at 1. The same
    values as statsmodels' `multipletests(p, method="holm")[1]`."""
    values = [float(p) for p in p_values]
    if any(not 0.0 <= p <= 1.0 or math.isnan(p) for p in values):
        raise ValueError("p-values must lie in [0, 1]")
    m = len(values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: values[i])):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (a closed-form check on bootstrap intervals of 0/1 scores)."""
    from statistics import NormalDist

    if n <= 0:
        raise ValueError("n must be positive")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)  # 0 or 1 exactly at 0% and 100% (float error: -1e-17)
