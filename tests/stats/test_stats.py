"""ragzoo.stats against known values: an exact zero difference, a binomial rate, textbook exact sign-flip
p-values and scipy's own bootstrap / permutation test."""

import math

import numpy as np
import pytest

from ragzoo import stats


def test_identical_runs_have_difference_exactly_zero_and_p_one():
    scores = [1, 0, 1, 1, 0, 0.5, 1, 0] * 10
    result = stats.compare(scores, scores)
    assert result.difference.mean == 0.0
    assert result.difference.low == 0.0 and result.difference.high == 0.0
    assert result.p_value == 1.0 and result.exact
    assert (result.a_better, result.b_better, result.ties) == (0, 0, 80)


def test_bootstrap_ci_of_a_binomial_rate_matches_wilson_and_normal():
    scores = [1] * 300 + [0] * 200  # rate 0.6 on 500 questions
    interval = stats.bootstrap_ci(scores, seed=1)
    assert interval.mean == pytest.approx(0.6)
    half = 1.959964 * math.sqrt(0.6 * 0.4 / 500)  # 0.04294
    assert interval.low == pytest.approx(0.6 - half, abs=0.006)
    assert interval.high == pytest.approx(0.6 + half, abs=0.006)
    low, high = stats.wilson_interval(300, 500)
    assert low == pytest.approx(0.55645, abs=1e-4) and high == pytest.approx(0.64212, abs=1e-4)  # textbook Wilson
    assert interval.low == pytest.approx(low, abs=0.006) and interval.high == pytest.approx(high, abs=0.006)


def test_constant_scores_give_a_degenerate_interval():
    interval = stats.bootstrap_ci([1.0] * 50)
    assert (interval.mean, interval.low, interval.high) == (1.0, 1.0, 1.0)


def test_exact_sign_flip_p_values_are_textbook():
    # a wins on 5 questions, ties elsewhere: 2 of 2^5 sign patterns reach |sum| = 5 -> p = 2/32
    a = [1, 1, 1, 1, 1, 0, 0, 0]
    b = [0, 0, 0, 0, 0, 0, 0, 0]
    p, exact = stats.paired_permutation_test(a, b)
    assert exact and p == pytest.approx(2 / 32)
    # 4 wins, 1 loss: |sum| >= 3 for patterns with <= 1 or >= 4 plus signs: (1 + 5 + 5 + 1) / 32
    p, exact = stats.paired_permutation_test([1, 1, 1, 1, 0], [0, 0, 0, 0, 1])
    assert exact and p == pytest.approx(12 / 32)


def _enumerated_p(diffs) -> float:
    """The exact two-sided p-value by listing every sign pattern (small m only)."""
    import itertools

    observed = abs(sum(diffs))
    totals = [abs(sum(s * d for s, d in zip(signs, diffs))) for signs in itertools.product((1, -1), repeat=len(diffs))]
    return sum(total >= observed - 1e-12 * max(1.0, observed) for total in totals) / len(totals)


def test_exact_p_values_equal_the_enumeration_ties_included():
    rng = np.random.default_rng(11)
    for m in (1, 2, 3, 6, 9, 12):
        for diffs in (rng.integers(-1, 2, m).astype(float), rng.choice([-0.5, 0.25, 1.0], m), rng.random(m).round(3),
                      rng.random(m) - 0.5, np.ones(m)):
            p, exact = stats.paired_permutation_test(diffs, np.zeros(m))
            assert exact and p == pytest.approx(_enumerated_p(list(diffs)), abs=1e-12), list(diffs)


def test_the_exact_test_at_its_limit_counts_without_a_2_to_the_20_matrix():
    """20 differing questions (the exact limit): `ragzoo report` ran this per pair of runs, and listing the 2^20
    sign patterns took ~1 s and over 160 MB each."""
    import tracemalloc

    a, b = [1] * 20, [0] * 20
    tracemalloc.start()
    try:
        p, exact = stats.paired_permutation_test(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert exact and p == 2 / 2 ** 20
    assert peak < 16 << 20, f"{peak / 2 ** 20:.0f} MB"
    p, exact = stats.paired_permutation_test([1] * 10 + [0] * 10, [0] * 20)
    assert exact and p == pytest.approx(2 / 2 ** 10)


def test_paired_permutation_matches_scipy_exact():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    a = rng.random(12)
    b = rng.random(12)
    ours, exact = stats.paired_permutation_test(a, b)
    theirs = scipy_stats.permutation_test((a, b), lambda x, y: np.mean(x - y), permutation_type="samples",
                                          n_resamples=np.inf, alternative="two-sided").pvalue
    assert exact and ours == pytest.approx(theirs, abs=1e-12)


def test_sampled_permutation_matches_scipy_within_monte_carlo_error():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    a = (rng.random(200) < 0.62).astype(float)
    b = (rng.random(200) < 0.55).astype(float)
    ours, exact = stats.paired_permutation_test(a, b, permutations=20_000, seed=2)
    theirs = scipy_stats.permutation_test((a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis), vectorized=True,
                                          permutation_type="samples", n_resamples=20_000,
                                          alternative="two-sided", random_state=7).pvalue
    assert not exact and 0 < ours < 1
    assert ours == pytest.approx(theirs, abs=0.02)


def test_bootstrap_ci_matches_scipy_percentile_bootstrap():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(11)
    scores = rng.random(300)
    ours = stats.bootstrap_ci(scores, resamples=20_000, seed=4)
    theirs = scipy_stats.bootstrap((scores,), np.mean, method="percentile", n_resamples=20_000,
                                   random_state=9).confidence_interval
    assert ours.low == pytest.approx(theirs.low, abs=0.004)
    assert ours.high == pytest.approx(theirs.high, abs=0.004)


def test_paired_bootstrap_of_a_constant_shift_is_the_shift():
    a = np.linspace(0, 0.5, 40)
    result = stats.paired_bootstrap(a + 0.25, a)
    assert result.mean == pytest.approx(0.25) and result.low == pytest.approx(0.25) and result.high == pytest.approx(0.25)


def test_seeded_and_refuses_bad_input():
    x = [1, 0, 0, 1, 1, 0, 1]
    assert stats.bootstrap_ci(x, seed=5) == stats.bootstrap_ci(x, seed=5)
    with pytest.raises(ValueError, match="same questions"):
        stats.compare([1, 0], [1])
    with pytest.raises(ValueError, match="empty"):
        stats.bootstrap_ci([])
    with pytest.raises(ValueError, match="non-finite"):
        stats.bootstrap_ci([1.0, float("nan")])
