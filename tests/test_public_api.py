"""The public API (`import personalign`): run, rescore, load results, the registry and the memory
engine, end to end on the scripted model, and a cheap `import personalign`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import personalign
from personalign.cli import app
from personalign.errors import ConfigError


def test_import_personalign_loads_no_benchmark_model_or_run_module() -> None:
    code = (
        "import sys, personalign\n"
        "print(sorted(m for m in sys.modules if m.startswith('personalign')))\n"
        "assert 'importlib.metadata' not in sys.modules, 'the version is read on first use only'\n"
        "assert personalign.__version__ and 'importlib.metadata' in sys.modules\n"
        "names = personalign.list_benchmarks()\n"
        "print(names[0], sorted(m for m in sys.modules if m.startswith('personalign.bench')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.splitlines()
    assert first == "['personalign']"  # nothing else until a name is used
    assert second == "cupid []"  # listing benchmarks imports none of them


def test_every_public_name_resolves() -> None:
    for name in personalign.__all__:
        assert getattr(personalign, name) is not None, name
    assert set(personalign.__all__) <= set(dir(personalign))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = personalign.nope  # type: ignore[attr-defined]


def test_no_public_name_is_shadowed_by_a_subpackage() -> None:
    # Importing a subpackage sets it as an attribute of `personalign`: a public function of the same
    # name (e.g. `benchmarks`) would turn into the module once any benchmark was loaded.
    code = (
        "import types, personalign, personalign.benchmarks.cupid.spec, personalign.memory\n"
        "print(sorted(n for n in personalign.__all__ if n != 'registry' "
        "and isinstance(getattr(personalign, n), types.ModuleType)))\n"
        "print(personalign.list_benchmarks()[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "cupid"]


def test_run_load_and_rescore_end_to_end(tmp_path: Path) -> None:
    cache = tmp_path / "c.sqlite"
    result = personalign.run(
        "cupid",
        model="scripted/s",
        judge="scripted/j",
        limit=3,
        task="both",
        instance_types=["consistent", "changing"],
        runs_root=tmp_path / "runs",
        cache=cache,
    )
    assert result.outcome.status == "complete" and result.outcome.evaluated == 3
    path = result.run_dir.path
    assert path.parent == tmp_path / "runs" / "cupid"

    run = personalign.load_run(path)
    assert isinstance(run.manifest, personalign.RunManifest)
    assert run.summary is not None and run.summary.status == "complete"
    assert run.manifest.selection == {"limit": 3, "instance_types": ["consistent", "changing"]}
    assert run.manifest.config is not None and run.manifest.config["task"] == "both"
    assert {r.meta["instance_type"] for r in run.records.values()} <= {"consistent", "changing"}
    assert "generation" in run.summary.metrics

    # the same call again returns the finished run without any call
    again = personalign.run(
        "cupid",
        model="scripted/s",
        judge="scripted/j",
        limit=3,
        task="both",
        instance_types=["consistent", "changing"],
        runs_root=tmp_path / "runs",
        cache=tmp_path / "other.sqlite",
    )
    assert again.run_dir.path == path and again.outcome.evaluated == 0

    rescored = personalign.rescore(path, judge="scripted/k", cache=cache)
    assert rescored.outcome.status == "complete" and rescored.run_dir.path != path
    new = personalign.load_run(rescored.run_dir.path)
    assert new.manifest.rescored_from is not None and new.manifest.rescored_from.run_dir == str(path)
    assert new.manifest.models is not None and new.manifest.models["judge"]["spec"] == "scripted/k"
    calls = new.summary.usage["per_model"] if new.summary and new.summary.usage else {}
    assert "scripted/s" not in calls or calls["scripted/s"]["calls"] == 0  # subject outputs reused
    assert calls["scripted/k"]["calls"] > 0


def test_the_api_and_the_cli_make_the_same_run(tmp_path: Path) -> None:
    api = personalign.run(
        "cupid", model="scripted/s", judge="scripted/j", limit=2, run_dir=tmp_path / "a", cache=tmp_path / "c"
    )
    args = ["run", "cupid", "-m", "scripted/s", "-j", "scripted/j", "--limit", "2", "--no-progress",
            "--run-dir", str(tmp_path / "b"), "--cache", str(tmp_path / "c")]  # fmt: skip
    cli = CliRunner().invoke(app, args)
    assert cli.exit_code == 0, cli.output
    a = json.loads((api.run_dir.path / "manifest.json").read_text())
    b = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert a["identity_hash"] == b["identity_hash"] and a["selection"] == b["selection"]
    assert a["config"] == b["config"]


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown benchmark 'nope'"):
        personalign.run("nope")
    with pytest.raises(ConfigError, match="--judge is required"):
        personalign.run("cupid", model="scripted/s")
    with pytest.raises(ConfigError, match=r"cupid has no option 'tsak' \(its options: .*task"):
        personalign.run("cupid", model="scripted/s", judge="scripted/j", tsak="both")
    with pytest.raises(ConfigError, match=r"no model role 'critic'"):
        personalign.run("cupid", model="scripted/s", judge="scripted/j", models={"critic": "scripted/c"})
    run = personalign.run(
        "cupid", model="scripted/s", judge="scripted/j", limit=1, run_dir=tmp_path / "r", cache=tmp_path / "c"
    )
    with pytest.raises(ConfigError, match="rescore cannot replace subject"):
        personalign.rescore(run.run_dir.path, models={"subject": "scripted/x"})
    with pytest.raises(ConfigError, match=r"no rescore option 'task'"):
        personalign.rescore(run.run_dir.path, judge="scripted/k", task="generation")


def test_memory_engine_from_the_public_api(tmp_path: Path) -> None:
    engine = personalign.MemoryEngine(tmp_path / "m.sqlite", embedder=None)
    try:
        engine.add_user("ana")
        engine.add_session(
            "ana",
            [
                {"role": "user", "content": "Please keep my weekly updates to three bullet points."},
                {"role": "assistant", "content": "Understood: three bullets each week."},
            ],
        )
        found = engine.retrieve("ana", "Draft my weekly update in bullet points")
        assert found.sessions and "three bullet points" in found.sessions[0].text
    finally:
        engine.close()
