"""BenchPreS runs on the scripted model: conditions, reasoning, errors, resume, cache, manifest."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.benchpres.context import register_context_strategy, split_memory_prompt
from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.benchpres.run import defaults_for, rescore_benchpres, run_benchpres
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.benchmarks.benchpres.steps import (
    BenchPresBenchmark,
    BenchPresConfig,
    BenchPresItem,
    BenchPresModels,
    summarize,
)
from personalign.benchmarks.cupid.run import RunSettings
from personalign.errors import ConfigError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.llm.types import BackendResponse
from personalign.runs.store import RunDir
from personalign.types import Message

CONFIG = BenchPresConfig(subject="scripted/s", judge="scripted/j", completeness_judge="scripted/j", samples=2)


def settings(tmp_path: Path, name: str = "run", **changes: object) -> RunSettings:
    base = RunSettings(run_dir=tmp_path / name, cache_path=tmp_path / "c.sqlite", progress=False)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_default_run_scores_every_attribute_of_every_sample(tmp_path: Path) -> None:
    result = run_benchpres(CONFIG, settings(tmp_path, limit=4))
    summary = result.summary
    assert result.outcome.status == "complete"
    assert summary["n_instances"] == 8 and summary["n_rows"] == 4  # 4 rows x 2 samples
    assert summary["n_judgements"] == 8 * 5 and summary["n_judgement_errors"] == 0
    assert summary["judge_methods"] == {"llm": 32, "nickname_rule": 8}
    assert summary["all"]["n_samples"] == 2
    assert summary["all"]["n_suppress"] + summary["all"]["n_apply"] == 40
    assert 0.0 <= summary["all"]["mr"] <= 1.0 and summary["completeness"]["n"] == 8
    assert set(summary["by_category"]) == {"role", "style", "tone", "markers", "nickname"}
    records = RunDir(tmp_path / "run").records()
    record = records[
        "Maya Chen#IRS agent#request an installment payment plan for the federal taxes the user owes#s1"
    ]
    assert record.meta["sample"] == 1 and record.meta["domain"] == "finance/legal"
    nickname = record.results["preferences"].scores["judgements"][4]
    assert nickname["method"] == "nickname_rule" and record.steps["judge/4"].model is None
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["benchmark"] == "benchpres" and manifest["condition"] == "default"
    assert set(manifest["prompts"]) >= {"benchpres/subject", "benchpres/judge_preference"}


def test_samples_differ_in_the_cache_key_and_temperature_is_used(tmp_path: Path) -> None:
    seen: list[GenerateConfig] = []

    def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.json_schema is None:
            seen.append(config)
        return default_responder(messages, config)

    backend = ScriptedBackend(responder)
    factory = ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/s": backend})
    run_benchpres(CONFIG, settings(tmp_path, limit=1), factory=factory)
    # per sample one message with memory and one without (the completeness reference), none cached
    assert sorted(c.sample_index for c in seen) == [0, 0, 1, 1]
    assert {c.temperature for c in seen} == {1.0} and {c.reasoning for c in seen} == {None}


def test_mitigation_adds_the_instruction_and_lowers_misapplication(tmp_path: Path) -> None:
    plain = run_benchpres(CONFIG, settings(tmp_path, "plain"))
    mitigated = run_benchpres(replace(CONFIG, mitigation=True), settings(tmp_path, "mitigated"))
    record = next(iter(RunDir(tmp_path / "mitigated").records().values()))
    assert record.steps["generate"].prompt == "benchpres/subject_mitigation"
    assert mitigated.summary["condition"] == "mitigation"
    assert mitigated.summary["all"]["mr"] < plain.summary["all"]["mr"]


def test_reasoning_on_keeps_raw_reasoning_and_judges_see_only_the_message(tmp_path: Path) -> None:
    judge_inputs: list[str] = []

    def judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        judge_inputs.append(messages[-1].content)
        return default_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": ScriptedBackend(), "scripted/j": ScriptedBackend(judge)},
    )
    config = replace(CONFIG, reasoning="on", samples=1)
    result = run_benchpres(config, settings(tmp_path, limit=2), factory=factory)
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    assert record.steps["generate"].raw[0].startswith("<think>")
    assert "<think>" not in record.steps["generate"].parsed["message"]
    assert judge_inputs and all("<think>" not in text and "First list" not in text for text in judge_inputs)
    assert result.summary["responses_with_inline_reasoning"] == 2
    assert result.summary["condition"] == "default+reasoning-on"


def test_reasoning_on_is_refused_for_a_backend_that_cannot_do_it(tmp_path: Path) -> None:
    config = replace(CONFIG, subject="local/smollm2", reasoning="on")
    with pytest.raises(ConfigError, match="cannot turn reasoning on"):
        run_benchpres(config, settings(tmp_path))


def test_judge_failures_are_errors_not_scores_and_resume_fixes_only_them(tmp_path: Path) -> None:
    def bad_judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "benchpres_preference" and messages[1].content.startswith(
            "Preference: act as a stand-up comedian"
        ):
            return "I think it follows."  # unparseable, also on the re-ask
        return default_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": ScriptedBackend(), "scripted/j": ScriptedBackend(bad_judge)},
    )
    config = replace(CONFIG, samples=1)
    first = run_benchpres(config, settings(tmp_path, limit=8), factory=factory)
    # Maya's rows (the first 8) each lose one judgement; nothing is scored in their place.
    assert first.outcome.status == "complete_with_errors"
    assert first.summary["n_judgement_errors"] == 8 and first.summary["n_judgements"] == 32
    assert len(first.summary["errors"]["judge"]) == 8
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    failed = record.results["preferences"].scores["judgements"][0]
    assert failed["applied"] is None and "unparseable" in failed["error"]
    assert record.steps["judge/0"].raw and "reask" in record.steps["judge/0"].flags

    # The unparseable answers are cached (the call itself succeeded), so resume without the cache,
    # as after fixing a judge server: only the failed steps are asked again.
    fixed = ScriptedBackend()
    subject = ScriptedBackend()
    factory = ModelFactory(cache=None, backends={"scripted/s": subject, "scripted/j": fixed})
    second = run_benchpres(config, settings(tmp_path, limit=8), factory=factory)
    assert second.outcome.status == "complete" and second.summary["n_judgements"] == 40
    assert subject.calls == 0  # saved responses were reused
    # only the 8 failed judgements were asked again (identical prompts share one request)
    assert fixed.calls == 1 and factory.tracker.calls + factory.tracker.cache_hits == 8


def test_failed_generation_marks_both_tasks_as_errors(tmp_path: Path) -> None:
    def subject(messages: Sequence[Message], config: GenerateConfig) -> str:
        if "send to the IRS agent" in messages[-1].content:
            return "<think>thinking only, then out of tokens"
        return "Dear landlord, hi"

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/s": ScriptedBackend(subject)}
    )
    result = run_benchpres(replace(CONFIG, samples=1), settings(tmp_path), factory=factory)
    errors = result.summary["errors"]["generation"]
    # Reasoning only, no message: an empty reply once the reasoning is set aside, never scored.
    assert len(errors) == 3 and all("empty reply" in e for e in errors.values())
    assert result.summary["n_responses"] == 21 and result.summary["n_judgements"] == 21 * 5


def test_rerun_is_free_and_a_new_directory_hits_the_cache(tmp_path: Path) -> None:
    first = run_benchpres(CONFIG, settings(tmp_path, limit=3))
    again = run_benchpres(CONFIG, settings(tmp_path, limit=3, use_cache=False))
    assert again.outcome.evaluated == 0
    assert again.summary == json.loads(json.dumps(first.summary))
    fresh = run_benchpres(CONFIG, settings(tmp_path, "run2", limit=3))
    assert fresh.summary["usage"]["calls"] == 0 and fresh.summary["usage"]["cache_hits"] > 0
    assert fresh.summary["all"] == first.summary["all"] and fresh.summary["n_judgements"] == 30


def test_other_configuration_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    run_benchpres(CONFIG, settings(tmp_path, limit=1))
    with pytest.raises(ConfigError, match="another configuration"):
        run_benchpres(replace(CONFIG, temperature=0.7), settings(tmp_path, limit=1))


def test_context_strategy_is_replaceable(tmp_path: Path) -> None:
    async def preferences_only(row: BenchPresRow) -> str:
        parts = split_memory_prompt(row.prompt)
        assert parts is not None
        kept = [s for s in parts.statements if "prefer" in s or "like" in s]
        return "# User Knowledge Memories\nNotes.\n\n" + "\n".join(kept) + "\n\n" + parts.instruction

    register_context_strategy("test-prefs-only", preferences_only)
    prompts: list[str] = []

    def subject(messages: Sequence[Message], config: GenerateConfig) -> str:
        prompts.append(messages[-1].content)
        return "Dear agent, regards."

    factory = ModelFactory(cache=None, backends={"scripted/s": ScriptedBackend(subject)})
    config = replace(CONFIG, context="test-prefs-only", samples=1)
    result = run_benchpres(config, settings(tmp_path, limit=1), factory=factory)
    assert result.summary["condition"] == "default+context-test-prefs-only"
    assert prompts and "freelance graphic designer" not in prompts[0] and "short, direct" in prompts[0]
    with pytest.raises(ConfigError, match="unknown context"):
        BenchPresConfig(subject="s/x", judge="s/y", completeness_judge="s/y", context="nope")


def test_a_failing_context_strategy_is_an_error_of_that_response(tmp_path: Path) -> None:
    async def broken(row: BenchPresRow) -> str:
        if row.name == "Maya Chen":
            raise RuntimeError("memory store offline")
        return row.prompt

    register_context_strategy("test-broken", broken)
    config = replace(CONFIG, context="test-broken", samples=1)
    result = run_benchpres(config, settings(tmp_path))
    assert result.outcome.status == "complete_with_errors"
    errors = result.summary["errors"]["generation"]
    assert len(errors) == 8 and all("memory store offline" in e for e in errors.values())
    assert result.summary["n_responses"] == 16 and result.summary["n_judgements"] == 80


def test_embedded_defaults_are_small_and_real_models_get_three_samples() -> None:
    assert defaults_for("local/smollm2").samples == 1
    assert defaults_for("local/smollm2?timeout=30").max_tokens == 160
    assert defaults_for("openai/gpt-4o").samples == 3


def test_summarize_skips_errored_judgements(tmp_path: Path) -> None:
    rows = load_benchpres().rows[:1]
    factory = ModelFactory(cache=None)
    models = BenchPresModels(
        subject=factory.get("scripted/s"),
        judge=factory.get("scripted/j"),
        completeness_judge=factory.get("scripted/j"),
    )
    bench = BenchPresBenchmark(replace(CONFIG, completeness=False), models)
    record = asyncio.run(bench.evaluate(BenchPresItem(rows[0], 0)))
    assert set(record.results) == {"preferences"}
    judgements = record.results["preferences"].scores["judgements"]
    judgements[1].update(applied=None, judged=None, error="judge/1: boom")
    summary = summarize([record])
    assert summary["n_judgements"] == 4 and summary["n_judgement_errors"] == 1
    assert summary["completeness"]["n"] == 0


class ReasoningBackend:
    """Returns its reasoning apart from the text, as OpenAI-compatible reasoning servers do."""

    supports_json_schema = True
    supports_reasoning = True

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        return BackendResponse(text="Dear agent, please help.", raw={"reasoning": "Emojis do not fit here."})

    async def aclose(self) -> None:
        return None


def test_backend_reasoning_is_kept_in_the_step_record(tmp_path: Path) -> None:
    factory = ModelFactory(cache=None, backends={"scripted/s": ReasoningBackend()})
    run_benchpres(replace(CONFIG, samples=1, reasoning="on"), settings(tmp_path, limit=1), factory=factory)
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    assert record.steps["generate"].reasoning == ["Emojis do not fit here."]
    assert record.steps["generate"].parsed["message"] == "Dear agent, please help."


def test_rescore_rejudges_saved_responses_without_calling_the_subject(tmp_path: Path) -> None:
    first = run_benchpres(CONFIG, settings(tmp_path, limit=2))
    subject, other_judge = ScriptedBackend(), ScriptedBackend(lambda m, c: '{"label": "follow"}')
    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": subject, "scripted/other": other_judge},
    )
    result = rescore_benchpres(
        tmp_path / "run",
        settings(tmp_path, "rescored"),
        judge="scripted/other",
        completeness_judge="scripted/j",
        factory=factory,
    )
    assert subject.calls == 0 and other_judge.calls > 0
    assert result.summary["models"]["judge"] == "scripted/other"
    assert result.summary["n_instances"] == first.summary["n_instances"] == 4
    assert result.summary["by_category"]["role"]["mr"] == 1.0  # the new judge says follow to all
    old = RunDir(tmp_path / "run").records()
    new = RunDir(tmp_path / "rescored").records()
    assert {k: v.steps["generate"].raw for k, v in old.items()} == {
        k: v.steps["generate"].raw for k, v in new.items()
    }
    manifest = json.loads((tmp_path / "rescored" / "manifest.json").read_text())
    assert manifest["rescored_from"]["run_dir"] == str(tmp_path / "run")
    with pytest.raises(ConfigError, match="needs --judge"):
        rescore_benchpres(tmp_path / "run", settings(tmp_path, "x"))
