"""HiCUPID over HTTP against the real llama.cpp server: a run, a too-long prompt, a text-format judge."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.hicupid.report import build_report
from personalign.benchmarks.hicupid.run import HiCupidRunSettings, run_hicupid
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.runs.store import RunDir
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _bloat(src: Path, dst: Path, repeat: int) -> Path:
    """A copy of the fixture whose dialogues are long enough to overflow a 2048-token context."""
    dst.mkdir()
    rows = [json.loads(line) for line in (src / "hicupid_dialogue.jsonl").read_text().splitlines()]
    for row in rows:
        row["assistant"] = " ".join([row["assistant"]] * repeat)
    (dst / "dialogue.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (dst / "qa.jsonl").write_text((src / "hicupid_qa.jsonl").read_text())
    return dst


def test_run_over_real_openai_compatible_server(tmp_path: Path) -> None:
    from personalign.fixtures import fixture_path

    with llama_server(n_ctx=2048) as base_url:
        spec = spec_for(base_url)
        config = HiCupidConfig(
            subject=spec, judge=spec, context="bm25-utterance-5", subject_max_tokens=60, judge_max_tokens=200
        )
        settings = HiCupidRunSettings(
            run_dir=tmp_path / "run",
            splits=("test_2",),
            types=("profile", "schedule"),
            concurrency=2,
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
        result = run_hicupid(config, settings)
        records = RunDir(tmp_path / "run").records()
        assert len(records) == 3  # test_2: 1 multi-info and 2 schedule questions
        for record in records.values():
            called = [s for s in record.steps.values() if s.model]
            assert {s.model for s in called} == {"openai-compat/smollm2"}
            assert all(s.raw and s.prompt_tokens > 0 for s in called)
            task = record.results["qa"]
            assert task.status == "ok", f"{record.instance_id}: {task.error}"  # JSON verdicts parse
        block = result.summary["qa"]
        assert (block["n_scored"], block["n_errors"]) == (3, 0)
        assert block["all"]["hit"]["n"] == block["n_scored"]
        scores = [r.results["qa"].scores for r in records.values() if r.results["qa"].status == "ok"]
        assert all(s["outcome"] in ("win", "tie", "loss") and 0.0 <= s["hit"] <= 1.0 for s in scores)

        # A persona question judged A/B with text verdict lines, parsed by the anchored parser; its
        # history is the one dialogue the memory engine retrieves (`--context memory-1`).
        text_judge = run_hicupid(
            replace(config, judge_format="text", context="memory-1"),
            replace(settings, run_dir=tmp_path / "text", types=("persona",), limit=1),
        )
        for record in RunDir(tmp_path / "text").records().values():
            context = record.steps["context"].parsed
            assert context["strategy"] == "memory-1" and len(context["ranked_dialogue_ids"]) == 1
            assert record.steps["answer"].prompt_tokens > 0
            step = record.steps["judge"]
            assert step.status == "ok" or "unparseable output" in (step.error or "")
        assert text_judge.summary["qa"]["n_scored"] + text_judge.summary["qa"]["n_errors"] == 1
        assert RunDir(tmp_path / "text").read_manifest()["identity"]["context_settings"]["k"] == 1

        # A whole history longer than the server's context is an error record, never a truncation.
        bloated = _bloat(fixture_path("hicupid_qa.jsonl").parent, tmp_path / "bloated", repeat=30)
        long = run_hicupid(
            replace(config, context="full"),
            replace(settings, run_dir=tmp_path / "long", limit=1),
            data=bloated,
        )
        assert long.summary["qa"]["n_errors"] == 1
        error = next(iter(long.summary["qa"]["errors"].values()))
        assert error.startswith("answer: model call failed")

    markdown = build_report([tmp_path / "run"])["hicupid_test_2"].to_markdown()
    assert "Table 4: Test Set 2" in markdown
