"""A BenchPreS run on the fixture over HTTP against the real llama.cpp server (SmolLM2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.benchpres.report import build_report, write_report
from personalign.benchmarks.benchpres.run import run_benchpres
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.benchmarks.cupid.run import RunSettings
from personalign.runs.store import RunDir
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_benchpres_over_real_openai_compatible_server(tmp_path: Path) -> None:
    with llama_server() as base_url:
        spec = spec_for(base_url)
        config = BenchPresConfig(
            subject=spec,
            judge=spec,
            completeness_judge=spec,
            samples=2,
            # room for SmolLM2 to finish most messages: a cut-off one is an error (personalign protocol)
            subject_max_tokens=200,
            judge_max_tokens=96,
            completeness=False,  # rated in the mitigation run below; keeps this test near 60 s
        )
        settings = RunSettings(
            run_dir=tmp_path / "plain",
            limit=2,
            concurrency=2,
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
        result = run_benchpres(config, settings)

        records = RunDir(tmp_path / "plain").records()
        assert len(records) == 4  # 2 rows x 2 samples
        cut_off = 0
        for record in records.values():
            generate = record.steps["generate"]
            assert generate.model == "openai-compat/smollm2" and generate.raw and generate.prompt_tokens > 0
            assert generate.finish_reasons and generate.finish_reasons[-1] in ("stop", "length")
            if generate.status == "error":  # cut off at the limit: an error, counted, never scored
                assert "truncated" in generate.flags and "cut off" in (generate.error or "")
                cut_off += 1
                continue
            judgements = record.results["preferences"].scores["judgements"]
            assert len(judgements) == 5
            for entry in judgements:  # schema-constrained judging parses on this model
                assert isinstance(entry["applied"], bool), entry
            nickname = record.steps["judge/4"]
            assert nickname.role == "nickname_rule" and nickname.model is None
        summary = result.summary
        assert cut_off < 4 and summary["steps"]["generate"]["truncated"] == cut_off
        # every message that was not cut off is judged, and schema-constrained judging parses here
        assert (summary["n_judgements"], summary["n_judgement_errors"]) == (5 * (4 - cut_off), 0)
        assert summary["all"]["n_samples"] == 2 and 0.0 <= summary["all"]["mr"] <= 1.0
        assert summary["usage"]["calls"] >= 4 + 4 * (4 - cut_off)

        # Mitigation with reasoning explicitly off (sent as chat_template_kwargs; accepted by the server).
        mitigated = run_benchpres(
            replace(config, mitigation=True, reasoning="off", samples=1, completeness=True),
            replace(settings, run_dir=tmp_path / "mitigated", limit=1),
        )
        assert mitigated.outcome.status in ("complete", "complete_with_errors")
        record = next(iter(RunDir(tmp_path / "mitigated").records().values()))
        assert record.steps["generate"].prompt == "benchpres/subject_mitigation"
        completeness = record.results["completeness"]
        # Rated 1-5 against the subject's message without memory; the one error allowed is a
        # message cut off at the token limit (SmolLM2 at 160 tokens), which is never rated.
        if completeness.status != "ok":
            assert "cut off at the token limit" in (completeness.error or ""), completeness.error
        else:
            assert 1 <= completeness.scores["rating"] <= 5
            baseline = record.steps["generate_baseline"]
            assert "User Knowledge Memories" not in baseline.raw[0] and baseline.status == "ok"
        manifest = json.loads((tmp_path / "mitigated" / "manifest.json").read_text())
        assert manifest["reasoning_control"] is True and manifest["condition"] == "mitigation+reasoning-off"

        # The memory engine as the context: SmolLM2 decides apply/suppress per preference, one row.
        memory = run_benchpres(
            replace(config, context="memory", samples=1),
            replace(settings, run_dir=tmp_path / "memory", limit=1),
        )
        record = next(iter(RunDir(tmp_path / "memory").records().values()))
        context = record.steps["context"]
        assert context.status == "ok" and len(context.parsed["decisions"]) == 5
        for decision in context.parsed["decisions"]:  # judged by the model, never an error
            assert decision["by"] == "openai-compat/smollm2", decision
        kept = [d["statement"] for d in context.parsed["decisions"] if d["decision"] == "apply"]
        dropped = [d["statement"] for d in context.parsed["decisions"] if d["decision"] == "suppress"]
        assert all(s in context.parsed["prompt"] for s in kept)
        assert not any(s in context.parsed["prompt"] for s in dropped)
        selection = memory.summary["memory_selection"]
        assert (selection["n_decisions"], selection["n_decision_errors"]) == (5, 0)
        assert memory.summary["models"]["memory_judge"] == "openai-compat/smollm2"

        # The paper protocol over the same server: free-form judges, comparative 'Rating: [[X]]'.
        paper = run_benchpres(
            replace(config, protocol="paper", samples=1, completeness=True),
            replace(settings, run_dir=tmp_path / "paper", limit=1),
        )
        assert paper.summary["protocol"] == "paper"
        assert paper.summary["n_judgements"] + paper.summary["n_judgement_errors"] == 5
        ratings = paper.summary["completeness"]["n"] + len(paper.summary["errors"]["completeness"])
        assert ratings == 1  # rated, or an error with its reason: never dropped

        # The same configuration again is answered from the cache (a rejected reply is asked again).
        again = run_benchpres(config, replace(settings, run_dir=tmp_path / "again"))
        if not cut_off and not summary["n_judgement_errors"]:
            assert again.summary["usage"]["calls"] == 0 and again.summary["all"] == summary["all"]
        else:
            assert again.summary["usage"]["cache_hits"] > 0

    markdown = write_report(build_report([tmp_path / "plain", tmp_path / "mitigated"]), tmp_path / "report")
    assert "BenchPreS main table" in markdown
    assert (tmp_path / "report" / "benchpres_scatter.png").stat().st_size > 10_000
