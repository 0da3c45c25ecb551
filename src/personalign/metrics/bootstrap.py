"""Percentile bootstrap confidence intervals over instances."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def bootstrap_ci(
    columns: FloatArray,
    statistic: Callable[[FloatArray], FloatArray],
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """CI of `statistic` by resampling rows of `columns` (shape: instances x k) with replacement.

    `statistic` maps the resamples' column sums, shape (resamples, k), to shape (resamples,);
    every statistic here (means, pooled ratios) is a function of sums. Returns None when there
    are fewer than 2 instances.
    """
    data = np.asarray(columns, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    n = data.shape[0]
    if n < 2:
        return None
    values = statistic(resample_sums(data, n_resamples, seed))
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)


RESAMPLE_BLOCK = 128  # resamples drawn at a time: keeps the count matrix small and cache-warm


def resample_sums(data: FloatArray, n_resamples: int, seed: int) -> FloatArray:
    """Column sums of `n_resamples` bootstrap resamples of the rows of `data`: (resamples, k).

    Each resample draws n row indices uniformly with replacement; a block of resamples is
    tallied into row counts with one `bincount`, so its sums are one matrix product instead
    of a (resamples x rows x k) gather. (Drawing the counts with `multinomial` gives the same
    distribution but takes ~9x longer: 90 ms instead of 10 ms for 756 rows.)
    """
    n, k = data.shape
    rng = np.random.default_rng(seed)
    sums: FloatArray = np.empty((n_resamples, k), dtype=np.float64)
    for start in range(0, n_resamples, RESAMPLE_BLOCK):
        size = min(RESAMPLE_BLOCK, n_resamples - start)
        rows = rng.integers(0, n, size=(size, n), dtype=np.int64)
        rows += np.arange(size, dtype=np.int64)[:, None] * n  # row i of resample r -> slot r * n + i
        counts = np.bincount(rows.ravel(), minlength=size * n).reshape(size, n)
        sums[start : start + size] = counts.astype(np.float64) @ data
    return sums


def mean_statistic(sums: FloatArray, n: int) -> FloatArray:
    result: FloatArray = sums[:, 0] / n
    return result


def mean_with_ci(values: Sequence[float], seed: int, key: str = "mean") -> dict[str, Any]:
    """`{key: mean, "ci": bootstrap 95% CI over the values, "n": count}`; mean and CI are None
    when there are no values (nothing scored is not a zero)."""
    if not values:
        return {key: None, "ci": None, "n": 0}
    n = len(values)
    ci = bootstrap_ci(np.array(values, dtype=float), lambda sums: mean_statistic(sums, n), seed=seed)
    return {key: float(np.mean(values)), "ci": ci, "n": n}
