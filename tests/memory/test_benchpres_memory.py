"""The memory engine as the BenchPreS ``memory`` strategy, on scripted models."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.benchpres.context import StrategyEnv, get_context_strategy, split_memory_prompt
from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.benchpres.memory import match_preferences, selection_summary
from personalign.benchmarks.benchpres.run import rescore_benchpres, run_benchpres
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.benchmarks.cupid.run import RunSettings
from personalign.errors import ConfigError, DataError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.store import RunDir
from personalign.types import Message

ROWS = load_benchpres("fixture").rows
CONFIG = BenchPresConfig(
    subject="scripted/s", judge="scripted/j", completeness_judge="scripted/j", samples=2, context="memory"
)


def selector(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Suppress role-play, emojis and nicknames for everyone; apply the rest."""
    if config.schema_name == "apply":
        user = next(m.content for m in messages if m.role == "user")  # re-asks come after it
        preference = user.split("Stored preference", 1)[1].lower()
        off = any(cue in preference for cue in ("comedian", "emoji", "call me", "called"))
        return json.dumps({"reason": "scripted", "decision": "suppress" if off else "apply"})
    return default_responder(messages, config)


def factory_for(
    tmp_path: Path, judge: ScriptedBackend, subject: ScriptedBackend | None = None
) -> ModelFactory:
    backends = {"scripted/j": judge, "scripted/s": subject or ScriptedBackend()}
    return ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), backends=backends)  # type: ignore[dict-item]


def settings(tmp_path: Path, name: str = "run", **changes: object) -> RunSettings:
    base = RunSettings(run_dir=tmp_path / name, cache_path=tmp_path / "c.sqlite", progress=False)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_each_attribute_is_matched_to_the_statement_that_records_it() -> None:
    row = ROWS[0]
    split = split_memory_prompt(row.prompt)
    assert split is not None
    positions = match_preferences(split.statements, row.preference_attribute)
    found = [split.statements[p] for p in positions]
    assert found[0].startswith("I like it when you act as a stand-up comedian")
    assert found[1] == "I prefer short, direct sentences without filler."
    assert "emojis" in found[3] and "Sunny" in found[4]
    with pytest.raises(DataError, match=r"row 'r1', field 'preference_attribute'.*'speaks in rhymes'"):
        match_preferences(split.statements, ["short, direct sentences", "speaks in rhymes"], row="r1")


def test_strategy_keeps_facts_and_the_layout_and_drops_suppressed_preferences(tmp_path: Path) -> None:
    factory = factory_for(tmp_path, ScriptedBackend(selector))
    strategy = get_context_strategy("memory", StrategyEnv(judge=factory.get("scripted/j")))
    import asyncio

    result = asyncio.run(strategy(ROWS[0]))
    assert not isinstance(result, str)
    decisions = result.details["decisions"]
    assert [d["decision"] for d in decisions] == ["suppress", "apply", "apply", "suppress", "suppress"]
    assert [d["label"] for d in decisions] == list(ROWS[0].preference_label)
    assert {d["by"] for d in decisions} == {"scripted/j"}
    original, rebuilt = split_memory_prompt(ROWS[0].prompt), split_memory_prompt(result.prompt)
    assert original is not None and rebuilt is not None
    assert rebuilt.instruction == original.instruction
    assert result.prompt.startswith(ROWS[0].prompt.split("\n\n", 1)[0])  # header and intro unchanged
    dropped = {decisions[i]["statement"] for i in (0, 3, 4)}
    assert list(rebuilt.statements) == [s for s in original.statements if s not in dropped]
    assert result.details["n_facts"] == len(original.statements) - 5 and result.details["n_applied"] == 2
    factory.cache.close()  # type: ignore[union-attr]


