"""The plug-in contract, for every registered benchmark: its fixture runs on the scripted model
through the CLI (run, resume after a kill, rescore, report, validate), with no per-benchmark code
here; and a benchmark from outside the package, registered through an entry point, runs end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign import registry
from personalign.cli import app
from personalign.runs.store import RunDir

runner = CliRunner()


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _run_args(name: str, run_dir: Path, cache: Path) -> list[str]:
    return [
        "run",
        name,
        "--model",
        "scripted/subject",
        "--judge",
        "scripted/judge",
        "--limit",
        "3",
        "--run-dir",
        str(run_dir),
        "--cache",
        str(cache),
        "--no-progress",
    ]


def _kill(run_dir: Path, keep: int) -> None:
    """What a run killed mid-way leaves: the first `keep` records, half a line, no summary."""
    samples = RunDir(run_dir).samples_path
    lines = samples.read_text(encoding="utf-8").splitlines(keepends=True)
    samples.write_text("".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2], encoding="utf-8")
    RunDir(run_dir).summary_path.unlink()


def _contract(name: str, tmp_path: Path) -> None:
    run_dir, cache = tmp_path / "run", tmp_path / "calls.sqlite"
    args = _run_args(name, run_dir, cache)
    _invoke(*args)
    first = RunDir(run_dir)
    records = first.records()
    summary = first.read_summary()
    assert summary is not None and summary["status"] == "complete" and summary["benchmark"] == name
    assert first.read_manifest()["identity_hash"]
    assert len(records) >= 2

    _kill(run_dir, keep=1)
    with pytest.warns(UserWarning, match="truncated last line"):
        assert len(first.records()) == 1
    _invoke(*args)  # resumes: the saved record is kept, the others run again
    resumed = first.records()
    assert resumed.keys() == records.keys()
    kept = next(iter(records))
    assert resumed[kept] == records[kept]
    assert first.read_summary()["status"] == "complete"  # type: ignore[index]

    rescored = tmp_path / "rescored"
    _invoke("rescore", str(run_dir), "--judge", "scripted/other", "--run-dir", str(rescored), "--no-progress")
    manifest = RunDir(rescored).read_manifest()
    assert manifest["benchmark"] == name and manifest["rescored_from"]["run_dir"] == str(run_dir)
    assert RunDir(rescored).records().keys() == records.keys()

    out = tmp_path / "report"
    _invoke("report", str(run_dir), str(rescored), "--out", str(out))
    assert any(out.iterdir())

    counts = json.loads(_invoke("validate", "fixture", "--benchmark", name))
    assert counts["source"]


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_benchmark_keeps_the_contract(name: str, tmp_path: Path) -> None:
    _contract(name, tmp_path)


@pytest.fixture
def tiny_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An installed distribution declaring `tiny` in the personalign.benchmarks entry point group."""
    dist = tmp_path / "site" / "tinybench-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinybench\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\ntiny = tests.support.tiny_benchmark:SPEC\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    registry.get.cache_clear()
    yield
    registry.get.cache_clear()


def test_a_benchmark_from_outside_the_package_runs_end_to_end(tiny_entry_point: None, tmp_path: Path) -> None:
    assert "tiny" in registry.names()
    assert "tiny" in _invoke("run", "--help")
    _contract("tiny", tmp_path)
    output = _invoke("run", "tiny", "--help")
    assert "--style" in output and "--only" in output


def test_an_outside_benchmark_plugs_into_every_registry_driven_command(
    tiny_entry_point: None, tmp_path: Path
) -> None:
    """report --html, memory-eval, protocol show and agree find an installed benchmark's hooks
    through the registry: no command names a benchmark."""
    run_dir, cache = tmp_path / "run", tmp_path / "calls.sqlite"
    _invoke(*_run_args("tiny", run_dir, cache))
    rescored = tmp_path / "rescored"
    _invoke("rescore", str(run_dir), "--judge", "scripted/other", "--run-dir", str(rescored), "--no-progress")

    page = tmp_path / "page.html"
    _invoke("report", str(run_dir), str(rescored), "--out", str(tmp_path / "report"), "--html", str(page))
    assert "tiny section over 2 run(s)" in page.read_text(encoding="utf-8")

    out = tmp_path / "eval.json"
    table = _invoke("memory-eval", "--format", "tiny", "--k", "3", "--embedder", "hash", "--out", str(out))
    assert "| tiny | k 3 | hash | 4 questions |" in table
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["summary"]["data"]["source"] == "fixture:tiny" and len(written["instances"]) == 4

    shown = _invoke("protocol", "show", "tiny", "--instance", "q2", "--tone", "dry", "--setting", "judge")
    assert shown.strip() == "[personalign; dry; judge] Name a colour of the sky."
    assert "tiny" in _invoke("protocol", "show", "--help")

    agreed = json.loads(_invoke("agree", str(run_dir), str(rescored)))
    assert agreed["benchmark"] == "tiny" and agreed["groups"]["tiny/judge"]["n"] == 3


def test_a_benchmark_without_the_hooks_gets_clear_errors(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _invoke(*_run_args("benchpres", run_dir, tmp_path / "calls.sqlite"))
    result = runner.invoke(app, ["agree", str(run_dir), str(run_dir)])
    assert result.exit_code == 2 and "agreement is not defined for 'benchpres' runs" in result.output
    result = runner.invoke(app, ["memory-eval", "--format", "benchpres"])
    assert result.exit_code == 2 and "benchmarks with a memory evaluation: cupid, hicupid" in result.output
    result = runner.invoke(app, ["protocol", "show", "benchpres", "--instance", "x"])
    assert result.exit_code == 2 and "No such command 'benchpres'" in result.output
