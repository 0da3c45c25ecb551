"""Matcher distillation: the calls are rebuilt exactly as the run sent them, split by instance, and the
held-out agreement counts unparseable student replies as disagreements."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.errors import ConfigError, DataError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.train.matcher import UNPARSEABLE, agreement_report, held_out, matcher_items
from personalign.types import Message

CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/m", judge="scripted/j")


@pytest.fixture(scope="module")
def cupid_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[Message]]]:
    """A finished scripted CUPID run, and every message list its matcher received."""
    seen: list[list[Message]] = []

    def spy(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(list(messages))
        return default_responder(messages, config)  # type: ignore[return-value]

    tmp = tmp_path_factory.mktemp("cupid")
    factory = ModelFactory(cache=CallCache(tmp / "c.sqlite"), backends={"scripted/m": ScriptedBackend(spy)})
    run_cupid(
        CONFIG, RunSettings(run_dir=tmp / "run", cache_path=tmp / "c.sqlite", progress=False), factory=factory
    )
    return tmp / "run", seen


def test_items_are_the_calls_the_matcher_received(cupid_run: tuple[Path, list[list[Message]]]) -> None:
    run_dir, seen = cupid_run
    items = matcher_items(run_dir)
    assert items and seen
    # identical calls are answered once (the cache), so compare the sets of message lists
    assert {json.dumps([m.model_dump() for m in i.messages]) for i in items} == {
        json.dumps([m.model_dump() for m in s]) for s in seen
    }
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    by_id = {s["instance_id"]: s for s in samples}
    for item in items:
        assert list(item.labels) == by_id[item.instance_id]["steps"][item.step]["parsed"]
        assert item.target == by_id[item.instance_id]["steps"][item.step]["raw"][-1]


def test_the_split_is_by_instance_and_deterministic() -> None:
    ids = [f"p{i}/consistent" for i in range(400)]
    chosen = [i for i in ids if held_out(i, 0.25)]
    assert 60 < len(chosen) < 140
    assert chosen == [i for i in ids if held_out(i, 0.25)]
    assert chosen != [i for i in ids if held_out(i, 0.25, seed=1)]


def test_agreement_counts_unparseable_replies_as_disagreement(
    cupid_run: tuple[Path, list[list[Message]]],
) -> None:
    items = matcher_items(cupid_run[0])[:2]
    perfect = agreement_report(items, [i.target for i in items])
    assert perfect["accuracy"] == 1.0 and perfect["unparseable_calls"] == 0
    assert perfect["items"] == sum(len(i.labels) for i in items)
    broken = agreement_report(items, [items[0].target, "no json here"])
    assert broken["unparseable_calls"] == 1
    # the label counts on both sides, so a kappa of 0 from a one-label teacher can be read as such
    teacher_labels = [label for i in items for label in i.labels]
    assert broken["teacher_labels"] == {x: teacher_labels.count(x) for x in set(teacher_labels)}
    assert broken["student_labels"][UNPARSEABLE] == len(items[1].labels)
    assert sum(broken["student_labels"].values()) == perfect["items"]
    assert broken["accuracy"] == pytest.approx(len(items[0].labels) / perfect["items"])
    assert UNPARSEABLE not in items[1].labels


def test_a_non_cupid_or_missing_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run directory"):
        matcher_items(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"benchmark": "hicupid"}))
    (tmp_path / "samples.jsonl").write_text("")
    with pytest.raises(DataError, match="not a CUPID run"):
        matcher_items(tmp_path)


@pytest.mark.slow
def test_train_matcher_reports_held_out_agreement(
    cupid_run: tuple[Path, list[list[Message]]], tiny_llama: Path, tmp_path: Path
) -> None:
    from personalign.train.recipes import train_matcher
    from personalign.train.settings import LoraSettings, TrainSettings

    settings = TrainSettings(
        kind="sft", learning_rate=1e-3, max_steps=1, max_length=None, save_steps=100,
        lora=LoraSettings(r=4, alpha=8, dropout=0.0), gradient_checkpointing=False,
    )  # fmt: skip
    report = train_matcher(
        cupid_run[0], str(tiny_llama), tmp_path / "m", settings, held_out_fraction=0.2, max_tokens=8
    )
    held = report["held_out"]
    assert isinstance(held, dict)
    assert held["calls"] > 0 and held["items"] >= held["calls"]
    # 8 tokens of a random tiny model never make a valid verdict: all unparseable, accuracy 0
    assert held["unparseable_calls"] == held["calls"] and held["accuracy"] == 0.0
    saved = json.loads((tmp_path / "m" / "agreement.json").read_text())
    assert saved["held_out"] == held
    assert len((tmp_path / "m" / "held_out_replies.jsonl").read_text().splitlines()) == held["calls"]
