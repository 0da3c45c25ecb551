"""PrefEval metrics: preference-following accuracy from the four checks, MCQ accuracy, breakdowns.

The official combination (``get_preference_following_accuracy_generation_task.py``):
    acknowledged  = acknowledge check says Yes
    hallucinated  = acknowledged and hallucination check says Yes
    violated      = violation check says Yes
    unhelpful     = helpful check says No
    inconsistent  = acknowledged and not hallucinated and violated and not unhelpful
    hallucinated_violation = acknowledged and hallucinated and violated and not unhelpful
    unaware_violation      = not acknowledged and violated and not unhelpful
    followed = none of (inconsistent, hallucinated_violation, unaware_violation, unhelpful)
which reduces to: followed = helpful and not violated. The error types are reported as rates.
Instances whose checks errored are left out and counted, never scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from personalign.metrics.bootstrap import mean_with_ci

ERROR_TYPES = ("unhelpful", "inconsistent", "hallucinated_violation", "unaware_violation")


@dataclass(frozen=True)
class Outcome:
    """The combined result of the four checks on one response."""

    acknowledged: bool
    hallucinated: bool
    violated: bool
    unhelpful: bool
    inconsistent: bool
    hallucinated_violation: bool
    unaware_violation: bool
    followed: bool

    def to_record(self) -> dict[str, bool]:
        return asdict(self)


def combine(acknowledge: bool, hallucination: bool | None, violation: bool, helpful: bool) -> Outcome:
    """The official combination of the four Yes/No answers (True = Yes). ``hallucination`` may be
    None when the response acknowledged no preference (the check only counts when it did)."""
    acknowledged = acknowledge
    hallucinated = acknowledged and bool(hallucination)
    violated = violation
    unhelpful = not helpful
    inconsistent = acknowledged and not hallucinated and violated and not unhelpful
    hallucinated_violation = acknowledged and hallucinated and violated and not unhelpful
    unaware_violation = not acknowledged and violated and not unhelpful
    followed = not any([inconsistent, hallucinated_violation, unaware_violation, unhelpful])
    return Outcome(
        acknowledged,
        hallucinated,
        violated,
        unhelpful,
        inconsistent,
        hallucinated_violation,
        unaware_violation,
        followed,
    )


@dataclass(frozen=True)
class Scored:
    """One scored instance: its keys for breakdowns and its 0/1 score."""

    topic: str
    form: str
    turns: int
    correct: bool
    errors: Mapping[str, bool] | None = None  # generation: the error types


def accuracy(scored: Iterable[Scored], seed: int = 0) -> dict[str, Any]:
    """Accuracy with CI, plus the error-type rates when the instances carry them."""
    items = list(scored)
    out = mean_with_ci([float(s.correct) for s in items], seed, key="accuracy")
    with_errors = [s.errors for s in items if s.errors is not None]
    if with_errors:
        out["error_rates"] = {e: float(np.mean([float(x[e]) for x in with_errors])) for e in ERROR_TYPES}
    return out


def breakdown(scored: Iterable[Scored], key: Callable[[Scored], object], seed: int = 0) -> dict[str, Any]:
    """Accuracy per value of ``key`` (sorted; integers numerically)."""
    groups: dict[object, list[Scored]] = {}
    for s in scored:
        groups.setdefault(key(s), []).append(s)
    return {str(k): accuracy(groups[k], seed) for k in sorted(groups, key=lambda v: (str(type(v)), v))}  # type: ignore[arg-type]
