"""Distil a finished CUPID run's matcher into a small model (PrefMatcher-style) and report the
student's agreement with the teacher on held-out instances.

Every matcher call of the run is rebuilt from its inputs (the instance's gold preference and
checklist, the inferred preference and its checklist in the samples) with the run's own prompts, so
the student learns the exact messages the matcher saw; the target is the teacher's accepted reply.
The split, training and held-out report are `personalign.train.distil`'s (shared with `train judge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.judges import parse_match
from personalign.benchmarks.cupid.steps import CupidConfig, CupidPrompts
from personalign.errors import ConfigError, DataError
from personalign.train.distil import (
    UNPARSEABLE,
    DistilItem,
    ParseLabels,
    data_source,
    held_out,
    read_run,
    student_labels,
)
from personalign.train.distil import agreement_report as _agreement

__all__ = ["MATCH_STEPS", "UNPARSEABLE", "MatcherItem", "agreement_report", "held_out", "matcher_items"]

MATCH_STEPS = ("match/inferred->gold", "match/gold->inferred")
MatcherItem = DistilItem  # one matcher call; labels = one per checklist item


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
    manifest, samples_path, samples = read_run(run_dir)
    config = _config(manifest, run_dir / "manifest.json")
    source = data or data_source(manifest)
    instances = {inst.id: inst for inst in load_cupid(source).instances}
    prompts = CupidPrompts(config)
    items: list[MatcherItem] = []
    for row, sample in samples:
        instance = instances.get(str(sample.get("instance_id")))
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


def parse_labels(fmt: str = "default") -> ParseLabels:
    """The matcher reply parser as a distil `ParseLabels` (one label per checklist item)."""

    def parse(reply: str, item: DistilItem) -> tuple[str, ...]:
        return tuple(parse_match(reply, len(item.labels), fmt))  # type: ignore[arg-type]

    return parse


def agreement_report(
    items: Sequence[MatcherItem], replies: Sequence[str], fmt: str = "default"
) -> dict[str, Any]:
    """Student vs teacher labels item by item (accuracy, Cohen's kappa); unparseable replies count
    as disagreements with the label ``<unparseable>``."""
    return _agreement(items, student_labels(items, replies, parse_labels(fmt)))
