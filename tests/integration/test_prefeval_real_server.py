"""PrefEval on the fixture over HTTP against the real llama.cpp server (SmolLM2), --limit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personalign.benchmarks.prefeval.run import run_prefeval
from personalign.benchmarks.prefeval.spec import SPEC
from personalign.benchmarks.prefeval.steps import PrefEvalConfig
from personalign.runs.lifecycle import RunSettings
from personalign.runs.store import RunDir
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_prefeval_over_real_openai_compatible_server(tmp_path: Path) -> None:
    with llama_server() as base_url:
        spec = spec_for(base_url)
        config = PrefEvalConfig(subject=spec, judge=spec, subject_max_tokens=200, judge_max_tokens=128)
        settings = RunSettings(
            run_dir=tmp_path / "gen", limit=2, concurrency=2, cache_path=tmp_path / "c.sqlite", progress=False
        )
        result = run_prefeval(config, settings, turns=(0, 2), forms=("explicit",))
        records = RunDir(tmp_path / "gen").records()
        assert len(records) == 4  # 2 rows x 2 lengths
        for record in records.values():
            generate = record.steps["generate"]
            assert generate.model == "openai-compat/smollm2" and generate.raw and generate.prompt_tokens > 0
            assert generate.finish_reasons[-1] in ("stop", "length")
            outcome = record.results["generation"]
            if outcome.status == "ok":  # schema-constrained judging: every check parsed
                assert {"acknowledge", "violation", "helpful"} <= set(outcome.scores["checks"])
                assert isinstance(outcome.scores["followed"], bool)
            else:  # a cut-off answer or an unparseable check: an error with its reason, never a score
                assert outcome.error
        summary = result.summary
        assert summary["n_scored"] + summary["n_errors"] == 4
        assert summary["usage"]["calls"] >= 4

        # The MCQ task with RAG over the conversation, same server.
        mcq = run_prefeval(
            PrefEvalConfig(subject=spec, task="mcq", setting="rag", mcq_max_tokens=32),
            RunSettings(
                run_dir=tmp_path / "mcq",
                limit=2,
                concurrency=2,
                cache_path=tmp_path / "c.sqlite",
                progress=False,
            ),
            turns=(2,),
            forms=("choice",),
        )
        assert mcq.summary["n_scored"] + mcq.summary["n_errors"] == 2
        for record in RunDir(tmp_path / "mcq").records().values():
            assert record.steps["context"].parsed["method"] == "bm25"
            if record.results["mcq"].status == "ok":
                assert record.results["mcq"].scores["choice"] in "ABCD"

        # The same configuration again is answered from the cache.
        again = run_prefeval(
            config,
            RunSettings(
                run_dir=tmp_path / "again", limit=2, cache_path=tmp_path / "c.sqlite", progress=False
            ),
            turns=(0, 2),
            forms=("explicit",),
        )
        assert again.summary["usage"]["cache_hits"] > 0

    markdown = SPEC.write_report([tmp_path / "gen", tmp_path / "mcq"], tmp_path / "report")
    assert "by inter turns" in markdown and (tmp_path / "report" / "prefeval_turns.png").is_file()
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())
    assert manifest["models"]["subject"]["provider"] == "openai-compat"
