"""The memory engine on HiCUPID: `--context memory` runs, the per-user stores, and `memory-eval
--format hicupid` (Hit@k per question type against the baselines, token ratio)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.cupid.memory_eval import approx_tokens
from personalign.benchmarks.hicupid.context import (
    ContextOptions,
    check_context,
    context_settings,
    is_retrieval,
    make_context,
)
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.memory import MEMORY_K, MemoryContext, evaluate_hicupid, history_tokens
from personalign.benchmarks.hicupid.report import build_report
from personalign.benchmarks.hicupid.run import HiCupidRunSettings, run_hicupid
from personalign.benchmarks.hicupid.schema import TEST_SPLITS
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.cli import app
from personalign.errors import ConfigError
from personalign.runs.store import RunDir

DATA = load_hicupid()
CONFIG = HiCupidConfig(subject="scripted/s", judge="scripted/j", context="memory")


def _settings(tmp_path: Path, name: str, **kw: object) -> HiCupidRunSettings:
    return HiCupidRunSettings(
        run_dir=tmp_path / name,
        cache_path=tmp_path / "c.sqlite",
        progress=False,
        **kw,  # type: ignore[arg-type]
    )


def test_names_and_settings() -> None:
    check_context("memory")
    check_context("memory-7")
    for bad in ("memory-0", "memory-", "memory3"):
        with pytest.raises(ConfigError, match="unknown HiCUPID context"):
            check_context(bad)
    assert make_context("memory").name == "memory" and MEMORY_K == 3
    assert make_context("memory-5").name == "memory-5"
    assert is_retrieval("memory") and is_retrieval("memory-1") and not is_retrieval("full")
    settings = context_settings("memory-5", ContextOptions(embedder="hash"))
    assert settings is not None
    assert (settings["k"], settings["embedder"], settings["retrieval"]["k_sessions"]) == (5, "hash", 5)
    assert context_settings("bm25-dialogue-3", ContextOptions()) is None


def test_one_store_per_user_reused_and_isolated() -> None:
    memory = MemoryContext(3, ContextOptions(embedder="hash", max_cached_users=2))
    questions = DATA.questions(TEST_SPLITS)
    seen: dict[int, object] = {}
    for qa in questions:
        history = DATA.history(qa.user_id)
        selection = asyncio.run(memory.select(history, qa))
        engine = memory._engines[qa.user_id][1]
        assert seen.setdefault(qa.user_id, engine) is engine  # built once, reused for the next questions
        # Only this user's dialogues, the engine's k of them, shown chronologically.
        assert set(selection.dialogue_ids) <= set(history.dialogue_ids)
        assert selection.ranked_dialogue_ids is not None and len(selection.ranked_dialogue_ids) == 3
        assert list(selection.dialogue_ids) == sorted(selection.dialogue_ids, key=history.position)
        assert len(engine.store.sessions("instance")) == len(history.dialogues)  # one user per store
    assert len(memory._engines) == 2  # the least recently used users' stores were closed
    memory.close()
    assert not memory._engines


def test_memory_selection_renders_the_retrieved_dialogues_like_dialogue_retrieval() -> None:
    qa = next(q for q in DATA.qa if q.id == "test_2/4#164")  # "Book a dentist cleaning on 2025-03-18 ..."
    history = DATA.history(4)
    selection = asyncio.run(make_context("memory-1").select(history, qa))
    assert selection.ranked_dialogue_ids == (163,)  # the conflicting dentist appointment
    dialogue = next(d for d in history.dialogues if d.dialogue_id == 163)
    assert list(selection.messages) == dialogue.messages()


def test_run_hicupid_with_memory_context(tmp_path: Path) -> None:
    result = run_hicupid(CONFIG, _settings(tmp_path, "run", users=(4,)))
    assert result.outcome.status == "complete"
    assert result.summary["context"] == "memory"
    assert result.summary["qa"]["n_scored"] == 6 and result.summary["qa"]["n_errors"] == 0
    records = RunDir(tmp_path / "run").records()
    step = records["test_2/4#164"].steps["context"].parsed
    assert step["strategy"] == "memory"
    assert step["ranked_dialogue_ids"][0] == 163 and len(step["ranked_dialogue_ids"]) == 3
    assert step["dialogue_ids"] == sorted(step["ranked_dialogue_ids"])
    assert records["test_2/4#164"].results["qa"].scores["hit"] == 1.0
    manifest = RunDir(tmp_path / "run").read_manifest()
    settings = manifest["identity"]["context_settings"]
    assert (settings["strategy"], settings["k"], settings["embedder"]) == ("memory", 3, "minilm")
    # Another k or embedder is another run; strategies without settings keep their identity shape.
    other = run_hicupid(replace(CONFIG, context="memory-5"), _settings(tmp_path, "k5", users=(4,), limit=1))
    other_manifest = RunDir(tmp_path / "k5").read_manifest()
    assert other_manifest["identity"]["context_settings"]["k"] == 5
    assert other_manifest["identity_hash"] != manifest["identity_hash"]
    assert other.summary["qa"]["n_scored"] == 1
    run_hicupid(replace(CONFIG, context="full"), _settings(tmp_path, "full", users=(4,), limit=1))
    assert "context_settings" not in RunDir(tmp_path / "full").read_manifest()["identity"]
    hits = build_report([tmp_path / "run", tmp_path / "full"])["hicupid_hit_at_k"]
    (row,) = hits.rows.values()  # memory runs join the Hit@k table
    assert row["Schedule"].value == 1.0


def test_cli_run_hicupid_memory(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        ["run", "hicupid", "--model", "scripted/a", "--judge", "scripted/b", "--context", "memory-2",
         "--limit", "2", "--run-dir", str(tmp_path / "a"), "--cache", str(tmp_path / "c.sqlite"),
         "--no-progress"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "context memory-2" in out.output


def test_memory_eval_hicupid_hand_checked_for_user_4() -> None:
    # User 4 (test_2): 12 dialogues 160..171; questions #160-#162 persona (gold 160, 162, 165),
    # #163 multi-info (profile dialogues 161,164,166,168,170 + persona 169), #164/#165 schedule
    # (gold 163, 171).
    questions = [q for q in DATA.questions(TEST_SPLITS) if q.user_id == 4]
    summary = evaluate_hicupid(DATA.histories, questions, ks=(1, 3))
    recent = summary["methods"]["recent"]
    # Most recent first: [171], then [171, 170, 169]. No persona gold is that recent; 171 is #165's.
    assert recent[1] == pytest.approx(
        {"persona": 0.0, "schedule": 0.5, "multi_info_persona": 0.0, "multi_info_profile": 0.0}
        | {"total": recent[1]["total"], "n": 6, "token_ratio": recent[1]["token_ratio"]}
    )
    assert (recent[3]["multi_info_profile"], recent[3]["multi_info_persona"]) == (1.0, 1.0)  # 170, 169
    history = DATA.history(4)
    full = sum(approx_tokens(m.content) for d in history.dialogues for m in d.messages())
    assert history_tokens(history, history.dialogue_ids) == full
    assert recent[1]["token_ratio"] == pytest.approx(history_tokens(history, [171]) / full)
    memory = summary["methods"]["memory"]
    # The engine ranks 160 and 162 first for #160/#161 (they name the asked-about activity and food),
    # misses 165 ("relax after work") in its top 3, leads with the matching appointment for both
    # schedule questions, and ranks profile 161 then persona 169 first for the multi-info question.
    assert memory[1]["persona"] == pytest.approx(2 / 3) and memory[3]["persona"] == pytest.approx(2 / 3)
    assert memory[1]["schedule"] == 1.0
    assert (memory[1]["multi_info_profile"], memory[1]["multi_info_persona"]) == (1.0, 0.0)
    assert (memory[3]["multi_info_profile"], memory[3]["multi_info_persona"]) == (1.0, 1.0)
    assert 0.0 < memory[1]["token_ratio"] < memory[3]["token_ratio"] < 1.0
    assert summary["memory"]["k"] == MEMORY_K


def test_memory_eval_cli_on_hicupid_fixture(tmp_path: Path) -> None:
    out_file = tmp_path / "eval.json"
    runner = CliRunner()
    out = runner.invoke(
        app, ["memory-eval", "--format", "hicupid", "--embedder", "hash", "--out", str(out_file)]
    )
    assert out.exit_code == 0, out.output
    assert "| memory | 3 | 18 |" in out.stdout and "| recent | 1 | 18 |" in out.stdout
    report = json.loads(out_file.read_text())["summary"]
    assert set(report["methods"]) == {"recent", "bm25", "dense", "memory"}
    assert set(report["methods"]["memory"]) == {"1", "3", "5"}
    assert report["data"]["source"].startswith("fixture")
    out = runner.invoke(app, ["memory-eval", "--format", "hicupid", "--method", "fused"])
    assert out.exit_code == 2 and "unknown methods" in out.output
    out = runner.invoke(app, ["memory-eval", "--format", "xml"])
    assert out.exit_code == 2 and "unknown --format" in out.output
    out = runner.invoke(
        app, ["run", "hicupid-retrieval", "--retriever", "memory", "--embedder", "hash", "--no-cache",
              "--out", str(tmp_path / "r")],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "memory dialogue 3 (hash)" in out.stdout and "bm25" not in out.stdout
