"""`load_run_summary`: the one loader every benchmark report uses for a run's manifest and summary."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from personalign.errors import ConfigError
from personalign.runs.records import InstanceRecord
from personalign.runs.store import RunDir, load_run_summary, run_seed


def _count(manifest: dict[str, Any], records: Iterable[InstanceRecord]) -> dict[str, Any]:
    return {"n": len(list(records)), "seed": manifest.get("seed")}


def test_finished_run_returns_the_stored_summary(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_manifest({"benchmark": "hicupid", "seed": 3})
    run.write_summary({"status": "complete", "n": 9})
    manifest, summary = load_run_summary(tmp_path, "hicupid", "HiCUPID", _count)
    assert manifest["seed"] == 3
    assert summary == {"status": "complete", "n": 9}


def test_interrupted_run_is_summarized_from_its_records(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_manifest({"benchmark": "cupid", "seed": 7})
    run.append(InstanceRecord(instance_id="a"))
    run.append(InstanceRecord(instance_id="b"))
    _, summary = load_run_summary(tmp_path, "cupid", "CUPID", _count)
    assert summary == {"n": 2, "seed": 7, "status": "interrupted"}


def test_run_of_another_benchmark_is_refused_with_its_path(tmp_path: Path) -> None:
    RunDir(tmp_path).write_manifest({"benchmark": "cupid"})
    with pytest.raises(ConfigError, match=rf"{tmp_path}: not a BenchPreS run"):
        load_run_summary(tmp_path, "benchpres", "BenchPreS", _count)


def test_run_seed_reads_the_manifest_seed_or_zero() -> None:
    assert run_seed({"seed": "42"}) == 42
    assert run_seed({}) == 0
