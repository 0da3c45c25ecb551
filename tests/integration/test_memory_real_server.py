"""Memory extraction, select/apply and the CUPID memory context with SmolLM2 behind the real
llama.cpp OpenAI-compatible server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import CallCache, ModelFactory
from personalign.memory import (
    CommunicationContext,
    MemoryEngine,
    SelectionPolicy,
    extract_pending,
    select_memories,
)
from personalign.memory.extract import extractor_id
from personalign.runs.store import RunDir
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION = [
    {"role": "user", "content": "Can you draft my progress update for Professor Ines Okafor?"},
    {"role": "assistant", "content": "Sure: the surveys went well and densities look stable."},
    {"role": "user", "content": "For Professor Okafor, always lead with the raw kelp counts per transect."},
]


def test_extract_and_select_on_real_server(tmp_path: Path) -> None:
    with llama_server(n_ctx=4096) as base_url:
        spec = spec_for(base_url)
        factory = ModelFactory(cache=CallCache(tmp_path / "cache.sqlite"))
        model = factory.get(spec)
        engine = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
        engine.add_user("ana")
        sid = engine.add_session("ana", SESSION, timestamp=1.0)

        async def extract_then_judge() -> tuple[object, list[object]]:
            report = await extract_pending(engine.store, "ana", model, max_tokens=160)
            prefs = [
                engine.add_memory("ana", "Use lots of emoji and call me Captain.", category="markers"),
                engine.add_memory("ana", "Keep messages short.", category="length"),
            ]
            context = CommunicationContext(
                recipient="bank loan officer", task="request a loan", formality="formal"
            )
            policy = SelectionPolicy(default="judge", categories={"length": "apply"})
            decisions = await select_memories(prefs, context, judge=model, policy=policy)
            await factory.aclose()
            return report, list(decisions)

        report, decisions = asyncio.run(extract_then_judge())

        # CUPID with --context memory over the same server: one instance, inference task.
        config = CupidConfig(
            subject=spec,
            decomposer=spec,
            matcher=spec,
            judge=spec,
            context="memory",
            subject_max_tokens=96,
            # room for four matcher entries with their reasons (200 tokens truncated them)
            judge_max_tokens=512,
        )
        settings = RunSettings(
            run_dir=tmp_path / "run", limit=1, cache_path=tmp_path / "cache.sqlite", progress=False
        )
        cupid = run_cupid(config, settings)

    # Extraction either stored memories with provenance or recorded why not: never a silent empty result.
    assert report.sessions + len(report.errors) == 1  # type: ignore[attr-defined]
    if report.sessions:  # type: ignore[attr-defined]
        stored = [m for m in engine.memories("ana", include_superseded=True) if m.source != "manual"]
        assert len(stored) == report.memories  # type: ignore[attr-defined]
        assert all(m.session_id == sid and m.source == "openai-compat/smollm2" for m in stored)
        assert engine.store.pending_extraction("ana", extractor_id(model)) == []
    else:
        assert engine.store.extraction_errors("ana", extractor_id(model))
    # The markers preference was judged by the real model (schema-constrained JSON parses on it);
    # the length one followed its category's policy without a call.
    judged, by_policy = decisions
    assert judged.by == "openai-compat/smollm2" and judged.reason  # type: ignore[attr-defined]
    assert judged.decision in ("apply", "suppress")  # type: ignore[attr-defined]
    assert (by_policy.decision, by_policy.by) == ("apply", "policy")  # type: ignore[attr-defined]
    assert factory.tracker.calls >= 2
    # The memory context fed a real run, which was scored.
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    assert record.results["inference"].status == "ok", record.results["inference"].error
    assert cupid.summary["context"] == "memory"
    assert (cupid.summary["inference"]["n_scored"], cupid.summary["inference"]["n_errors"]) == (1, 0)
    assert record.steps["infer"].prompt_tokens > 0
