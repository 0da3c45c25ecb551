"""HiCUPID runs on scripted models: scoring, errors, both orders, prompts, resume, rescore, agree, CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.api import agreement
from personalign.benchmarks.cupid.run import RunSettings, rescore_cupid, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.report import build_report
from personalign.benchmarks.hicupid.run import hicupid_settings, rescore_hicupid, run_hicupid
from personalign.benchmarks.hicupid.steps import FewShotPool, HiCupidConfig
from personalign.cli import app
from personalign.errors import ConfigError, ModelCallError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.prompts import load_template
from personalign.runs.store import RunDir
from personalign.types import Message

CONFIG = HiCupidConfig(subject="scripted/s", judge="scripted/j")


def _settings(tmp_path: Path, name: str = "run", **kw: object) -> RunSettings:
    return hicupid_settings(
        run_dir=tmp_path / name,
        cache_path=tmp_path / "c.sqlite",
        progress=False,
        **kw,  # type: ignore[arg-type]
    )


class Recorder:
    """A responder that records every prompt and can override answers per JSON schema name."""

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        self.prompts: list[list[Message]] = []
        self.overrides = overrides or {}

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        self.prompts.append(list(messages))
        name = config.schema_name if config.json_schema is not None else ""
        if name in self.overrides:
            return self.overrides[name]
        return default_responder(messages, config)


def _factory(tmp_path: Path, **backends: ScriptedBackend) -> ModelFactory:
    return ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={f"scripted/{name}": backend for name, backend in backends.items()},
    )


def test_default_selection_scores_both_test_sets(tmp_path: Path) -> None:
    result = run_hicupid(CONFIG, _settings(tmp_path))
    assert result.outcome.status == "complete"
    block = result.summary["qa"]
    assert block["n_scored"] == 18 and block["n_errors"] == 0
    assert set(block["by_split"]) == {"test_1", "test_2"}
    assert block["by_split"]["test_1"]["n"] == 12 and block["by_split"]["test_2"]["n"] == 6
    overall = block["all"]
    for kind in ("persona", "profile", "schedule"):
        stats = overall["by_type"][kind]
        assert stats["win"] + stats["tie"] + stats["loss"] == pytest.approx(1.0)
        assert stats["mean"] == pytest.approx(stats["win"] + 0.5 * stats["tie"])
    types = overall["by_type"]
    expected = (
        25 * types["persona"]["mean"] + 5 * types["schedule"]["mean"] + 5 * types["profile"]["mean"]
    ) / 40
    assert overall["total"] == pytest.approx(expected)
    assert 0.0 <= overall["bleu"] <= 1.0 and 0.0 < overall["rouge_l"] <= 1.0
    records = RunDir(tmp_path / "run").records()
    sample = records["test_1/0#2"]
    assert sample.meta == {"user_id": 0, "question_id": 2, "type": "persona", "split": "test_1"}
    assert set(sample.steps) == {"context", "answer", "judge"}
    assert sample.steps["context"].parsed["dialogue_ids"] == list(range(12))
    assert sample.results["qa"].scores["model_slot"] in ("A", "B")
    # A re-run of the finished run makes no calls at all.
    again = run_hicupid(CONFIG, replace(_settings(tmp_path), use_cache=False))
    assert again.outcome.evaluated == 0
    assert again.summary == json.loads(json.dumps(result.summary))


def test_unparseable_verdicts_are_errors_not_ties(tmp_path: Path) -> None:
    judge = ScriptedBackend(Recorder({"ab_verdict": "Both answers have merit.", "schedule_verdict": "Hmm."}))
    factory = _factory(tmp_path, j=judge)
    result = run_hicupid(CONFIG, _settings(tmp_path), factory=factory)
    block = result.summary["qa"]
    assert block["n_scored"] == 0 and block["n_errors"] == 18
    assert result.outcome.status == "complete_with_errors"
    error = block["errors"]["test_1/0#2"]
    assert error.startswith("judge: unparseable output") and "no verdict found" in error
    record = RunDir(tmp_path / "run").records()["test_1/0#2"]
    assert record.steps["judge"].status == "error"
    assert len(record.steps["judge"].raw) == 2  # the re-ask is kept too
    assert record.steps["answer"].status == "ok"  # the answer is kept for a later resume
    # nothing scored: every selected type reads None ("n/a"), never a measured 0
    assert set(block["all"]["by_type"]) == {"persona", "schedule", "profile"}
    assert all(t["mean"] is None and t["n"] == 0 for t in block["all"]["by_type"].values())
    assert block["all"]["total"] is None and block["all"]["bleu"] is None
    assert set(block["by_split"]) == {"test_1", "test_2"}


def test_failed_and_too_long_prompts_are_recorded_as_errors(tmp_path: Path) -> None:
    class ContextLimited(ScriptedBackend):
        async def generate(self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float):  # type: ignore[no-untyped-def]
            if sum(len(m.content) for m in messages) > 2000:
                raise ModelCallError("scripted/s: Requested tokens (9001) exceed context window of 8192")
            return await super().generate(messages, config, timeout=timeout)

    factory = _factory(tmp_path, s=ContextLimited())
    result = run_hicupid(CONFIG, _settings(tmp_path), factory=factory)
    errors = result.summary["qa"]["errors"]
    assert result.summary["qa"]["n_errors"] == 18  # every whole history is longer than the limit
    assert "exceed context window" in errors["test_2/4#160"]
    # With the gold dialogues only, prompts fit and the same questions are scored.
    gold = run_hicupid(
        replace(CONFIG, context="gold"),
        _settings(tmp_path, "gold"),
        factory=_factory(tmp_path, s=ContextLimited()),
    )
    assert gold.summary["qa"]["n_scored"] == 18


def test_both_orders_count_flips_as_ties(tmp_path: Path) -> None:
    always_a = json.dumps({"personalization": "-", "logical_validity": "-", "better_response": "A"})
    judge = ScriptedBackend(Recorder({"ab_verdict": always_a}))
    config = replace(CONFIG, both_orders=True)
    result = run_hicupid(config, _settings(tmp_path), factory=_factory(tmp_path, j=judge))
    overall = result.summary["qa"]["all"]
    assert overall["flip_rate"] == 1.0 and overall["n_both_orders"] == 12  # 7 persona + 5 multi-info
    assert overall["by_type"]["persona"]["tie"] == 1.0
    record = RunDir(tmp_path / "run").records()["test_1/0#2"]
    assert {"judge/model=A", "judge/model=B"} <= set(record.steps)
    assert record.results["qa"].scores["order_inconsistent"] is True
    # The single-order judge with the same always-A judge: wins where the model sat in A.
    single = run_hicupid(
        CONFIG,
        _settings(tmp_path, "single"),
        factory=_factory(tmp_path, j=ScriptedBackend(Recorder({"ab_verdict": always_a}))),
    )
    for rec in RunDir(tmp_path / "single").records().values():
        scores = rec.results["qa"].scores
        if rec.meta["type"] != "schedule":
            assert scores["outcome"] == ("win" if scores["model_slot"] == "A" else "loss")
    assert single.summary["qa"]["all"]["flip_rate"] is None


def test_prompt_layouts_few_shot_and_user_role(tmp_path: Path) -> None:
    subject = Recorder()
    config = replace(CONFIG, shots=3, instruction_role="user")
    run_hicupid(config, _settings(tmp_path, limit=1), factory=_factory(tmp_path, s=ScriptedBackend(subject)))
    (prompt,) = [
        p for p in subject.prompts if p[-1].content == "What should I listen to while I do paperwork?"
    ]
    roles = [m.role for m in prompt]
    assert "system" not in roles
    assert roles[-3:] == ["user", "assistant", "user"]
    instruction, ack = prompt[-3].content, prompt[-2].content
    assert prompt[0].content.startswith("I finally sent that overhanging route")  # history first
    assert instruction.count("### Example") == 9  # 3 per question type
    assert "question)" not in instruction  # no type labels: the official examples carry none
    assert "cilantro" not in instruction  # no example from the asker's (user 0's) own questions
    assert ack == load_template("hicupid/acknowledge").user
    # Interleaved by type, as the paper's fixed sets: persona, multi-info, schedule, persona, ...
    pool = FewShotPool(load_hicupid().questions(["train"]), seed=42)
    asker = next(q for q in load_hicupid().qa if q.question == prompt[-1].content)
    assert [ex.type for ex in pool.examples(asker, 3)] == ["persona", "profile", "schedule"] * 3
    system = Recorder()
    run_hicupid(
        CONFIG, _settings(tmp_path, "sys", limit=1), factory=_factory(tmp_path, s=ScriptedBackend(system))
    )
    first = system.prompts[0]
    assert first[0].role == "system" and "### Example" not in first[0].content
    assert first[-1] == Message(role="user", content="What should I listen to while I do paperwork?")


def test_few_shot_needs_enough_train_questions_from_other_users(tmp_path: Path) -> None:
    # The fixture has 8 train questions per type over 4 users: 6 from the asker's 3 neighbours.
    with pytest.raises(ConfigError, match=r"7-shot prompting needs 7 train questions .* the data has 6"):
        run_hicupid(replace(CONFIG, shots=7), _settings(tmp_path))
    assert not (tmp_path / "run").exists()  # failed before any call or run directory


def test_rescore_keeps_answers_and_agree_compares_judges(tmp_path: Path) -> None:
    first = run_hicupid(CONFIG, _settings(tmp_path))
    subject = ScriptedBackend()
    always_b = json.dumps({"personalization": "-", "logical_validity": "-", "better_response": "B"})
    factory = _factory(tmp_path, s=subject, k=ScriptedBackend(Recorder({"ab_verdict": always_b})))
    rescored = rescore_hicupid(
        tmp_path / "run", _settings(tmp_path, "re"), judge="scripted/k", factory=factory
    )
    assert subject.calls == 0
    assert rescored.summary["qa"]["n_scored"] == 18
    assert RunDir(tmp_path / "re").read_manifest()["rescored_from"]["run_dir"] == str(tmp_path / "run")
    result = agreement(tmp_path / "run", tmp_path / "re")
    assert result["n_common_instances"] == 18 and result["n_skipped_different_generations"] == 0
    assert result["groups"]["hicupid/schedule"] == {"n": 6, "agreement": 1.0, "kappa": None}
    # Hand count: the always-B judge agrees with the first judge exactly where both give the same outcome.
    a, b = RunDir(tmp_path / "run").records(), RunDir(tmp_path / "re").records()
    persona = [k for k, r in a.items() if r.meta["type"] == "persona"]
    same = sum(a[k].results["qa"].scores["outcome"] == b[k].results["qa"].scores["outcome"] for k in persona)
    assert result["groups"]["hicupid/persona"]["agreement"] == pytest.approx(same / len(persona))
    assert first.summary["qa"]["n_scored"] == 18


def test_agree_on_cupid_matcher_labels(tmp_path: Path) -> None:
    cupid = CupidConfig(
        subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j"
    )
    settings = RunSettings(
        run_dir=tmp_path / "cupid", cache_path=tmp_path / "c.sqlite", progress=False, limit=4
    )
    run_cupid(cupid, settings)

    def none_covered(messages: Sequence[Message], config: GenerateConfig) -> str:
        out = json.loads(default_responder(messages, config))
        for entry in out["results"]:
            entry["label"] = "Not Covered"
        return json.dumps(out)

    factory = _factory(tmp_path, m=ScriptedBackend(none_covered))
    rescore_cupid(
        tmp_path / "cupid",
        replace(settings, run_dir=tmp_path / "cupid2"),
        matcher="scripted/m",
        factory=factory,
    )
    result = agreement(tmp_path / "cupid", tmp_path / "cupid2")
    labels = [
        label
        for r in RunDir(tmp_path / "cupid").records().values()
        for step in ("match/gold->inferred", "match/inferred->gold")
        for label in r.steps[step].parsed
    ]
    matcher = result["groups"]["cupid/matcher"]
    assert matcher["n"] == len(labels)
    assert matcher["agreement"] == pytest.approx(labels.count("Not Covered") / len(labels))
    run_hicupid(CONFIG, _settings(tmp_path, "h", limit=1))
    with pytest.raises(ConfigError, match="is a cupid run"):
        agreement(tmp_path / "cupid", tmp_path / "h")


def test_report_tables(tmp_path: Path) -> None:
    run_hicupid(CONFIG, _settings(tmp_path, "full"))
    run_hicupid(replace(CONFIG, context="gold"), _settings(tmp_path, "gold"))
    run_hicupid(replace(CONFIG, context="bm25-dialogue-1"), _settings(tmp_path, "bm25"))
    tables = build_report([tmp_path / "full", tmp_path / "gold", tmp_path / "bm25"])
    t1 = tables["hicupid_test_1"]
    assert t1.columns == ["BLEU", "ROUGE-L", "Persona", "Schedule", "Multi-Info", "Total"]
    assert "scripted/s · zero/system · full [judged by scripted/j] [personalign]" in t1.rows
    assert t1.title.endswith("· protocol personalign")
    ablation = tables["hicupid_ablation"]
    (row,) = ablation.rows.values()
    assert row["Total gap"].value == pytest.approx(row["Gold Total"].value - row["Whole Total"].value)  # type: ignore[operator]
    (hits,) = tables["hicupid_hit_at_k"].rows.values()
    assert hits["Persona"].value == pytest.approx(4 / 7)  # as hand-checked in tests/context
    assert tables["hicupid_test_2"].rows and tables["hicupid_wtl"].rows


def test_cli_run_report_agree_validate_and_retrieval(tmp_path: Path) -> None:
    runner = CliRunner()
    common = ["--cache", str(tmp_path / "c.sqlite"), "--no-progress", "--limit", "4"]
    out = runner.invoke(
        app,
        [
            "run",
            "hicupid",
            "--model",
            "scripted/a",
            "--judge",
            "scripted/b",
            "--run-dir",
            str(tmp_path / "a"),
            *common,
        ],
    )
    assert out.exit_code == 0, out.output
    out = runner.invoke(
        app,
        [
            "run",
            "hicupid",
            "--model",
            "scripted/a",
            "--judge",
            "scripted/c",
            "--both-orders",
            "--run-dir",
            str(tmp_path / "b"),
            *common,
        ],
    )
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["run", "hicupid", "--model", "scripted/a"])
    assert out.exit_code == 2 and "--judge is required" in out.output
    out = runner.invoke(
        app, ["run", "hicupid", "--context", "summaries", "--model", "scripted/a", "--judge", "scripted/b"]
    )
    assert out.exit_code == 2 and "unknown HiCUPID context" in out.output
    out = runner.invoke(
        app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep")]
    )
    assert out.exit_code == 0, out.output
    assert "Table 3: Test Set 1" in (tmp_path / "rep" / "report.md").read_text()
    out = runner.invoke(app, ["agree", str(tmp_path / "a"), str(tmp_path / "b")])
    assert out.exit_code == 0 and json.loads(out.stdout)["n_common_instances"] == 4
    out = runner.invoke(
        app,
        ["rescore", str(tmp_path / "a"), "--judge", "scripted/d", "--run-dir", str(tmp_path / "d"),
         "--cache", str(tmp_path / "c.sqlite"), "--no-progress"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert RunDir(tmp_path / "d").read_manifest()["identity"]["models"]["judge"] == "scripted/d"
    out = runner.invoke(
        app, ["rescore", str(tmp_path / "d"), "--judge", "scripted/e", "--judge-format", "xml"]
    )
    assert out.exit_code == 2 and "judge format must be one of" in out.output
    out = runner.invoke(app, ["validate", "--benchmark", "hicupid", "fixture"])
    assert out.exit_code == 0 and json.loads(out.stdout)["questions"] == 42
    out = runner.invoke(
        app, ["run", "hicupid-retrieval", "--retriever", "bm25", "--out", str(tmp_path / "r")]
    )
    assert out.exit_code == 0, out.output
    assert "bm25 dialogue 1" in out.stdout and "bm25 utterance 25" in out.stdout
