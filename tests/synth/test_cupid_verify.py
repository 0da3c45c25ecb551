"""The CUPID verifier stage with scripted models: planted dialogues that hide checklist items are
caught, repaired once or dropped with the reason; agreement with human labels is reported."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.synth import CupidSynthConfig, synthesize_cupid
from personalign.benchmarks.cupid.synth_verify import agreement_with, instance_reasons, repairable
from personalign.errors import ConfigError, DataError
from personalign.llm import GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.types import Message
from tests.support.synth_responders import leaky_request

SPEC = "scripted/synth"


def config(**overrides: Any) -> CupidSynthConfig:
    base: dict[str, Any] = dict(
        generator=SPEC, user_simulator=SPEC, assistant=SPEC, decomposer=SPEC, verifier=SPEC, n_personas=1
    )
    return CupidSynthConfig(**{**base, **overrides})


def factory(responder: Any = None) -> ModelFactory:
    backends: dict[str, Backend] = {str(parse_model_spec(SPEC)): ScriptedBackend(responder)}
    return ModelFactory(cache=None, backends=backends)


def hiding(hide_when: Any) -> Any:
    """A user simulator whose messages never mention any checklist item when `hide_when(config,
    prompt)` holds (the planted defect); otherwise the scripted one, which quotes the items."""

    def respond(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = default_responder(messages, config)
        user = next(m.content for m in messages if m.role == "user")
        if config.schema_name == "synth_user_turn" and hide_when(config, user):
            data = json.loads(text)
            data["message"] = "Hmm, okay."
            return json.dumps(data)
        return text

    return respond


def verify_stage(out: Path) -> dict[str, Any]:
    state = json.loads(next((out / "state").glob("*.json")).read_text())
    return state["stages"]["verify"]  # type: ignore[no-any-return]


def test_clean_dialogues_are_verified_and_every_instance_is_written(tmp_path: Path) -> None:
    result = synthesize_cupid(config(), tmp_path / "out", factory())
    v = result.summary["verification"]
    assert (v["instances_checked"], v["verified"], v["repaired"], v["dropped"]) == (3, 3, 0, 0)
    assert len(load_cupid(tmp_path / "out" / "cupid.jsonl").instances) == 3
    report = json.loads((tmp_path / "out" / "validation.json").read_text())
    decisions = next(iter(report.values()))["verification"]["decisions"]
    assert {t: d["decision"] for t, d in decisions.items()} == {
        "consistent": "verified",
        "contrastive": "verified",
        "changing": "verified",
    }


def test_hidden_items_are_caught_and_repaired_by_a_new_sample(tmp_path: Path) -> None:
    # The first sample of every dialogue of the changed preference hides its items.
    def planted(config: GenerateConfig, user: str) -> bool:
        return config.sample_index == 0 and "Your preference: Now, help with" in user

    out = tmp_path / "out"
    result = synthesize_cupid(config(), out, factory(hiding(planted)))
    v = result.summary["verification"]
    assert (v["verified"], v["repaired"], v["dropped"]) == (2, 1, 0)
    assert v["failed_first_check_by_reason"] == {"items (changed)": 1}
    stage = verify_stage(out)
    changing = stage["decisions"]["changing"]
    assert changing["decision"] == "repaired" and changing["reasons"] == []
    assert all("not expressed" in r for r in changing["first_reasons"])
    assert len(stage["repaired_sessions"]) == 2 and len(stage["rounds"]) == 2
    # the written changing instance carries the repaired dialogues, not the planted ones
    dataset = load_cupid(out / "cupid.jsonl")
    changing_instance = next(i for i in dataset.instances if i.instance_type == "changing")
    said = [m.content for s in changing_instance.prior_interactions for m in s.dialogue if m.role == "user"]
    assert "Hmm, okay." not in said
    assert len(dataset.instances) == 3


def test_dialogues_that_keep_hiding_items_are_dropped_with_the_reason(tmp_path: Path) -> None:
    def always(config: GenerateConfig, user: str) -> bool:
        return "Your preference: Now, help with" in user

    out = tmp_path / "out"
    result = synthesize_cupid(config(), out, factory(hiding(always)))
    v = result.summary["verification"]
    assert (v["verified"], v["repaired"], v["dropped"]) == (2, 0, 1)
    assert v["dropped_by_reason"] == {"items (changed)": 1}
    assert sorted(i.instance_type for i in load_cupid(out / "cupid.jsonl").instances) == [
        "consistent",
        "contrastive",
    ]
    dropped = [json.loads(line) for line in (out / "dropped.jsonl").read_text().splitlines()]
    assert [d["instance_type"] for d in dropped] == ["changing"]
    assert dropped[0]["reasons"] and all("items (changed)" in r for r in dropped[0]["reasons"])
    assert result.summary["instances_written"] == 2


def test_a_change_that_does_not_contradict_and_a_revealing_request_are_dropped(tmp_path: Path) -> None:
    def respond(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "synth_verify_change":
            return json.dumps({"contradicts": False, "reason": "only a rewording"})
        return default_responder(messages, config)

    result = synthesize_cupid(config(), tmp_path / "a", factory(respond))
    stage = verify_stage(tmp_path / "a")
    assert stage["decisions"]["changing"]["decision"] == "dropped"
    assert stage["decisions"]["changing"]["reasons"][0].startswith("change: ")
    assert stage["repaired_sessions"] == []  # not repairable by re-simulating dialogues
    assert result.summary["verification"]["dropped_by_reason"] == {"change": 1}

    def unparseable(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "synth_verify_request":
            return "no idea"
        return default_responder(messages, config)

    result = synthesize_cupid(config(), tmp_path / "b", factory(unparseable))
    # a verdict that cannot be parsed never passes an instance
    assert result.summary["verification"]["dropped"] == 3
    assert result.summary["instances_written"] == 0


def test_reasons_and_repairability_are_pure() -> None:
    checklists = {"current": ["a?", "b?"], "changed": ["c?"], "contrastive": ["d?"]}
    verdicts = {
        "items": {
            "current": {"expressed": [True, False]},
            "changed": {"expressed": [True]},
            "contrastive": {"error": "unparseable"},
        },
        "request": {
            "current": {"inferable": False, "evidence": ""},
            "changed": {"inferable": True, "evidence": "x"},
        },
        "change": {"contradicts": True, "reason": ""},
    }
    consistent = instance_reasons("consistent", verdicts, checklists)
    assert consistent == ["items (current): checklist item 2 not expressed in the dialogues ('b?')"]
    assert repairable(consistent)
    contrastive = instance_reasons("contrastive", verdicts, checklists)
    assert any("no verdict" in r for r in contrastive) and not repairable(contrastive)
    changing = instance_reasons("changing", verdicts, checklists)
    assert any(r.startswith("request: the changed preference") for r in changing) and not repairable(changing)


def test_agreement_with_human_labels(tmp_path: Path) -> None:
    def always(config: GenerateConfig, user: str) -> bool:
        return "Your preference: Now, help with" in user

    out = tmp_path / "out"
    first = synthesize_cupid(config(), out, factory(hiding(always)))
    pid = next(iter(json.loads((out / "validation.json").read_text())))
    labels = tmp_path / "human.jsonl"
    rows = [
        {"persona_id": pid, "instance_type": "consistent", "valid": True},
        {"persona_id": pid, "instance_type": "contrastive", "valid": False},  # disagrees
        {"persona_id": pid, "instance_type": "changing", "valid": False},
        {"persona_id": "nobody", "instance_type": "changing", "valid": True},
    ]
    labels.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    again = synthesize_cupid(config(), out, factory(hiding(always)), verify_against=labels)
    agreement = again.summary["verification"]["agreement"]
    assert agreement["n"] == 3 and agreement["accuracy"] == pytest.approx(2 / 3)
    assert agreement["kappa"] == pytest.approx(0.4)
    assert agreement["unmatched"] == ["nobody/changing"]
    assert first.summary["verification"].get("agreement") is None

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"persona_id": pid, "instance_type": "changing", "valid": "yes"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl.*valid"):
        agreement_with(bad, {})
    with pytest.raises(ConfigError, match="verifier"):
        synthesize_cupid(config(verifier=None), tmp_path / "x", factory(), verify_against=labels)


def test_a_rejected_persona_is_not_counted_as_verified_instances(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = synthesize_cupid(config(), out, factory(leaky_request))
    assert len(result.summary["rejected"]) == 1
    assert result.summary["verification"]["instances_checked"] == 0
    # the verifier's own verdicts stay on record for the rejected persona
    decisions = next(iter(json.loads((out / "validation.json").read_text()).values()))["verification"][
        "decisions"
    ]
    assert any(r.startswith("request: ") for d in decisions.values() for r in d["first_reasons"])
