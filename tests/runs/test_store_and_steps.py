"""`RunDir` (append-only samples, truncation, corruption) and `StepRunner` (reuse, re-ask, errors)."""

from __future__ import annotations

import json
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from personalign.benchmarks.cupid.judges import CHECKLIST_SCHEMA, parse_checklist
from personalign.errors import ConfigError, ModelCallError
from personalign.llm import GenerateConfig, UsageTracker
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.llm.model import Model
from personalign.prompts import load_template
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import REASK, StepFailed, StepRunner
from personalign.runs.store import RunDir
from personalign.types import Message
from tests.support.models import run, scripted_model

T = TypeVar("T")


# --- RunDir -----------------------------------------------------------------------------------


def make_record(instance_id: str, score: float) -> InstanceRecord:
    return InstanceRecord(
        instance_id=instance_id,
        meta={"instance_type": "consistent"},
        steps={"infer": StepRecord(role="subject", raw=["### Most Likely Preference\nX"], parsed="X")},
        results={"inference": TaskResult(status="ok", scores={"f1": score})},
    )


def test_append_and_records_keep_latest_per_id_in_first_seen_order(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.records() == {}
    run.append(make_record("a#consistent", 0.1))
    run.append(make_record("b#consistent", 0.2))
    run.append(make_record("a#consistent", 0.9))
    records = run.records()
    assert list(records) == ["a#consistent", "b#consistent"]
    assert records["a#consistent"].results["inference"].scores["f1"] == 0.9
    assert records["b#consistent"].results["inference"].scores["f1"] == 0.2
    assert records["a#consistent"].steps["infer"].parsed == "X"
    assert len(run.samples_path.read_text(encoding="utf-8").splitlines()) == 3


def test_truncated_last_line_is_ignored_then_dropped(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append(make_record("a#consistent", 0.5))
    full = make_record("b#consistent", 0.7).model_dump_json()
    with run.samples_path.open("a", encoding="utf-8") as handle:
        handle.write(full[: len(full) // 2])
    with pytest.warns(UserWarning, match="truncated"):
        records = run.records()
    assert list(records) == ["a#consistent"]

    assert run.drop_partial_line() is True
    text = run.samples_path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    assert len(text.splitlines()) == 1
    assert run.drop_partial_line() is False
    # appending after the cut gives a clean file again
    run.append(make_record("b#consistent", 0.7))
    assert list(run.records()) == ["a#consistent", "b#consistent"]


def test_drop_partial_line_without_samples(tmp_path: Path) -> None:
    assert RunDir(tmp_path / "new").drop_partial_line() is False


def test_corrupt_middle_line_raises_naming_the_line(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append(make_record("a#consistent", 0.5))
    with run.samples_path.open("a", encoding="utf-8") as handle:
        handle.write('{"instance_id": "broken", "results": "nope"}\n')
    run.append(make_record("c#consistent", 0.5))
    with pytest.raises(ConfigError, match="line 2") as info:
        run.records()
    assert str(run.samples_path) in str(info.value)


def test_corrupt_complete_last_line_is_not_silently_ignored(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append(make_record("a#consistent", 0.5))
    with run.samples_path.open("a", encoding="utf-8") as handle:
        handle.write("garbage\n")
    with pytest.raises(ConfigError, match="line 2"):
        run.records()


def test_manifest_and_summary_round_trip(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert not run.exists()
    with pytest.raises(ConfigError):
        run.read_manifest()
    assert run.read_summary() is None
    run.write_manifest({"benchmark": "cupid", "n": 3})
    run.write_summary({"f1": 0.5})
    assert run.exists()
    assert run.read_manifest() == {"benchmark": "cupid", "n": 3}
    assert run.read_summary() == {"f1": 0.5}
    assert not list(run.path.glob("*.tmp"))


# --- StepRunner -------------------------------------------------------------------------------

GOOD = json.dumps({"checklist": ["Does the update lead with raw counts?"]})
CONFIG = GenerateConfig(json_schema=CHECKLIST_SCHEMA, schema_name="checklist")
VALUES = {"preference": "Updates should lead with raw counts."}


class Recorder:
    """A responder that replays `outputs` in order (the last one repeats) and keeps each prompt."""

    def __init__(self, *outputs: str) -> None:
        self.outputs = list(outputs)
        self.prompts: list[list[Message]] = []

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        self.prompts.append(list(messages))
        return self.outputs[min(len(self.prompts), len(self.outputs)) - 1]


def decompose(steps: StepRunner, model: Model, reasks: int) -> Coroutine[Any, Any, list[str]]:
    return steps.call(
        "decompose",
        role="decomposer",
        model=model,
        template=load_template("cupid/decompose"),
        values=VALUES,
        config=CONFIG,
        parse=parse_checklist,
        reasks=reasks,
    )


def test_reuses_an_ok_previous_step_without_calling(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD))
    factory, model = scripted_model(tmp_path, backend)
    previous = StepRecord(role="decomposer", parsed=["Earlier item?"], raw=["old"], model="scripted/x")
    steps = StepRunner({"decompose": previous})
    assert run(factory, decompose(steps, model, reasks=1)) == ["Earlier item?"]
    assert backend.calls == 0
    assert steps.steps["decompose"] is previous


def test_failed_previous_step_is_not_reused(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD))
    factory, model = scripted_model(tmp_path, backend)
    previous = StepRecord(role="decomposer", status="error", error="boom", raw=["junk"])
    steps = StepRunner({"decompose": previous})
    assert run(factory, decompose(steps, model, reasks=0)) == ["Does the update lead with raw counts?"]
    assert backend.calls == 1
    record = steps.steps["decompose"]
    assert record.status == "ok"
    assert record.raw == [GOOD]
    assert record.error is None


def test_first_call_records_the_step(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD))
    factory, model = scripted_model(tmp_path, backend)
    steps = StepRunner()
    template = load_template("cupid/decompose")
    assert run(factory, decompose(steps, model, reasks=1)) == ["Does the update lead with raw counts?"]
    record = steps.steps["decompose"]
    assert (record.role, record.model, record.prompt) == ("decomposer", "scripted/x", "cupid/decompose")
    assert record.prompt_sha256 == template.sha256
    assert record.status == "ok"
    assert record.flags == []
    assert record.raw == [GOOD]
    assert record.parsed == ["Does the update lead with raw counts?"]
    assert record.cached is False
    assert record.prompt_tokens > 0 and record.completion_tokens > 0


def test_reask_once_after_a_parse_failure(tmp_path: Path) -> None:
    responder = Recorder("Sure! Here is the checklist: {oops", GOOD)
    backend = ScriptedBackend(responder)
    factory, model = scripted_model(tmp_path, backend)
    steps = StepRunner()
    assert run(factory, decompose(steps, model, reasks=1)) == ["Does the update lead with raw counts?"]
    record = steps.steps["decompose"]
    assert record.status == "ok"
    assert record.flags == ["reask"]
    assert record.raw == ["Sure! Here is the checklist: {oops", GOOD]
    assert backend.calls == 2
    # the re-ask shows the model its answer and the reason, after the original prompt
    first, second = responder.prompts
    assert second[: len(first)] == first
    assert second[len(first)] == Message(role="assistant", content="Sure! Here is the checklist: {oops")
    reask = second[len(first) + 1]
    assert reask.role == "user"
    assert reask.content.startswith(REASK.split("{reason}")[0])
    assert "no JSON value" in reask.content
    assert record.prompt_tokens == sum(sum(len(m.content.split()) for m in p) for p in responder.prompts)


def test_exhausted_reasks_record_error_and_raise(tmp_path: Path) -> None:
    bad = json.dumps({"checklist": [f"Item {i}?" for i in range(6)]})
    backend = ScriptedBackend(Recorder(bad))
    factory, model = scripted_model(tmp_path, backend)
    steps = StepRunner()
    with pytest.raises(StepFailed, match="decompose") as info:
        run(factory, decompose(steps, model, reasks=1))
    assert info.value.step == "decompose"
    record = steps.steps["decompose"]
    assert record.status == "error"
    assert record.raw == [bad, bad]
    assert record.flags == ["reask"]
    assert record.parsed is None
    assert record.error is not None and "unparseable output" in record.error
    assert "6 checklist items" in record.error
    assert backend.calls == 2


def test_no_reasks_means_one_attempt(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder("not json at all"))
    factory, model = scripted_model(tmp_path, backend)
    steps = StepRunner()
    with pytest.raises(StepFailed):
        run(factory, decompose(steps, model, reasks=0))
    assert backend.calls == 1
    assert steps.steps["decompose"].raw == ["not json at all"]
    assert steps.steps["decompose"].flags == []


def test_model_call_error_becomes_an_error_step(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD), failures=[ModelCallError("server exploded", retryable=False)])
    factory, model = scripted_model(tmp_path, backend)
    steps = StepRunner()
    with pytest.raises(StepFailed, match="server exploded"):
        run(factory, decompose(steps, model, reasks=2))
    record = steps.steps["decompose"]
    assert record.status == "error"
    assert record.error is not None and "server exploded" in record.error
    assert record.raw == []
    assert record.parsed is None
    assert backend.calls == 1


def test_budget_exceeded_becomes_an_error_step(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD))
    factory, model = scripted_model(tmp_path, backend, tracker=UsageTracker(max_cost_usd=0.0))
    steps = StepRunner()
    with pytest.raises(StepFailed, match="budget"):
        run(factory, decompose(steps, model, reasks=0))
    assert steps.steps["decompose"].status == "error"
    assert backend.calls == 0


def test_second_runner_hits_the_cache(tmp_path: Path) -> None:
    backend = ScriptedBackend(Recorder(GOOD))
    factory, model = scripted_model(tmp_path, backend)

    async def twice() -> tuple[StepRecord, StepRecord]:
        first, second = StepRunner(), StepRunner()
        await decompose(first, model, reasks=0)
        await decompose(second, model, reasks=0)
        return first.steps["decompose"], second.steps["decompose"]

    first, second = run(factory, twice())
    assert backend.calls == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.parsed == first.parsed


def test_record_without_a_call() -> None:
    steps = StepRunner()
    assert steps.record("decompose", "decomposer", [], ["empty_inference"]) == []
    record = steps.steps["decompose"]
    assert (record.role, record.model, record.parsed) == ("decomposer", None, [])
    assert record.flags == ["empty_inference"]
    assert record.status == "ok"
