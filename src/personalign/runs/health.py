"""How the model steps of a run went, per step: errors, truncated and empty replies, re-asks.

A number is only as good as the replies behind it, so every summary carries these counts next to
its metrics, and a judge whose replies are cut off too often gets a warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from personalign.runs.records import InstanceRecord

# Above this share of truncated replies a judging step gets a warning in the summary.
TRUNCATION_WARNING_RATE = 0.01
JUDGING_ROLES = ("judge", "matcher", "decomposer")
_NUMBERED = re.compile(r"/\d+$")
COUNTS = (
    "steps",
    "errors",
    "truncated",
    "truncated_replies",
    "empty",
    "reasked",
    "refreshed",
    "no_finish_reason",
)


def step_health(records: Iterable[InstanceRecord]) -> dict[str, dict[str, Any]]:
    """Counts per step name (numbered steps such as ``summary/3`` pooled as ``summary``).

    `truncated` counts steps whose final reply was cut off at the token limit (scored under the
    paper protocol, an error under personalign's); `truncated_replies` counts every cut-off reply,
    re-asks and refreshed cache entries included. Steps decided without a model call are left out.
    """
    health: dict[str, dict[str, Any]] = {}
    for record in records:
        for name, step in record.steps.items():
            if step.model is None:
                continue
            counts = health.setdefault(
                _NUMBERED.sub("", name), {"role": step.role, **dict.fromkeys(COUNTS, 0)}
            )
            last = step.finish_reasons[-1] if step.finish_reasons else None
            counts["steps"] += 1
            counts["errors"] += step.status == "error"
            counts["truncated"] += last == "length"
            counts["truncated_replies"] += step.finish_reasons.count("length")
            counts["empty"] += "empty" in step.flags
            counts["reasked"] += "reask" in step.flags
            counts["refreshed"] += "refreshed" in step.flags
            counts["no_finish_reason"] += bool(step.raw) and last is None
    return health


def health_warnings(health: dict[str, dict[str, Any]]) -> list[str]:
    """Warnings for judging steps whose replies were truncated more than 1% of the time."""
    warnings = []
    for name, counts in sorted(health.items()):
        replies = counts["steps"] + counts["reasked"] + counts["refreshed"]
        rate = counts["truncated_replies"] / replies if replies else 0.0
        if counts["role"] in JUDGING_ROLES and rate > TRUNCATION_WARNING_RATE:
            warnings.append(
                f"{name}: {counts['truncated_replies']} of {replies} {counts['role']} replies "
                f"({rate:.1%}) were cut off at the token limit; raise the {counts['role']}'s max tokens"
            )
    return warnings


def health_section(records: Iterable[InstanceRecord]) -> dict[str, Any]:
    """The summary's ``steps`` and ``warnings`` entries."""
    health = step_health(records)
    return {"steps": health, "warnings": health_warnings(health)}
