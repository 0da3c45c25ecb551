"""A full CUPID run (inference + generation) over HTTP against the real llama.cpp server."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.cupid.report import build_report, write_report
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.runs.store import RunDir
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_full_run_over_real_openai_compatible_server(tmp_path: Path) -> None:
    with llama_server() as base_url:
        spec = spec_for(base_url)
        config = CupidConfig(
            subject=spec, decomposer=spec, matcher=spec, judge=spec, task="both", subject_max_tokens=160
        )
        settings = RunSettings(
            run_dir=tmp_path / "run",
            limit=2,
            concurrency=2,
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
        result = run_cupid(config, settings)

        records = RunDir(tmp_path / "run").records()
        assert len(records) == 2
        for record in records.values():
            assert set(record.results) == {"inference", "generation"}
            # Every step that called a model names it and keeps its raw output.
            called = [s for s in record.steps.values() if s.model]
            assert {s.model for s in called} == {"openai-compat/smollm2"}
            assert all(s.raw for s in called)
            assert all(s.prompt_tokens > 0 for s in called)
            # Schema-constrained judges parse on this model: inference is always scored. The one
            # error allowed is a generated answer cut off at the 160-token cap (SmolLM2 runs on),
            # which the personalign protocol never scores.
            assert record.results["inference"].status == "ok", record.results["inference"].error
            inference = record.results["inference"].scores
            assert inference["n_pred"] >= 1 and inference["n_gold"] >= 1
            assert inference["precision"] == inference["matched_pred"] / inference["n_pred"]
            assert inference["recall"] == inference["matched_gold"] / inference["n_gold"]
            generation = record.results["generation"]
            if generation.status == "ok":
                assert 1 <= generation.scores["score"] <= 10
            else:
                assert "generate: rejected output: reply cut off at the token limit" in (
                    generation.error or ""
                )
                assert record.steps["generate"].finish_reasons == ["length"]
        summary = result.summary
        assert (summary["inference"]["n_scored"], summary["inference"]["n_errors"]) == (2, 0)
        cut = summary["steps"]["generate"]["truncated"]
        assert (summary["generation"]["n_scored"], summary["generation"]["n_errors"]) == (2 - cut, cut)
        assert 0.0 <= summary["inference"]["all"]["f1"] <= 1.0
        assert summary["usage"]["calls"] >= 2 * 4
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
        assert manifest["models"]["judge"]["model"] == "smollm2"

        # A second run of the same configuration is answered from the cache, except the steps
        # whose replies were rejected (e.g. a generation cut off at 160 tokens): those were
        # evicted and are asked once more, each with one call (the answer is the same at
        # temperature 0, so they fail again and nothing downstream of them runs).
        failed_steps = sum(step["errors"] for step in summary["steps"].values())
        truncated = sum(step["truncated"] for step in summary["steps"].values())
        assert truncated <= failed_steps  # under the personalign protocol a cut-off reply is an error
        again = run_cupid(config, replace(settings, run_dir=tmp_path / "run2"))
        assert again.summary["usage"]["calls"] == failed_steps
        assert again.summary["usage"]["cache_hits"] > 0
        assert again.summary["inference"]["all"] == summary["inference"]["all"]

    markdown = write_report(build_report([tmp_path / "run"]), tmp_path / "report")
    assert "Table 1" in markdown and "Table 3" in markdown
    assert (tmp_path / "report" / "report.csv").read_text().count("\n") > 1
