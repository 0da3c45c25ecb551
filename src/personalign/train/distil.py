"""Distilling a finished run's model calls (matcher steps, judge verdicts) into a small student,
the path `train matcher` and `train judge` share.

An item is one call the teacher answered: the exact messages it received, its accepted reply (the
SFT target) and the labels parsed from that reply. Items are split into train / held-out by a hash
of their instance id (no instance on both sides); the student's held-out replies are parsed with
the benchmark's own parser and compared label by label (accuracy, Cohen's kappa). An unparseable
student reply counts as a disagreement with the label ``<unparseable>`` and is reported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError, DataError
from personalign.metrics.agreement import cohen_kappa
from personalign.train.examples import TrainExample
from personalign.types import Message

UNPARSEABLE = "<unparseable>"

# reply, item -> the labels the reply gives (raises on an unreadable reply)
ParseLabels = Callable[[str, "DistilItem"], tuple[str, ...]]


@dataclass(frozen=True)
class DistilItem:
    """One teacher call: its messages, the teacher's accepted reply and the labels it gives."""

    instance_id: str
    step: str
    messages: tuple[Message, ...]
    target: str
    labels: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def example(self) -> TrainExample:
        """The call as an SFT example: the prompt as sent, the teacher's reply as the answer."""
        prompt = self.messages
        return TrainExample(
            f"{self.instance_id}/{self.step}", tuple(prompt[:-1]), (), (prompt[-1],), self.target, self.target
        )


def read_run(run_dir: Path) -> tuple[dict[str, Any], Path, list[tuple[int, dict[str, Any]]]]:
    """A finished run's manifest, its samples file and its samples as (row number, sample)."""
    manifest_path = run_dir / "manifest.json"
    samples_path = run_dir / "samples.jsonl"
    if not manifest_path.is_file() or not samples_path.is_file():
        raise ConfigError(f"{run_dir}: not a run directory (needs manifest.json and samples.jsonl)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    rows: list[tuple[int, dict[str, Any]]] = []
    for row, line in enumerate(samples_path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((row, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(str(samples_path), row, "(line)", f"not JSON: {exc}") from None
    return manifest, samples_path, rows


def data_source(manifest: dict[str, Any]) -> str:
    """The data source a run used, as a loader takes it (``fixture:<name>`` -> ``fixture``)."""
    source = str(manifest.get("data", {}).get("source", "fixture"))
    return "fixture" if source.startswith("fixture:") else source


def held_out(instance_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic split by instance: True for about ``fraction`` of the ids."""
    digest = hashlib.sha256(f"{seed}:{instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_items(
    items: Sequence[DistilItem], fraction: float, seed: int, where: str
) -> tuple[list[DistilItem], list[DistilItem]]:
    """(train, held-out) items; both must be non-empty."""
    if not 0 < fraction < 1:
        raise ConfigError("--held-out must be between 0 and 1")
    train = [i for i in items if not held_out(i.instance_id, fraction, seed)]
    test = [i for i in items if held_out(i.instance_id, fraction, seed)]
    if not train or not test:
        raise ConfigError(
            f"{where}: {len(items)} calls give {len(train)} to train on and {len(test)} held out; "
            "both must be non-empty (change --held-out)"
        )
    return train, test


def student_labels(
    items: Sequence[DistilItem], replies: Sequence[str], parse: ParseLabels
) -> list[tuple[str, ...] | None]:
    """The labels of each student reply; None where the reply could not be parsed."""
    out: list[tuple[str, ...] | None] = []
    for item, reply in zip(items, replies, strict=True):
        try:
            labels = tuple(parse(reply, item))
        except Exception:  # any parse failure of the student's reply is recorded, never scored as a label
            out.append(None)
            continue
        out.append(labels if len(labels) == len(item.labels) else None)
    return out


def agreement_report(items: Sequence[DistilItem], parsed: Sequence[tuple[str, ...] | None]) -> dict[str, Any]:
    """Student vs teacher labels item by item (accuracy, Cohen's kappa); an unparseable reply
    (None) counts as disagreement on each of its items with the label ``<unparseable>``."""
    teacher: list[str] = []
    student: list[str] = []
    for item, labels in zip(items, parsed, strict=True):
        teacher.extend(item.labels)
        student.extend(labels if labels is not None else [UNPARSEABLE] * len(item.labels))
    stats = cohen_kappa(teacher, student)
    return {
        "calls": len(items),
        "unparseable_calls": sum(1 for p in parsed if p is None),
        "items": stats.n,
        "accuracy": stats.agreement,
        "kappa": stats.kappa,
        # kappa is 0 whenever the teacher gives one label only, however well the student agrees
        "teacher_labels": dict(sorted(Counter(teacher).items())),
        "student_labels": dict(sorted(Counter(student).items())),
    }


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than two pairs or when either side is constant."""
    if len(xs) != len(ys):
        raise ValueError("pearson: sequences differ in length")
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def student_replies(model_spec: str, items: Sequence[DistilItem], max_tokens: int) -> list[str]:
    """The student's greedy replies to the held-out calls (through the hf/ backend, all calls in
    flight at once so the backend can batch them)."""
    from personalign.llm import GenerateConfig, build_backend, parse_model_spec

    backend = build_backend(parse_model_spec(model_spec))
    config = GenerateConfig(max_tokens=max_tokens)

    async def all_replies() -> list[str]:
        calls = [backend.generate(list(i.messages), config, timeout=600) for i in items]
        return [r.text for r in await asyncio.gather(*calls)]

    return asyncio.run(all_replies())


# held-out items, their parsed student labels -> extra report fields (e.g. the judge's S)
ExtraReport = Callable[[Sequence[DistilItem], Sequence[tuple[str, ...] | None]], dict[str, Any]]


def distil(
    items: Sequence[DistilItem],
    base: str,
    out: Path,
    settings: Any,
    *,
    source: str,
    parse: ParseLabels,
    held_out_fraction: float = 0.25,
    max_tokens: int = 512,
    seed: int = 0,
    extra: ExtraReport | None = None,
) -> dict[str, Any]:
    """SFT a student on the train part of ``items``, then report its agreement with the teacher
    on the held-out part; written to ``out/agreement.json`` (replies in ``held_out_replies.jsonl``)."""
    from personalign.train.trainer import train_stage

    train_items, test_items = split_items(items, held_out_fraction, seed, source)
    result = train_stage(
        base, [i.example() for i in train_items], out, replace(settings, kind="sft"), data_source=source
    )
    replies = student_replies(f"hf/{base}?adapter={result.adapter}", test_items, max_tokens)
    parsed = student_labels(test_items, replies, parse)
    report: dict[str, Any] = {
        "run": source,
        "train_calls": len(train_items),
        "held_out": agreement_report(test_items, parsed),
        "losses": result.losses,
    }
    if extra is not None:
        report.update(extra(test_items, parsed))
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    with (out / "held_out_replies.jsonl").open("w", encoding="utf-8") as fh:
        for item, reply, labels in zip(test_items, replies, parsed, strict=True):
            row = {
                "instance_id": item.instance_id,
                "step": item.step,
                "teacher": item.labels,
                "student": reply,
                "student_labels": labels,
            }
            fh.write(json.dumps(row) + "\n")
    return report
