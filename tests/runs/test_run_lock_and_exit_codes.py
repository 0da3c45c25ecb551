"""Two real processes on one run directory, Ctrl-C, and the documented exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.cupid.run import RunSettings, rescore_cupid, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.cli import app
from personalign.cli_common import exit_code
from personalign.errors import ConfigError
from personalign.runs.store import RunDir, RunLockedError
from tests.support.stub_server import FaultPlan, StubServer

runner = CliRunner()
CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(base_url: str, run_dir: Path, cache: Path, *extra: str) -> list[str]:
    spec = f"openai-compat/stub@{base_url}"
    return [
        sys.executable, "-m", "personalign", "run", "cupid", "--model", spec, "--judge", spec,
        "--concurrency", "2", "--run-dir", str(run_dir), "--cache", str(cache), "--no-progress", *extra,
    ]  # fmt: skip


def _wait_for(predicate: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_second_process_is_refused_and_ctrl_c_exits_130_then_resumes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run_dir, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    samples = run_dir / "samples.jsonl"
    # 1 s per call: the first run needs ~27 s for its 18 instances (2 at a time), so it is still running
    # while a second interpreter starts and is refused, even on a loaded machine.
    with StubServer(latency=1.0) as srv:
        first = subprocess.Popen(
            _cli(srv.base_url, run_dir, cache),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as at a terminal: a child inherits an ignored SIGINT (as some test runners and
            # CI shells leave it), and Python then never installs its KeyboardInterrupt handler.
            preexec_fn=_default_sigint,
        )
        try:
            _wait_for(lambda: samples.exists() and samples.read_text().count("\n") >= 1)
            assert (run_dir / "run.lock").read_text().strip() == str(first.pid)

            second = subprocess.run(
                _cli(srv.base_url, run_dir, cache), env=env, capture_output=True, text=True, timeout=120
            )
            assert second.returncode == 2, second.stderr
            message = " ".join(second.stderr.split())
            assert f"pid {first.pid}" in message and str(run_dir) in message
            assert "Traceback" not in second.stderr

            first.send_signal(signal.SIGINT)
            _, err = first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "interrupted"
        done = len(RunDir(run_dir).records())
        assert 1 <= done < 18

        # the lock died with its process: the same command resumes and finishes
        resumed = subprocess.run(
            _cli(srv.base_url, run_dir, cache), env=env, capture_output=True, text=True, timeout=300
        )
        assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "complete"
    assert len(RunDir(run_dir).records()) == 18


def test_a_held_lock_refuses_a_run_and_a_rescore_into_that_directory(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=2
    )
    run_cupid(CONFIG, settings)
    target = RunDir(tmp_path / "rescored")
    target.path.mkdir()
    with target.lock():
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            rescore_cupid(
                tmp_path / "run", RunSettings(run_dir=target.path, progress=False), judge="scripted/k"
            )
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            run_cupid(CONFIG, RunSettings(run_dir=target.path, progress=False, limit=1))
    assert not target.manifest_path.exists()  # the refused runs wrote nothing
    # released: the rescore now goes ahead
    done = rescore_cupid(
        tmp_path / "run", RunSettings(run_dir=target.path, progress=False), judge="scripted/k"
    )
    assert done.outcome.status == "complete"


def test_exit_code_table() -> None:
    assert exit_code("complete") == 0
    assert exit_code("complete_with_errors", 3, 10) == 0  # default --max-error-rate 1.0: never fails
    assert exit_code("complete_with_errors", 3, 10, max_error_rate=0.3) == 0
    assert exit_code("complete_with_errors", 4, 10, max_error_rate=0.3) == 4
    assert exit_code("complete_with_errors", 1, 10, max_error_rate=0.0) == 4
    assert exit_code("stopped_budget") == 3
    assert exit_code("interrupted") == 130


def test_max_error_rate_turns_an_errored_run_into_exit_4(tmp_path: Path) -> None:
    # every request gets a non-retryable 400: all instances end in error
    with StubServer(faults=FaultPlan(rates={"400": 1.0})) as srv:
        spec = f"openai-compat/stub@{srv.base_url}"
        base = ["run", "cupid", "-m", spec, "-j", spec, "--limit", "2", "--no-progress"]
        lenient = runner.invoke(
            app, [*base, "--run-dir", str(tmp_path / "a"), "--cache", str(tmp_path / "a.db")]
        )
        assert lenient.exit_code == 0, lenient.output  # default: errors are reported, not fatal
        strict = runner.invoke(
            app,
            [
                *base,
                "--run-dir",
                str(tmp_path / "b"),
                "--cache",
                str(tmp_path / "b.db"),
                "--max-error-rate",
                "0.5",
            ],
        )
    assert strict.exit_code == 4, strict.output
    assert "2 of 2 instances ended in error" in " ".join(strict.output.split())
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "complete_with_errors"


def test_budget_stop_exits_3_from_the_cli(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["run", "cupid", "-m", "scripted/s", "-j", "scripted/j", "--max-cost", "0", "--no-progress",
         "--run-dir", str(tmp_path / "run"), "--cache", str(tmp_path / "c.db")],
    )  # fmt: skip
    assert result.exit_code == 3, result.output


def test_refused_run_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from personalign.benchmarks.cupid import steps as cupid_steps  # the spec's evaluator hook reads it here

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise ConfigError("refused after the run was opened")

    monkeypatch.setattr(cupid_steps, "CupidBenchmark", refuse)
    target = tmp_path / "new" / "run"
    with pytest.raises(ConfigError, match="refused"):
        run_cupid(CONFIG, RunSettings(run_dir=target, cache_path=tmp_path / "c.sqlite", progress=False))
    assert not (tmp_path / "new").exists()
    # a directory the user made stays, empty
    (tmp_path / "mine").mkdir()
    with pytest.raises(ConfigError, match="refused"):
        run_cupid(
            CONFIG, RunSettings(run_dir=tmp_path / "mine", cache_path=tmp_path / "c.sqlite", progress=False)
        )
    assert list((tmp_path / "mine").iterdir()) == []


def test_identity_mismatch_is_refused_without_touching_the_directory(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=1
    )
    run_cupid(CONFIG, settings)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    result = runner.invoke(
        app,
        ["run", "cupid", "-m", "scripted/other", "-j", "scripted/j", "--limit", "1", "--no-progress",
         "--run-dir", str(tmp_path / "run"), "--cache", str(tmp_path / "c.sqlite")],
    )  # fmt: skip
    assert result.exit_code == 2 and "another configuration" in result.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before
