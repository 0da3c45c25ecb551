"""The bootstrap resampler: every resample is n rows drawn uniformly with replacement."""

from __future__ import annotations

import numpy as np
import pytest

from personalign.metrics.bootstrap import (
    RESAMPLE_BLOCK,
    bootstrap_ci,
    mean_statistic,
    mean_with_ci,
    resample_sums,
)


@pytest.mark.parametrize("n_resamples", [1, RESAMPLE_BLOCK, 3 * RESAMPLE_BLOCK + 5])
def test_resamples_are_row_counts_summing_to_n(n_resamples: int) -> None:
    n = 7
    counts = resample_sums(np.eye(n), n_resamples, seed=3)  # identity rows: sums are the row counts
    assert counts.shape == (n_resamples, n)
    assert np.array_equal(counts, np.round(counts)) and counts.min() >= 0
    assert np.all(counts.sum(axis=1) == n)


def test_rows_are_drawn_uniformly_and_resamples_differ() -> None:
    n, n_resamples = 50, 4000
    counts = resample_sums(np.eye(n), n_resamples, seed=0)
    # Each row's count is Binomial(n, 1/n): mean 1, variance 1 - 1/n.
    assert counts.mean(axis=0) == pytest.approx(np.ones(n), abs=0.1)
    assert counts.var() == pytest.approx(1 - 1 / n, abs=0.05)
    assert len({row.tobytes() for row in counts}) == n_resamples


def test_seed_reproduces_and_changes_the_draws() -> None:
    data = np.arange(20, dtype=float)[:, None]
    same = resample_sums(data, 300, seed=5), resample_sums(data, 300, seed=5)
    assert np.array_equal(*same)
    assert not np.array_equal(same[0], resample_sums(data, 300, seed=6))


def test_mean_ci_brackets_the_mean_of_a_known_sample() -> None:
    values = np.array([0.0, 1.0] * 200)
    ci = bootstrap_ci(values, lambda sums: mean_statistic(sums, len(values)), seed=1)
    assert ci is not None
    lo, hi = ci
    # Standard error of the mean is 0.5 / sqrt(400) = 0.025; the 95% CI is about +-0.049.
    assert 0.44 < lo < 0.47 and 0.53 < hi < 0.56


def test_ci_is_the_percentile_interval_of_the_seeded_resamples() -> None:
    values = np.random.default_rng(9).normal(size=40)  # continuous: every resample mean differs

    def expected(seed: int, n_resamples: int, confidence: float) -> tuple[float, float]:
        means = mean_statistic(resample_sums(values[:, None], n_resamples, seed), len(values))
        alpha = (1 - confidence) / 2
        lo, hi = np.quantile(means, [alpha, 1 - alpha])
        return float(lo), float(hi)

    def stat(sums: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return mean_statistic(sums, len(values))

    assert bootstrap_ci(values, stat) == expected(0, 2000, 0.95)  # the defaults
    assert bootstrap_ci(values, stat, seed=4, n_resamples=300, confidence=0.8) == expected(4, 300, 0.8)
    assert bootstrap_ci(values[:2], stat) is not None  # two instances are enough
    assert bootstrap_ci(values[:1], stat) is None


def test_resample_sums_equal_a_plain_gather_of_the_same_draws() -> None:
    data = np.random.default_rng(1).normal(size=(9, 2))
    rng = np.random.default_rng(5)
    expected = []
    for start in range(0, 300, RESAMPLE_BLOCK):  # blocks of 128 draws, the last one partial
        rows = rng.integers(0, 9, size=(min(RESAMPLE_BLOCK, 300 - start), 9))
        expected.append(data[rows].sum(axis=1))
    assert resample_sums(data, 300, seed=5) == pytest.approx(np.concatenate(expected))


def test_mean_with_ci_names_its_mean_and_brackets_it() -> None:
    block = mean_with_ci([0.0, 1.0, 1.0, 1.0], seed=3)
    assert block["mean"] == 0.75 and block["n"] == 4
    low, high = block["ci"]
    assert 0.0 <= low <= 0.75 <= high <= 1.0
    assert mean_with_ci([1.0, 0.0], seed=3, key="accuracy")["accuracy"] == 0.5
    assert mean_with_ci([], seed=3, key="accuracy") == {"accuracy": None, "ci": None, "n": 0}
