"""Distil a finished CUPID run's matcher into a small model (PrefMatcher-style) and report the
student's agreement with the teacher on held-out instances.

Every matcher call of the run is rebuilt from its inputs (the instance's gold preference and
checklist, the inferred preference and its checklist in the samples) with the run's own prompts, so
the student learns the exact messages the matcher saw; the target is the teacher's accepted reply.
Instances are split into train / held-out by a hash of their id (no instance in both). The
held-out report compares the labels item by item: accuracy and Cohen's kappa; an unparseable
student reply counts as a disagreement and is reported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.judges import parse_match
from personalign.benchmarks.cupid.steps import CupidConfig, CupidPrompts
from personalign.errors import ConfigError, DataError
from personalign.metrics.agreement import cohen_kappa
from personalign.train.examples import TrainExample
from personalign.types import Message

MATCH_STEPS = ("match/inferred->gold", "match/gold->inferred")
UNPARSEABLE = "<unparseable>"


@dataclass(frozen=True)
class MatcherItem:
    """One matcher call: its messages, the teacher's reply and labels, and how many items it labels."""

    instance_id: str
    step: str
    messages: tuple[Message, ...]
    target: str
    labels: tuple[str, ...]

    def example(self) -> TrainExample:
        prompt = self.messages
        return TrainExample(
            f"{self.instance_id}/{self.step}", tuple(prompt[:-1]), (), (prompt[-1],), self.target, self.target
        )


def held_out(instance_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic split by instance: True for about ``fraction`` of the ids."""
    digest = hashlib.sha256(f"{seed}:{instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _config(manifest: dict[str, Any], path: Path) -> CupidConfig:
    if manifest.get("benchmark") != "cupid":
        raise DataError(
            str(path), None, "benchmark", "not a CUPID run (train matcher distils CUPID matchers)"
        )
    raw = manifest.get("config") or {}
    known = {f.name for f in fields(CupidConfig)}
    config = CupidConfig(**{k: v for k, v in raw.items() if k in known})
    if config.protocol != "personalign":
        raise DataError(str(path), None, "config.protocol", "only personalign-protocol runs can be distilled")
    return config


def matcher_items(run_dir: Path, data: str | None = None) -> list[MatcherItem]:
    """Every accepted matcher call of a finished CUPID run, rebuilt with the run's prompts."""
    manifest_path = run_dir / "manifest.json"
    samples_path = run_dir / "samples.jsonl"
    if not manifest_path.is_file() or not samples_path.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (needs manifest.json and samples.jsonl)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    config = _config(manifest, manifest_path)
    source = data or str(manifest.get("data", {}).get("source", "fixture"))
    if source.startswith("fixture:"):
        source = "fixture"
    instances = {inst.id: inst for inst in load_cupid(source).instances}
    prompts = CupidPrompts(config)
    items: list[MatcherItem] = []
    for row, line in enumerate(samples_path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        sample = json.loads(line)
        instance = instances.get(sample.get("instance_id"))
        if instance is None:
            raise DataError(
                str(samples_path), row, "instance_id", f"{sample.get('instance_id')!r} is not in {source}"
            )
        steps = sample.get("steps", {})
        infer, decompose = steps.get("infer", {}), steps.get("decompose", {})
        if infer.get("status") != "ok" or decompose.get("status") != "ok" or not decompose.get("parsed"):
            continue
        preference = (
            infer["parsed"]["preference"] if isinstance(infer["parsed"], dict) else str(infer["parsed"])
        )
        inputs = {
            "match/inferred->gold": (instance.current_contextual_preference, list(decompose["parsed"])),
            "match/gold->inferred": (preference, list(instance.current_checklist)),
        }
        for step in MATCH_STEPS:
            record = steps.get(step, {})
            if record.get("status") != "ok" or not record.get("raw") or record.get("parsed") is None:
                continue
            call = prompts.match(*inputs[step])
            labels = tuple(str(x) for x in record["parsed"])
            if len(labels) != len(inputs[step][1]):
                raise DataError(
                    str(samples_path), row, f"steps.{step}.parsed", "label count differs from items"
                )
            items.append(MatcherItem(instance.id, step, tuple(call.messages), str(record["raw"][-1]), labels))
    if not items:
        raise ConfigError(f"{samples_path}: no accepted matcher calls to distil")
    return items


def agreement_report(
    items: Sequence[MatcherItem], replies: Sequence[str], fmt: str = "default"
) -> dict[str, Any]:
    """Student vs teacher labels item by item (accuracy, Cohen's kappa); unparseable replies count
    as disagreements with the label ``<unparseable>``."""
    teacher: list[str] = []
    student: list[str] = []
    unparseable = 0
    for item, reply in zip(items, replies, strict=True):
        try:
            labels = parse_match(reply, len(item.labels), fmt)  # type: ignore[arg-type]
        except Exception:  # any parse failure of the student's reply is recorded, never scored as a label
            labels = [UNPARSEABLE] * len(item.labels)
            unparseable += 1
        teacher.extend(item.labels)
        student.extend(labels)
    stats = cohen_kappa(teacher, student)
    return {
        "calls": len(items),
        "unparseable_calls": unparseable,
        "items": stats.n,
        "accuracy": stats.agreement,
        "kappa": stats.kappa,
    }


def student_replies(model_spec: str, items: Sequence[MatcherItem], max_tokens: int) -> list[str]:
    """The student's greedy replies to the held-out calls (through the hf/ backend)."""
    from personalign.llm import GenerateConfig, build_backend, parse_model_spec

    backend = build_backend(parse_model_spec(model_spec))
    config = GenerateConfig(max_tokens=max_tokens)

    async def all_replies() -> list[str]:
        return [(await backend.generate(list(i.messages), config, timeout=600)).text for i in items]

    return asyncio.run(all_replies())
