"""Run identities are pinned: a port of a benchmark onto the shared lifecycle must keep the hash of
each config's identity (it names the run directory, and the finished-run check and resume compare it),
so run directories made before the port keep resuming. The values were computed with the code before
the port (hicupid/run.py: hicupid_identity, benchpres/run.py: benchpres_identity)."""

from __future__ import annotations

from typing import Any

import pytest

from personalign import registry
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.runs.manifest import identity_hash

SUBJECT, JUDGE = "openai/gpt-4o-mini", "openai/gpt-4o"

CASES: list[tuple[str, Any, str, int, str]] = [
    (
        "cupid",
        CupidConfig(subject=SUBJECT, decomposer=JUDGE, matcher=JUDGE, judge=JUDGE),
        "fixture:cupid",
        0,
        "7624a9dcec2457a5",
    ),
    ("hicupid", HiCupidConfig(subject=SUBJECT, judge=JUDGE), "fixture:hicupid", 42, "ccced452eb23fc2c"),
    (
        "hicupid",
        HiCupidConfig(subject=SUBJECT, judge=JUDGE, context="dense-utterance-5", shots=1),
        "fixture:hicupid",
        42,
        "6bdca89a86b625a6",
    ),
    (
        "hicupid",
        HiCupidConfig.for_protocol("paper", subject=SUBJECT, judge=JUDGE),
        "hf:hicupid",
        42,
        "284bdb725e257e54",
    ),
    (
        "benchpres",
        BenchPresConfig(subject=SUBJECT, judge=JUDGE, completeness_judge=JUDGE),
        "fixture:benchpres",
        0,
        "4c70aaf2117fbab4",
    ),
    (
        "benchpres",
        BenchPresConfig(
            subject="openai/o3-mini?reasoning_effort=high",
            judge=JUDGE,
            completeness_judge=JUDGE,
            context="memory",
            memory_judge=SUBJECT,
        ),
        "fixture:benchpres",
        0,
        "9ab48e903ffdc6ce",
    ),
]


@pytest.mark.parametrize(("name", "config", "source", "seed", "expected"), CASES)
def test_identity_hash_is_pinned(name: str, config: Any, source: str, seed: int, expected: str) -> None:
    identity = registry.get(name).identity(config, source, "abc", seed)
    assert identity_hash(identity) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cupid", {"limit": None, "instance_types": []}),
        ("hicupid", {"limit": None, "splits": ["test_1", "test_2"], "types": [], "users": []}),
        ("benchpres", {"limit": None}),
    ],
)
def test_default_selection_record_is_as_before(name: str, expected: dict[str, Any]) -> None:
    """The selection a finished run's summary is compared with (finished-run check) keeps its keys."""
    from personalign.runs.spec import Selection, selection_defaults

    assert Selection(None, selection_defaults(registry.get(name), {})).to_record() == expected
