"""Typed, versioned results: schema_version in new files, old (version 0) run directories read as
before, clear errors for newer or malformed files, load_run, and the committed JSON Schemas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.cli import app
from personalign.errors import ConfigError
from personalign.results import (
    SCHEMA_VERSION,
    InstanceRecord,
    NewerSchemaError,
    RunManifest,
    RunSummary,
    json_schemas,
    load_run,
)
from personalign.runs.store import RunDir

ROOT = Path(__file__).resolve().parent.parent
CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3-instance CUPID run on the scripted model (copied per test before it is changed)."""
    root = tmp_path_factory.mktemp("results")
    settings = RunSettings(run_dir=root / "run", cache_path=root / "c.sqlite", progress=False, limit=3)
    assert run_cupid(CONFIG, settings).outcome.status == "complete"
    return root / "run"


def _copy(run: Path, to: Path) -> Path:
    to.mkdir()
    for name in ("manifest.json", "samples.jsonl", "summary.json"):
        (to / name).write_bytes((run / name).read_bytes())
    return to


def _edit(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def test_new_runs_write_the_current_schema_version(finished: Path) -> None:
    manifest = json.loads((finished / "manifest.json").read_text())
    summary = json.loads((finished / "summary.json").read_text())
    assert SCHEMA_VERSION == 1
    assert manifest["schema_version"] == SCHEMA_VERSION and summary["schema_version"] == SCHEMA_VERSION


def test_load_run_returns_typed_manifest_summary_and_records(finished: Path) -> None:
    run = load_run(finished)
    assert isinstance(run.manifest, RunManifest) and isinstance(run.summary, RunSummary)
    assert run.benchmark == "cupid" and run.manifest.schema_version == 1
    assert run.manifest.models is not None and run.manifest.models["subject"]["spec"] == "scripted/s"
    assert run.manifest.data is not None and run.manifest.data.source == "fixture:cupid_sample.jsonl"
    assert run.summary.status == "complete" and run.summary.n_instances == 3
    # the metrics are the benchmark's own extra fields, kept as stored
    stored = json.loads((finished / "summary.json").read_text())
    assert run.summary.metrics["inference"] == stored["inference"]
    assert "status" not in run.summary.metrics and run.summary.metrics["task"] == "inference"
    assert len(run.records) == 3
    assert all(isinstance(r, InstanceRecord) and r.status == "ok" for r in run.records.values())


def test_a_run_directory_without_schema_version_reads_as_version_0(finished: Path, tmp_path: Path) -> None:
    old = _copy(finished, tmp_path / "old")
    # as written before versioning (and before the protocol field)
    _edit(old / "manifest.json", schema_version=None, protocol=None)
    _edit(old / "summary.json", schema_version=None, protocol=None)
    raw_manifest = json.loads((old / "manifest.json").read_text())
    assert RunDir(old).read_manifest() == raw_manifest  # read as before: the same dict
    run = load_run(old)
    assert run.manifest.schema_version == 0 and run.summary is not None and run.summary.schema_version == 0
    assert run.manifest.protocol is None and run.summary.status == "complete"
    # and the finished-run check still returns it without running anything
    settings = RunSettings(run_dir=old, cache_path=tmp_path / "empty.sqlite", progress=False, limit=3)
    again = run_cupid(CONFIG, settings)
    assert again.outcome.evaluated == 0 and again.summary["status"] == "complete"


def test_a_newer_manifest_is_a_clear_error_saying_how_to_upgrade(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "new")
    _edit(run / "manifest.json", schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(NewerSchemaError) as caught:
        load_run(run)
    message = str(caught.value)
    assert str(run / "manifest.json") in message and "'schema_version'" in message
    assert "pip install -U personalign" in message
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 2 and "pip install -U personalign" in " ".join(result.output.split())


def test_a_newer_summary_is_an_error_not_silently_recomputed(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "new")
    _edit(run / "summary.json", schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(NewerSchemaError, match=r"summary\.json: field 'schema_version' is 2"):
        RunDir(run).read_summary()


def test_a_malformed_manifest_field_is_named(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "bad")
    _edit(run / "manifest.json", identity="not an object")
    with pytest.raises(ConfigError, match=r"manifest\.json: field 'identity' of the run manifest is invalid"):
        RunDir(run).read_manifest()
    _edit(run / "manifest.json", identity={}, data={"sha256": "x"})
    with pytest.raises(ConfigError, match=r"field 'data\.source'"):
        load_run(run)
    _edit(run / "manifest.json", data={"source": "fixture"}, schema_version="1")
    with pytest.raises(ConfigError, match=r"field 'schema_version'"):
        load_run(run)


def test_a_version_1_manifest_missing_a_required_field_names_it(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path / "bad")
    _edit(run / "manifest.json", identity_hash=None)
    with pytest.raises(ConfigError, match=r"required from schema_version 1: identity_hash"):
        load_run(run)


def test_a_malformed_summary_is_ignored_with_a_warning_naming_the_field(
    finished: Path, tmp_path: Path
) -> None:
    run = _copy(finished, tmp_path / "bad")
    _edit(run / "summary.json", status="done")
    with pytest.warns(UserWarning, match=r"summary\.json: field 'status'"):
        assert RunDir(run).read_summary() is None


def test_committed_json_schemas_equal_the_generated_ones() -> None:
    generated = json_schemas()
    assert sorted(generated) == ["manifest.schema.json", "sample.schema.json", "summary.schema.json"]
    for name, schema in generated.items():
        committed = json.loads((ROOT / "docs" / "schema" / name).read_text(encoding="utf-8"))
        assert committed == schema, f"docs/schema/{name} is stale: run python scripts/export_schemas.py"
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_schemas.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_published_schemas_describe_the_current_version() -> None:
    manifest = json_schemas()["manifest.schema.json"]
    assert "identity" in manifest["required"] and manifest["properties"]["identity"]["type"] == "object"
    summary = json_schemas()["summary.schema.json"]
    assert set(summary["properties"]["status"]["enum"]) == {
        "complete",
        "complete_with_errors",
        "stopped_budget",
        "interrupted",
    }
    sample = json_schemas()["sample.schema.json"]
    assert {"instance_id", "steps", "results"} <= set(sample["properties"])
