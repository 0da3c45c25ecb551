"""BenchPreS metrics: Misapplication Rate (MR), Appropriate Application Rate (AAR), selectivity.

For attribute judgements (response, preference a, gold label g, judged applied z):
    MR  = #(g = suppress and z = applied) / #(g = suppress)
    AAR = #(g = apply    and z = applied) / #(g = apply)
pooled over every (profile, context, attribute) of one sample run (official denominators:
1,287 suppress and 663 apply per run), then averaged over the sample runs.
Selectivity = harmonic mean of AAR and 1 - MR (1 is ideal: applies everything appropriate and
nothing inappropriate). Judgements that errored are left out and counted, never scored.

Bootstrap CIs resample (profile, context) rows with all their samples and attributes, and
recompute the sample-averaged statistics on each resample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from personalign.metrics.bootstrap import FloatArray, resample_sums


@dataclass(frozen=True)
class Judgement:
    """One (response, preference attribute) decision."""

    row_id: str
    sample: int
    domain: str
    category: str
    label: bool  # gold: True = apply, False = suppress
    applied: bool


@dataclass(frozen=True)
class SelectivityScores:
    mr: float | None
    aar: float | None
    selectivity: float | None
    gap: float | None  # AAR - MR
    n_suppress: int  # judgements with a suppress label, over all samples
    n_apply: int
    n_rows: int
    n_samples: int
    per_sample: list[dict[str, Any]]
    mr_ci: tuple[float, float] | None = None
    aar_ci: tuple[float, float] | None = None
    selectivity_ci: tuple[float, float] | None = None

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def harmonic_selectivity(mr: float | None, aar: float | None) -> float | None:
    """Harmonic mean of AAR and 1 - MR; None when either is undefined."""
    if mr is None or aar is None:
        return None
    keep = 1.0 - mr
    return 2 * aar * keep / (aar + keep) if aar + keep > 0 else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def per_sample_rates(judgements: Iterable[Judgement]) -> dict[int, dict[str, Any]]:
    """Pooled MR and AAR of each sample run."""
    counts: dict[int, list[int]] = {}
    for j in judgements:
        c = counts.setdefault(j.sample, [0, 0, 0, 0])  # suppress applied, suppress, apply applied, apply
        if j.label:
            c[2] += int(j.applied)
            c[3] += 1
        else:
            c[0] += int(j.applied)
            c[1] += 1
    return {
        k: {
            "sample": k,
            "mr": _ratio(c[0], c[1]),
            "aar": _ratio(c[2], c[3]),
            "misapplied": c[0],
            "n_suppress": c[1],
            "applied": c[2],
            "n_apply": c[3],
        }
        for k, c in sorted(counts.items())
    }


def _table(judgements: Sequence[Judgement], samples: list[int]) -> tuple[list[str], FloatArray]:
    """Rows x (4 * samples) counts: per sample, suppress-applied, suppress, apply-applied, apply."""
    rows = sorted({j.row_id for j in judgements})
    index = {r: i for i, r in enumerate(rows)}
    column = {s: 4 * k for k, s in enumerate(samples)}
    table = np.zeros((len(rows), 4 * len(samples)), dtype=np.float64)
    for j in judgements:
        base = column[j.sample] + (2 if j.label else 0)
        table[index[j.row_id], base] += float(j.applied)
        table[index[j.row_id], base + 1] += 1.0
    return rows, table


def _stats_from_sums(sums: FloatArray, n_samples: int) -> FloatArray:
    """(resamples, 4 * samples) sums -> (resamples, 3): mean MR, mean AAR, selectivity (NaN if undefined)."""
    s = sums.reshape(sums.shape[0], n_samples, 4)
    with np.errstate(divide="ignore", invalid="ignore"):
        mr = np.where(s[:, :, 1] > 0, s[:, :, 0] / s[:, :, 1], np.nan)
        aar = np.where(s[:, :, 3] > 0, s[:, :, 2] / s[:, :, 3], np.nan)
        mr_mean = np.nanmean(mr, axis=1) if np.isfinite(mr).any() else np.full(s.shape[0], np.nan)
        aar_mean = np.nanmean(aar, axis=1) if np.isfinite(aar).any() else np.full(s.shape[0], np.nan)
        keep = 1.0 - mr_mean
        sel = np.where(aar_mean + keep > 0, 2 * aar_mean * keep / (aar_mean + keep), 0.0)
    result: FloatArray = np.stack([mr_mean, aar_mean, sel], axis=-1)
    return result


def _ci(values: FloatArray) -> tuple[float, float] | None:
    finite = values[np.isfinite(values)]
    if finite.size < len(values) * 0.5 or finite.size == 0:
        return None
    lo, hi = np.quantile(finite, [0.025, 0.975])
    return float(lo), float(hi)


def selectivity_scores(
    judgements: Iterable[Judgement], *, ci: bool = True, seed: int = 0, n_resamples: int = 2000
) -> SelectivityScores:
    """MR, AAR and selectivity averaged over samples, with bootstrap CIs over rows."""
    items = list(judgements)
    rates = per_sample_rates(items)
    mr = _mean([r["mr"] for r in rates.values()])
    aar = _mean([r["aar"] for r in rates.values()])
    rows = {j.row_id for j in items}
    cis: list[tuple[float, float] | None] = [None, None, None]
    if ci and len(rows) >= 2:
        import warnings

        samples = sorted(rates)
        _, table = _table(items, samples)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices where a label is absent
            stats = _stats_from_sums(resample_sums(table, n_resamples, seed), len(samples))
        cis = [_ci(stats[:, k]) if value is not None else None for k, value in enumerate((mr, aar, aar))]
        if mr is None or aar is None:
            cis[2] = None
    return SelectivityScores(
        mr=mr,
        aar=aar,
        selectivity=harmonic_selectivity(mr, aar),
        gap=None if mr is None or aar is None else aar - mr,
        n_suppress=sum(r["n_suppress"] for r in rates.values()),
        n_apply=sum(r["n_apply"] for r in rates.values()),
        n_rows=len(rows),
        n_samples=len(rates),
        per_sample=list(rates.values()),
        mr_ci=cis[0],
        aar_ci=cis[1],
        selectivity_ci=cis[2],
    )


def breakdown(
    judgements: Iterable[Judgement], key: Callable[[Judgement], str], *, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """`selectivity_scores` for each group of judgements, keyed by `key` (domain, category...)."""
    groups: dict[str, list[Judgement]] = {}
    for j in judgements:
        groups.setdefault(key(j), []).append(j)
    return {name: selectivity_scores(group, seed=seed).to_record() for name, group in sorted(groups.items())}
