"""Percentile bootstrap confidence intervals over instances."""

from __future__ import annotations

from collections.abc import Callable

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


def resample_sums(data: FloatArray, n_resamples: int, seed: int) -> FloatArray:
    """Column sums of `n_resamples` bootstrap resamples of the rows of `data`: (resamples, k).

    Each resample is drawn as multinomial row counts, so the sums are one matrix product
    instead of a (resamples x rows x k) gather.
    """
    n = data.shape[0]
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    sums: FloatArray = counts.astype(np.float64) @ data
    return sums


def mean_statistic(sums: FloatArray, n: int) -> FloatArray:
    result: FloatArray = sums[:, 0] / n
    return result
