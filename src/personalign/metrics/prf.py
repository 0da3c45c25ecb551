"""CUPID's checklist precision / recall / F1, pooled (micro) over instances as in the original.

precision = sum of match scores of inferred-checklist items against the gold preference
            / number of inferred-checklist items, summed over instances;
recall    = sum of match scores of gold-checklist items against the inferred preference
            / number of gold-checklist items, summed over instances;
F1 = 2PR / (P + R); a ratio with a zero denominator is 0. Over no instances at all, nothing was
measured: P, R and F1 are None (reports print "n/a", JSON null), never a measured 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from personalign.metrics.bootstrap import FloatArray, resample_sums


@dataclass(frozen=True)
class MatchCounts:
    """One instance's matching outcome."""

    n_pred: int
    matched_pred: float
    n_gold: int
    matched_gold: float


@dataclass(frozen=True)
class PRF:
    precision: float | None  # None: no instance was scored
    recall: float | None
    f1: float | None
    n_instances: int
    n_pred: int
    matched_pred: float
    n_gold: int
    matched_gold: float
    precision_ci: tuple[float, float] | None = None
    recall_ci: tuple[float, float] | None = None
    f1_ci: tuple[float, float] | None = None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def f1_score(precision: float, recall: float) -> float:
    return _ratio(2 * precision * recall, precision + recall)


def instance_prf(c: MatchCounts) -> PRF:
    return pooled_prf([c], ci=False)


def _pooled_columns(sums: FloatArray) -> FloatArray:
    # sums: (resamples, 4) with columns n_pred, matched_pred, n_gold, matched_gold
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(sums[:, 0] > 0, sums[:, 1] / sums[:, 0], 0.0)
        r = np.where(sums[:, 2] > 0, sums[:, 3] / sums[:, 2], 0.0)
        f = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
    result: FloatArray = np.stack([p, r, f], axis=-1)
    return result


def pooled_prf(
    counts: Sequence[MatchCounts], *, ci: bool = True, seed: int = 0, n_resamples: int = 2000
) -> PRF:
    """Pooled P/R/F1 over `counts`, with percentile bootstrap 95% CIs over instances (None over none)."""
    if not counts:
        return PRF(None, None, None, 0, 0, 0.0, 0, 0.0)
    n_pred = sum(c.n_pred for c in counts)
    n_gold = sum(c.n_gold for c in counts)
    matched_pred = sum(c.matched_pred for c in counts)
    matched_gold = sum(c.matched_gold for c in counts)
    precision = _ratio(matched_pred, n_pred)
    recall = _ratio(matched_gold, n_gold)
    cis: list[tuple[float, float] | None] = [None, None, None]
    if ci and len(counts) >= 2:
        table = np.array([[c.n_pred, c.matched_pred, c.n_gold, c.matched_gold] for c in counts], dtype=float)
        prf = _pooled_columns(resample_sums(table, n_resamples, seed))
        for k in range(3):
            lo, hi = np.quantile(prf[:, k], [0.025, 0.975])
            cis[k] = (float(lo), float(hi))
    return PRF(
        precision=precision,
        recall=recall,
        f1=f1_score(precision, recall),
        n_instances=len(counts),
        n_pred=n_pred,
        matched_pred=matched_pred,
        n_gold=n_gold,
        matched_gold=matched_gold,
        precision_ci=cis[0],
        recall_ci=cis[1],
        f1_ci=cis[2],
    )
