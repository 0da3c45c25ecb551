"""`personalign agree`: how often two runs' judges agree on the same generations.

Both runs must be of the same benchmark. Only instances whose subject outputs are identical in
both runs are compared (e.g. a run and its `rescore`, or two runs of the same subject sharing the
call cache); the others are counted and skipped. Which labels are compared is the benchmark's own
rule (`AgreementRule`, its spec's optional `agreement` hook, e.g. `benchmarks/cupid/agree.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.metrics.agreement import cohen_kappa
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.store import RunDir

Labels = dict[str, list[tuple[str, Hashable]]]  # group -> [(item key, label)]


def ok_step(steps: dict[str, StepRecord], name: str) -> StepRecord | None:
    """The step `name` when it finished ok, else None."""
    step = steps.get(name)
    return step if step is not None and step.status == "ok" else None


def same_step(a: InstanceRecord, b: InstanceRecord, step: str) -> bool:
    """Whether both records finished `step` with the same parsed value (e.g. the same generation)."""
    sa, sb = ok_step(a.steps, step), ok_step(b.steps, step)
    return sa is not None and sb is not None and sa.parsed == sb.parsed


@dataclass(frozen=True)
class AgreementRule:
    """A benchmark's agreement rule: `pair(a, b, (labels_a, labels_b))` adds the judges' labels of
    one instance's two records under their group names and returns whether the instance was
    compared (False: its subject outputs differ); `unpooled` groups (scores, not labels) are left
    out of the pooled `all` figure."""

    pair: Callable[[InstanceRecord, InstanceRecord, tuple[Labels, Labels]], bool]
    unpooled: tuple[str, ...] = ()


def agreement(run_a: Path, run_b: Path, rule: AgreementRule | None) -> dict[str, Any]:
    """Cohen's kappa and raw agreement per label group and over all labels, by the benchmark's
    `rule` (None: the benchmark defines none, a ConfigError)."""
    dir_a, dir_b = RunDir(run_a), RunDir(run_b)
    bench_a, bench_b = dir_a.read_manifest().get("benchmark"), dir_b.read_manifest().get("benchmark")
    if bench_a != bench_b:
        raise ConfigError(f"{run_a} is a {bench_a} run but {run_b} is a {bench_b} run")
    if rule is None:
        raise ConfigError(f"agreement is not defined for {bench_a!r} runs (its spec has no agreement rule)")
    records_a, records_b = dir_a.records(), dir_b.records()
    common = [k for k in records_a if k in records_b]
    if not common:
        raise ConfigError(f"{run_a} and {run_b} share no instances")
    labels: tuple[Labels, Labels] = ({}, {})
    different = [k for k in common if not rule.pair(records_a[k], records_b[k], labels)]
    groups: dict[str, Any] = {}
    all_a: list[Hashable] = []
    all_b: list[Hashable] = []
    for group in sorted(labels[0]):
        xs = [label for _, label in labels[0][group]]
        ys = [label for _, label in labels[1][group]]
        groups[group] = cohen_kappa(xs, ys).to_record()
        if group not in rule.unpooled:
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
