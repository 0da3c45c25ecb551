"""The toy benchmark's metrics: a pure function of the records (same records, same summary)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from personalign.metrics.bootstrap import bootstrap_ci, mean_statistic
from personalign.runs.records import InstanceRecord


def _accuracy(values: list[bool], seed: int) -> dict[str, Any]:
    """Mean with a 95% percentile bootstrap CI; `null` mean over no item (nothing was measured)."""
    if not values:
        return {"accuracy": None, "ci": None, "n": 0}
    column = np.asarray(values, dtype=np.float64)
    ci = bootstrap_ci(column, lambda sums: mean_statistic(sums, len(values)), seed=seed)
    return {"accuracy": float(column.mean()), "ci": list(ci) if ci else None, "n": len(values)}


def summarize(records: Iterable[InstanceRecord], seed: int = 0) -> dict[str, Any]:
    """Accuracy (exact match and judged), overall and per kind; errored items are counted, not scored.

    `n_instances` is required by the run lifecycle (a finished re-run returns it without loading).
    """
    records = list(records)
    ok = [r for r in records if r.status == "ok"]
    errors = {
        r.instance_id: r.results["answer"].error if "answer" in r.results else "no result"
        for r in records
        if r.status != "ok"
    }
    kinds = sorted({str(r.meta.get("kind")) for r in ok})
    out: dict[str, Any] = {
        "n_instances": len(records),
        "n_scored": len(ok),
        "n_errors": len(errors),
        "errors": errors,
    }
    for metric in ("exact", "judged"):
        out[metric] = {
            "all": _accuracy([bool(r.results["answer"].scores[metric]) for r in ok], seed),
            "by_kind": {
                kind: _accuracy(
                    [bool(r.results["answer"].scores[metric]) for r in ok if r.meta.get("kind") == kind], seed
                )
                for kind in kinds
            },
        }
    return out
