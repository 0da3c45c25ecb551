"""Run-level behaviour on the scripted model: in-flight sharing, finished-run re-runs, budget stop."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import CallCache, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.types import Message

CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


def test_identical_concurrent_calls_share_one_request(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    factory = ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/x": backend})
    model = factory.get("scripted/x")
    messages = [Message(role="user", content="hello")]

    async def both() -> list[bool]:
        results = await asyncio.gather(model.complete(messages), model.complete(messages))
        return [r.cached for r in results]

    assert sorted(asyncio.run(both())) == [False, True]
    assert backend.calls == 1
    assert factory.tracker.calls == 1 and factory.tracker.cache_hits == 1


def test_rerunning_a_finished_run_makes_no_calls_and_keeps_results(tmp_path: Path) -> None:
    settings = RunSettings(run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False)
    first = run_cupid(CONFIG, settings)
    assert first.outcome.status == "complete" and first.outcome.evaluated == 18
    uncached = replace(settings, use_cache=False)  # any call would now reach the backend
    again = run_cupid(CONFIG, uncached)
    assert again.outcome.evaluated == 0
    stored = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert again.summary == stored
    assert json.loads(json.dumps(first.summary["inference"])) == stored["inference"]
    # A larger selection is not "finished": only the new instances are evaluated.
    limited = run_cupid(CONFIG, replace(settings, run_dir=tmp_path / "lim", limit=5))
    assert limited.outcome.evaluated == 5
    grown = run_cupid(CONFIG, replace(settings, run_dir=tmp_path / "lim", limit=8))
    assert grown.outcome.evaluated == 3 and grown.summary["n_instances"] == 8


def test_budget_cap_stops_cleanly_and_resume_finishes(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, max_cost_usd=0.0
    )
    stopped = run_cupid(CONFIG, settings)
    assert stopped.outcome.status == "stopped_budget"
    assert stopped.summary["usage"]["calls"] == 0
    resumed = run_cupid(CONFIG, replace(settings, max_cost_usd=None))
    assert resumed.outcome.status == "complete"
    assert resumed.summary["inference"]["n_scored"] == 18
