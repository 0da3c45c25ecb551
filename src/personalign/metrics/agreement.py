"""Agreement between two raters over the same items: raw agreement and Cohen's kappa."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    n: int
    agreement: float | None  # fraction of items with the same label
    kappa: float | None  # None when undefined (no items, or both raters constant on one label)

    def to_record(self) -> dict[str, float | int | None]:
        return {"n": self.n, "agreement": self.agreement, "kappa": self.kappa}


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> Agreement:
    """Cohen's kappa = (p_o - p_e) / (1 - p_e), with p_e from each rater's own label frequencies."""
    if len(a) != len(b):
        raise ValueError(f"rater label lists differ in length ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        return Agreement(0, None, None)
    observed = sum(1 for x, y in zip(a, b, strict=True) if x == y) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[label] * count_b.get(label, 0) for label in count_a) / (n * n)
    if expected >= 1.0:
        return Agreement(n, observed, None)
    return Agreement(n, observed, (observed - expected) / (1 - expected))
