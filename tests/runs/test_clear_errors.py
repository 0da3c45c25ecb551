"""Bad run directories, caches and run files: a clear error (exit 2) naming the path, no traceback."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.cli import app
from personalign.errors import ConfigError

runner = CliRunner()
CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


def _run(run_dir: Path | str, cache: Path | str, *extra: str) -> Any:
    args = ["run", "cupid", "-m", "scripted/s", "-j", "scripted/j", "--limit", "2", "--no-progress",
            "--run-dir", str(run_dir), "--cache", str(cache), *extra]  # fmt: skip
    return runner.invoke(app, args)


def _clear(result: Any, *fragments: str) -> None:
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in text, (fragment, text)


def test_run_dir_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("not a directory")
    _clear(_run(target, tmp_path / "c.sqlite"), str(target), "is a file", "--run-dir")


def test_run_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "run"
    _clear(_run(target, tmp_path / "c.sqlite"), str(target), "--run-dir")


def test_run_dir_somewhere_unwritable() -> None:
    _clear(
        _run("/proc/personalign-run", "/tmp/personalign-test-cache.sqlite"),
        "/proc/personalign-run",
        "--run-dir",
    )


def test_full_disk_while_saving_an_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = Path.open

    def full_disk(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == "samples.jsonl" and args and args[0] == "a":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk)
    target = tmp_path / "run"
    _clear(
        _run(target, tmp_path / "c.sqlite"), "No space left on device", str(target / "samples.jsonl"), "free"
    )


def test_full_disk_while_writing_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = Path.open

    def full_disk(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk)
    target = tmp_path / "run"
    _clear(_run(target, tmp_path / "c.sqlite"), "No space left on device", str(target / "manifest.json"))
    assert not target.exists()  # a refused run leaves nothing


def test_cache_that_is_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cachedir"
    folder.mkdir()
    _clear(_run(tmp_path / "run", folder), f"--cache {folder} is a directory")
    assert not (tmp_path / "run").exists()


def test_cache_that_is_not_sqlite(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("these are my notes, not a database\n" * 50)
    _clear(_run(tmp_path / "run", bogus), f"--cache {bogus}", "cannot be used as the call cache")
    assert bogus.read_text().startswith("these are my notes")


def test_corrupt_manifest_is_a_clear_error(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=2
    )
    run_cupid(CONFIG, settings)
    manifest = tmp_path / "run" / "manifest.json"
    manifest.write_text('{"benchmark": "cupid", "identity": ')
    _clear(_run(tmp_path / "run", tmp_path / "c.sqlite"), str(manifest), "corrupt")
    manifest.write_bytes(b"\xff\xfe garbage")
    _clear(_run(tmp_path / "run", tmp_path / "c.sqlite"), str(manifest), "corrupt")
    with pytest.raises(ConfigError, match="corrupt"):
        run_cupid(CONFIG, settings)
    _clear(
        runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "rep")]), str(manifest)
    )


def test_corrupt_summary_is_ignored_with_a_warning_and_recomputed(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=2
    )
    first = run_cupid(CONFIG, settings)
    summary_path = tmp_path / "run" / "summary.json"
    summary_path.write_text('{"status": "complete", "inference": {')
    with pytest.warns(UserWarning, match="summary.json"):
        again = run_cupid(CONFIG, settings)
    assert again.outcome.status == "complete" and again.outcome.evaluated == 0
    assert json.loads(summary_path.read_text())["inference"] == json.loads(
        json.dumps(first.summary["inference"])
    )


def test_corrupt_samples_line_names_file_and_line(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=2
    )
    run_cupid(CONFIG, settings)
    samples = tmp_path / "run" / "samples.jsonl"
    samples.write_bytes(b"\xff\xfe not utf-8\n" + samples.read_bytes())
    (tmp_path / "run" / "summary.json").unlink()
    _clear(_run(tmp_path / "run", tmp_path / "c.sqlite"), str(samples), "line 1")
