"""`personalign agree`: how often two runs' judges agree on the same generations.

Both runs must be of the same benchmark. Only instances whose subject outputs are identical in
both runs are compared (e.g. a run and its `rescore`, or two runs of the same subject sharing the
call cache); the others are counted and skipped.

- HiCUPID: one label per question, from the model answer's point of view (win / tie / loss for
  A/B questions, the combined outcome in both-order runs; YES / NO for schedule questions),
  grouped by question type.
- CUPID: the matcher's label for every checklist item (`match/gold->inferred` whenever the inferred
  preference is the same; `match/inferred->gold` only when the decomposed checklist is the same
  too), and the generation judge's 1-10 score when the response is the same.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.metrics.agreement import cohen_kappa
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.store import RunDir

Labels = dict[str, list[tuple[str, Hashable]]]  # group -> [(item key, label)]


def _ok(steps: dict[str, StepRecord], name: str) -> StepRecord | None:
    step = steps.get(name)
    return step if step is not None and step.status == "ok" else None


def _same(a: InstanceRecord, b: InstanceRecord, step: str) -> bool:
    sa, sb = _ok(a.steps, step), _ok(b.steps, step)
    return sa is not None and sb is not None and sa.parsed == sb.parsed


def hicupid_label(record: InstanceRecord) -> Hashable | None:
    """The judge's verdict on one HiCUPID question, from the model answer's point of view:
    win / tie / loss (A/B questions; both-order runs give their combined outcome) or YES / NO."""
    result = record.results.get("qa")
    if result is None or result.status != "ok":
        return None
    if record.meta.get("type") == "schedule":
        return str(result.scores["verdict"])
    return str(result.scores["outcome"])


def _pairs_hicupid(a: InstanceRecord, b: InstanceRecord, into: tuple[Labels, Labels]) -> bool:
    if not _same(a, b, "answer"):
        return False
    la, lb = hicupid_label(a), hicupid_label(b)
    if la is not None and lb is not None:
        group = f"hicupid/{a.meta.get('type', 'unknown')}"
        into[0].setdefault(group, []).append((a.instance_id, la))
        into[1].setdefault(group, []).append((a.instance_id, lb))
    return True


def _pairs_cupid(a: InstanceRecord, b: InstanceRecord, into: tuple[Labels, Labels]) -> bool:
    compared = False
    if _same(a, b, "infer"):
        compared = True
        steps = ["match/gold->inferred"]
        if _same(a, b, "decompose"):
            steps.append("match/inferred->gold")
        for name in steps:
            sa, sb = _ok(a.steps, name), _ok(b.steps, name)
            if sa is None or sb is None or len(sa.parsed) != len(sb.parsed):
                continue
            for i, (x, y) in enumerate(zip(sa.parsed, sb.parsed, strict=True)):
                into[0].setdefault("cupid/matcher", []).append((f"{a.instance_id}|{name}|{i}", x))
                into[1].setdefault("cupid/matcher", []).append((f"{a.instance_id}|{name}|{i}", y))
    if _same(a, b, "generate"):
        compared = True
        sa, sb = _ok(a.steps, "judge"), _ok(b.steps, "judge")
        if sa is not None and sb is not None:
            into[0].setdefault("cupid/generation_score", []).append((a.instance_id, sa.parsed["score"]))
            into[1].setdefault("cupid/generation_score", []).append((a.instance_id, sb.parsed["score"]))
    return compared


def agreement(run_a: Path, run_b: Path) -> dict[str, Any]:
    """Cohen's kappa and raw agreement per label group and over all labels."""
    dir_a, dir_b = RunDir(run_a), RunDir(run_b)
    bench_a, bench_b = dir_a.read_manifest().get("benchmark"), dir_b.read_manifest().get("benchmark")
    if bench_a != bench_b:
        raise ConfigError(f"{run_a} is a {bench_a} run but {run_b} is a {bench_b} run")
    if bench_a not in ("hicupid", "cupid"):
        raise ConfigError(f"agreement is defined for CUPID and HiCUPID runs, not {bench_a!r}")
    records_a, records_b = dir_a.records(), dir_b.records()
    common = [k for k in records_a if k in records_b]
    if not common:
        raise ConfigError(f"{run_a} and {run_b} share no instances")
    labels: tuple[Labels, Labels] = ({}, {})
    pair = _pairs_hicupid if bench_a == "hicupid" else _pairs_cupid
    different = [k for k in common if not pair(records_a[k], records_b[k], labels)]
    groups: dict[str, Any] = {}
    all_a: list[Hashable] = []
    all_b: list[Hashable] = []
    for group in sorted(labels[0]):
        xs = [label for _, label in labels[0][group]]
        ys = [label for _, label in labels[1][group]]
        groups[group] = cohen_kappa(xs, ys).to_record()
        if group != "cupid/generation_score":
            all_a.extend(xs)
            all_b.extend(ys)
    models = {
        "a": dir_a.read_manifest().get("identity", {}).get("models"),
        "b": dir_b.read_manifest().get("identity", {}).get("models"),
    }
    return {
        "benchmark": bench_a,
        "runs": {"a": str(run_a), "b": str(run_b)},
        "models": models,
        "n_common_instances": len(common),
        "n_skipped_different_generations": len(different),
        "skipped": different[:20],
        "groups": groups,
        "all": cohen_kappa(all_a, all_b).to_record(),
    }