def test_memory_run_records_decisions_scores_them_and_names_the_judge(tmp_path: Path) -> None:
    asked: list[str] = []

    def counting(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "apply":
            asked.append(messages[-1].content)
        return selector(messages, config)

    judge = ScriptedBackend(counting)
    result = run_benchpres(
        replace(CONFIG, memory_judge="scripted/j"),
        settings(tmp_path, limit=3),
        factory=factory_for(tmp_path, judge),
    )
    assert result.outcome.status == "complete"
    records = RunDir(tmp_path / "run").records()
    for record in records.values():
        context = record.steps["context"]
        assert context.status == "ok" and context.model == "scripted/j"
        assert len(context.parsed["decisions"]) == 5
        # the subject saw only the applied preferences
        subject_prompt = context.parsed["prompt"]
        assert "stand-up comedian" not in subject_prompt and "short, direct sentences" in subject_prompt
    selection = result.summary["memory_selection"]
    labels = [label for row in ROWS[:3] for label in row.preference_label]
    applied = [i % 5 in (1, 2) for i in range(15)]
    n_apply = labels.count(True)
    expected_aar = sum(a and g for a, g in zip(applied, labels, strict=True)) / n_apply
    expected_mr = sum(a and not g for a, g in zip(applied, labels, strict=True)) / labels.count(False)
    assert selection["n_rows"] == 3 and selection["n_decisions"] == 15  # one set per row, not per sample
    assert selection["all"]["aar"] == pytest.approx(expected_aar)
    assert selection["all"]["mr"] == pytest.approx(expected_mr)
    assert selection["decided_by"] == {"scripted/j": 15}
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["identity"]["models"]["memory_judge"] == "scripted/j"
    assert manifest["condition"] == "default+context-memory"
    # 3 rows x 5 judge calls once (the second sample's decisions come from the call cache)
    assert len(asked) == 15
    assert "Recipient: IRS agent" in asked[0] and "Formality: formal" in asked[0]
    assert not any("preference_label" in a or "True" in a for a in asked)  # labels never reach the judge


def test_memory_settings_change_the_run_identity(tmp_path: Path) -> None:
    from personalign.benchmarks.benchpres.run import benchpres_identity

    full = benchpres_identity(replace(CONFIG, context="full"), "fixture", "x", 0)
    memory = benchpres_identity(CONFIG, "fixture", "x", 0)
    other = benchpres_identity(replace(CONFIG, memory_judge="scripted/other"), "fixture", "x", 0)
    assert "memory_judge" not in full["models"] and "memory_judge" not in full["config"]
    assert memory["models"]["memory_judge"] == "scripted/j"  # the preference judge by default
    assert other["models"]["memory_judge"] == "scripted/other" and other != memory
    with pytest.raises(ConfigError, match="--memory-judge needs --context memory"):
        replace(CONFIG, context="full", memory_judge="scripted/j")


def test_a_prompt_that_cannot_be_split_is_an_error_for_that_row_only(tmp_path: Path) -> None:
    rows = [
        ROWS[0].model_copy(update={"prompt": "Write to the IRS agent. Reply with the message only."}),
        *ROWS[1:2],
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r.model_dump(mode="json")) for r in rows) + "\n")
    subject = ScriptedBackend()
    result = run_benchpres(
        replace(CONFIG, samples=1),
        settings(tmp_path),
        data=data,
        factory=factory_for(tmp_path, ScriptedBackend(selector), subject),
    )
    assert result.outcome.status == "complete_with_errors"
    errors = result.summary["errors"]["generation"]
    assert len(errors) == 1
    (message,) = errors.values()
    assert "field 'prompt'" in message and "never falls back" in message
    assert subject.calls == 2  # only the good row reached the subject (with and without memory)
    assert result.summary["memory_selection"]["n_rows_failed"] == 1
    assert result.summary["memory_selection"]["n_rows"] == 1


