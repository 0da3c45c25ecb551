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

    `statistic` maps an array of shape (resamples, instances, k) to shape (resamples,), so all
    resamples are computed at once. Returns None when there are fewer than 2 instances.
    """
    data = np.asarray(columns, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    n = data.shape[0]
    if n < 2:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    values = statistic(data[idx])
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)


def mean_statistic(samples: FloatArray) -> FloatArray:
    result: FloatArray = samples[..., 0].mean(axis=-1)
    return result
