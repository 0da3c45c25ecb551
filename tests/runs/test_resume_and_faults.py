"""Resume after a kill, and runs against a server that fails a share of calls."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import ModelFactory
from personalign.llm.backends.scripted import default_responder
from personalign.llm.model import RetryPolicy
from personalign.llm.types import GenerateConfig
from personalign.runs.lifecycle import make_factory
from personalign.runs.store import RunDir
from personalign.types import Message
from tests.support.stub_server import FaultPlan, StubServer

pytestmark = pytest.mark.slow


class RecordingResponder:
    """Counts every answered request by content, to detect repeated calls."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        key = hashlib.sha256(
            json.dumps([[m.role, m.content] for m in messages] + [config.schema_name]).encode()
        ).hexdigest()
        with self._lock:
            self.seen[key] += 1
        return default_responder(messages, config)


def _cli(base_url: str, run_dir: Path, cache: Path) -> list[str]:
    spec = f"openai-compat/stub@{base_url}"
    return [
        sys.executable, "-m", "personalign", "run", "cupid", "--model", spec, "--judge", spec,
        "--task", "both", "--concurrency", "2", "--run-dir", str(run_dir), "--cache", str(cache),
        "--no-progress",
    ]  # fmt: skip


def _results(run_dir: Path) -> dict[str, dict[str, object]]:
    return {k: {t: r.scores for t, r in v.results.items()} for k, v in RunDir(run_dir).records().items()}


def test_kill_then_resume_gives_identical_results_without_repeating_calls(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Reference: one uninterrupted run.
    reference = RecordingResponder()
    with StubServer(responder=reference, latency=0.05) as srv:
        subprocess.run(_cli(srv.base_url, tmp_path / "ref", tmp_path / "ref.sqlite"), env=env, check=True,
                       capture_output=True, timeout=300)  # fmt: skip
    expected = _results(tmp_path / "ref")
    assert len(expected) == 18

    responder = RecordingResponder()
    run_dir, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with StubServer(responder=responder, latency=0.3) as srv:
        process = subprocess.Popen(_cli(srv.base_url, run_dir, cache), env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)  # fmt: skip
        samples = run_dir / "samples.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if samples.exists() and samples.read_text().count("\n") >= 4:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        done_before = len(RunDir(run_dir).records())
        assert 4 <= done_before < 18, "the kill should land midway"
        time.sleep(0.6)  # let the server finish the requests that were in flight
        calls_before = sum(responder.seen.values())

        resumed = subprocess.run(_cli(srv.base_url, run_dir, cache), env=env, capture_output=True, text=True,
                                 timeout=300)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr

    assert _results(run_dir) == expected
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    # The same calls were made, each as often as in the uninterrupted run, except the few in
    # flight at the kill (at most 2 instances x 3 parallel calls: two matcher calls plus the
    # generation branch): their answers never reached the client, so they could not be cached.
    assert set(responder.seen) == set(reference.seen)
    extra = sum(responder.seen.values()) - sum(reference.seen.values())
    assert 0 <= extra <= 6, (extra, sum(reference.seen.values()))
    assert sum(responder.seen.values()) - calls_before == summary["usage"]["calls"]
    assert summary["usage"]["calls"] < sum(reference.seen.values())


def _fast_factory(settings: RunSettings, specs: Sequence[str]) -> ModelFactory:
    factory = make_factory(settings)
    for spec in specs:
        factory.get(spec).retry = RetryPolicy(max_retries=10, base_delay=0.01, max_delay=0.05)
    return factory


def test_run_survives_a_flaky_server_and_accounts_for_every_instance(tmp_path: Path) -> None:
    faults = FaultPlan(
        rates={"429": 0.06, "500": 0.06, "timeout": 0.03, "garbage": 0.03, "reset": 0.03},
        seed=7,
        hang_seconds=5,
    )
    with StubServer(latency=0.01, faults=faults) as srv:
        spec = f"openai-compat/stub@{srv.base_url}?timeout=1&max_retries=6"
        config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec, task="both")
        settings = RunSettings(run_dir=tmp_path / "run", concurrency=8, cache_path=tmp_path / "c.sqlite",
                               progress=False)  # fmt: skip
        result = run_cupid(config, settings, factory=_fast_factory(settings, [spec]))
        assert sum(srv.stats.outcomes[o] for o in ("429", "500", "timeout", "garbage", "reset")) >= 10

    records = RunDir(tmp_path / "run").records()
    assert len(records) == 18
    for task in ("inference", "generation"):
        block = result.summary[task]
        assert block["n_scored"] + block["n_errors"] == 18
    # A fifth of calls fail; with 10 retries every fault is absorbed (all 11 attempts failing: ~2e-8).
    assert result.summary["inference"]["n_errors"] == 0, result.summary["inference"]["errors"]
    assert result.summary["usage"]["per_model"]["openai-compat/stub"]["retries"] >= 10


def test_failures_are_recorded_as_errors_not_scores(tmp_path: Path) -> None:
    def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "match_results" and any("Ines Okafor" in m.content for m in messages):
            return "I think most items are covered."  # unparseable, even after the re-ask
        return default_responder(messages, config)

    with (
        StubServer(responder=responder, faults=FaultPlan(rates={"500": 1.0})) as broken,
        StubServer(responder=responder) as srv,
    ):
        spec = f"openai-compat/stub@{srv.base_url}"
        dead = f"openai-compat/dead@{broken.base_url}?max_retries=1"
        config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=dead, task="both")
        settings = RunSettings(run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False)
        result = run_cupid(config, settings, factory=_fast_factory(settings, [spec, dead]))

    gen, inf = result.summary["generation"], result.summary["inference"]
    assert gen["n_scored"] == 0 and gen["n_errors"] == 18
    assert gen["all"]["mean"] is None  # no score invented for failed judgements
    assert all("HTTP 500" in e for e in gen["errors"].values())
    broken_ids = [k for k, e in inf["errors"].items() if "unparseable output" in e]
    assert broken_ids and inf["n_scored"] == 18 - len(broken_ids)
    assert inf["all"]["n_instances"] == inf["n_scored"]
    record = RunDir(tmp_path / "run").records()[broken_ids[0]]
    failed = [s for name, s in record.steps.items() if name.startswith("match/") and s.status == "error"]
    assert failed and len(failed[0].raw) == 2 and "reask" in failed[0].flags  # raw output kept
    assert result.outcome.status == "complete_with_errors"

    # With a working judge, the same subject outputs come from the cache and generation scores.
    # The matcher's unparseable answers were evicted from the cache when rejected, so a re-run
    # asks again and, against a healed server, every instance is scored.
    with StubServer() as fixed:
        spec2 = f"openai-compat/stub@{fixed.base_url}"  # same model label, so the cache applies
        config2 = CupidConfig(subject=spec2, decomposer=spec2, matcher=spec2, judge=spec2, task="both")
        retried = run_cupid(config2, replace(settings, run_dir=tmp_path / "run2"))
        assert retried.summary["generation"]["n_errors"] == 0
        assert retried.summary["inference"]["n_errors"] == 0
        assert retried.summary["usage"]["cache_hits"] > 0
        assert fixed.stats.requests == retried.summary["usage"]["calls"]