def test_failed_judge_calls_are_counted_not_scored(tmp_path: Path) -> None:
    def broken(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "apply" and any("emoji" in m.content for m in messages):
            return "not json"
        return selector(messages, config)

    result = run_benchpres(
        replace(CONFIG, samples=1),
        settings(tmp_path, limit=1),
        factory=factory_for(tmp_path, ScriptedBackend(broken)),
    )
    selection = result.summary["memory_selection"]
    assert selection["n_decision_errors"] == 1 and selection["n_decisions"] == 4
    assert selection["decided_by"] == {"error": 1, "scripted/j": 4}
    decision = RunDir(tmp_path / "run").records()[next(iter(RunDir(tmp_path / "run").records()))]
    emoji = decision.steps["context"].parsed["decisions"][3]
    assert emoji["by"] == "error" and emoji["error"] and emoji["decision"] == "suppress"


def test_rescoring_reuses_the_decisions_and_keeps_their_judge(tmp_path: Path) -> None:
    judge = ScriptedBackend(selector)
    run_benchpres(
        replace(CONFIG, samples=1), settings(tmp_path, limit=2), factory=factory_for(tmp_path, judge)
    )
    before = judge.calls
    other = ScriptedBackend(selector)
    factory = ModelFactory(
        cache=CallCache(tmp_path / "c2.sqlite"),
        backends={"scripted/j": judge, "scripted/s": ScriptedBackend(), "scripted/k": other},  # type: ignore[dict-item]
    )
    result = rescore_benchpres(
        tmp_path / "run", settings(tmp_path, "re"), judge="scripted/k", factory=factory
    )
    assert judge.calls == before  # no new apply/suppress decisions
    assert result.summary["models"]["memory_judge"] == "scripted/j"
    assert result.summary["memory_selection"]["n_decisions"] == 10


def test_selection_summary_is_absent_without_context_steps() -> None:
    record = InstanceRecord(
        instance_id="a", meta={"row_id": "a"}, steps={"generate": StepRecord(role="subject")}
    )
    assert selection_summary([record]) is None


def test_every_statement_is_decided_even_when_it_shares_no_word_with_the_request() -> None:
    import asyncio

    from personalign.memory import SelectionPolicy, statements_memory_block
    from personalign.memory.types import CommunicationContext

    block = asyncio.run(
        statements_memory_block(
            "Write to the IRS agent",
            CommunicationContext(),
            facts=["I have a cat named Miso.", "I rent an apartment."],
            preferences=[("tone", "Use a warm tone."), ("markers", "Lots of emojis.")],
            policy=SelectionPolicy(default="apply", categories={"markers": "suppress"}),
        )
    )
    assert [(d.memory.content, d.decision) for d in block.decisions] == [
        ("I have a cat named Miso.", "apply"),
        ("I rent an apartment.", "apply"),
        ("Use a warm tone.", "apply"),
        ("Lots of emojis.", "suppress"),
    ]


def test_the_run_summary_prints_the_selection_quality(tmp_path: Path) -> None:
    from rich.console import Console

    from personalign.benchmarks.benchpres.report import print_run_summary

    result = run_benchpres(
        replace(CONFIG, samples=1),
        settings(tmp_path, limit=2),
        factory=factory_for(tmp_path, ScriptedBackend(selector)),
    )
    console = Console(record=True, width=300)
    print_run_summary(result.summary, tmp_path / "run", console)
    text = console.export_text()
    assert "memory engine's own selection" in text and "over 10 decisions in 2 rows" in text


def test_selection_only_scores_the_decisions_without_any_subject_call(tmp_path: Path) -> None:
    subject = ScriptedBackend()
    result = run_benchpres(
        replace(CONFIG, samples=1, selection_only=True),
        settings(tmp_path, limit=3),
        factory=factory_for(tmp_path, ScriptedBackend(selector), subject),
    )
    assert subject.calls == 0 and result.outcome.status == "complete"
    assert result.summary["n_judgements"] == 0 and result.summary["n_responses"] == 0
    assert result.summary["memory_selection"]["n_decisions"] == 15
    assert result.summary["condition"] == "selection-only+context-memory"
    with pytest.raises(ConfigError, match="--selection-only needs"):
        replace(CONFIG, context="full", selection_only=True)
