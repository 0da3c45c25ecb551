"""Offline retrieval quality of the memory engine against baselines, without any judge model.

On CUPID-format data each instance's prior sessions become one user's store; each method retrieves
``k`` sessions for the current request, scored against the instance's oracle sessions (those sharing
the current contextual preference). Changing instances also report whether the newest preference's
session leads and how often superseded sessions of the same factor leak in; contrastive instances
report how often the paired factor's sessions (the sessions its consistent sibling lacks) leak in.
The prompt-size column compares the retrieved sessions with the full history, in approximate tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.schema import INSTANCE_TYPES, CupidInstance
from personalign.errors import ConfigError
from personalign.history import approx_tokens, format_history, format_session
from personalign.memory.engine import MemoryEngine, RetrievalConfig
from personalign.memory.store import NewSession
from personalign.metrics.bootstrap import bootstrap_ci, mean_statistic
from personalign.report.tables import markdown_table
from personalign.retrieval import Embedder
from personalign.runs.spec import MemoryEvalResult

METHODS = ("recent", "bm25", "dense", "fused", "memory")


@dataclass(frozen=True)
class InstanceScore:
    instance_id: str
    instance_type: str
    method: str
    retrieved: tuple[int, ...]  # positions in prior_interactions, best first
    precision: float
    recall: float
    token_ratio: float
    newest_first: float | None = None  # changing: the first same-factor session retrieved is current
    superseded_leaked: int | None = None  # changing: superseded same-factor sessions retrieved
    paired_leaked: int | None = None  # contrastive: sessions of the paired factor retrieved


def paired_factor_positions(instance: CupidInstance, siblings: Sequence[CupidInstance]) -> set[int] | None:
    """Positions of a contrastive instance's paired-factor sessions: the sessions whose factor its
    consistent sibling (same persona) does not have. None when there is no such sibling."""
    consistent = next(
        (s for s in siblings if s.persona_id == instance.persona_id and s.instance_type == "consistent"), None
    )
    if consistent is None:
        return None
    known = {s.context_factor.strip() for s in consistent.prior_interactions}
    return {i for i, s in enumerate(instance.prior_interactions) if s.context_factor.strip() not in known}


def score_instance(
    instance: CupidInstance, method: str, retrieved: Sequence[int], paired: set[int] | None
) -> InstanceScore:
    sessions = instance.prior_interactions
    oracle = {i for i, s in enumerate(sessions) if s in instance.oracle_sessions()}
    same_factor = {i for i, s in enumerate(sessions) if s in instance.same_factor_sessions()}
    hits = len(oracle.intersection(retrieved))
    full = approx_tokens(format_history([format_session(s) for s in sessions]))
    shown = approx_tokens(format_history([format_session(sessions[i]) for i in sorted(retrieved)]))
    extra: dict[str, Any] = {}
    if instance.instance_type == "changing":
        first = next((i for i in retrieved if i in same_factor), None)
        extra["newest_first"] = None if first is None else float(first in oracle)
        extra["superseded_leaked"] = len((same_factor - oracle).intersection(retrieved))
    if instance.instance_type == "contrastive" and paired is not None:
        extra["paired_leaked"] = len(paired.intersection(retrieved))
    return InstanceScore(
        instance_id=instance.id,
        instance_type=instance.instance_type,
        method=method,
        retrieved=tuple(retrieved),
        precision=hits / len(retrieved) if retrieved else 0.0,
        recall=hits / len(oracle) if oracle else 0.0,
        token_ratio=shown / full if full else 0.0,
        **extra,
    )


def _method_config(method: str, k: int) -> RetrievalConfig:
    """``fused``: the three channels by rank fusion only; ``memory``: the engine's default (fusion,
    then sessions naming the request's context first, newest first)."""
    if method in ("bm25", "dense"):
        return RetrievalConfig(k_sessions=k, k_memories=0, channels=(method,))
    return RetrievalConfig(k_sessions=k, k_memories=0, context_first=method == "memory")


def retrieve_positions(engine: MemoryEngine, instance: CupidInstance, method: str, k: int) -> list[int]:
    """The positions of the ``k`` sessions a method retrieves for an instance already in ``engine``."""
    n = len(instance.prior_interactions)
    if method == "recent":
        return list(range(n - 1, max(-1, n - 1 - k), -1))
    engine.config = _method_config(method, k)
    found = engine.retrieve(instance.id, instance.current_request)
    return [int(str(item.session.metadata["position"])) for item in found.sessions if item.session]


def load_instances(engine: MemoryEngine, instances: Sequence[CupidInstance]) -> None:
    """One user per instance; sessions timestamped by their position (CUPID gives no clock)."""
    for instance in instances:
        engine.add_user(instance.id)
        engine.add_sessions(
            instance.id,
            [
                NewSession(s.dialogue, timestamp=float(i), metadata={"position": i})
                for i, s in enumerate(instance.prior_interactions)
            ],
        )


def evaluate_cupid(
    instances: Sequence[CupidInstance],
    *,
    k: int = 2,
    embedder: Embedder | str = "minilm",
    methods: Sequence[str] = METHODS,
) -> tuple[dict[str, Any], list[InstanceScore]]:
    """Score every method on every instance; return (summary, per-instance scores)."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ConfigError(f"unknown methods {sorted(unknown)} (known: {', '.join(METHODS)})")
    engine = MemoryEngine(":memory:", embedder=embedder)
    load_instances(engine, instances)
    scores: list[InstanceScore] = []
    for instance in instances:
        paired = (
            paired_factor_positions(instance, instances) if instance.instance_type == "contrastive" else None
        )
        for method in methods:
            positions = retrieve_positions(engine, instance, method, k)
            scores.append(score_instance(instance, method, positions, paired))
    engine.close()
    return summarize(scores, k=k, embedder=engine.embedder.name if engine.embedder else None), scores


def _mean(values: Iterable[float | int | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _ci(values: Sequence[float]) -> tuple[float, float] | None:
    """95% percentile-bootstrap CI of a mean over instances (None with fewer than 2)."""
    n = len(values)
    return bootstrap_ci(np.array(values, dtype=float), lambda sums: mean_statistic(sums, n))


def _block(rows: Sequence[InstanceScore]) -> dict[str, Any]:
    block: dict[str, Any] = {
        "n": len(rows),
        "precision": _mean(r.precision for r in rows),
        "precision_ci": _ci([r.precision for r in rows]),
        "recall": _mean(r.recall for r in rows),
        "recall_ci": _ci([r.recall for r in rows]),
        "token_ratio": _mean(r.token_ratio for r in rows),
    }
    changing = [r for r in rows if r.instance_type == "changing"]
    if changing:
        block["newest_first"] = _mean(r.newest_first for r in changing)
        block["superseded_leak_rate"] = _mean(float((r.superseded_leaked or 0) > 0) for r in changing)
        block["superseded_per_query"] = _mean(r.superseded_leaked for r in changing)
    contrastive = [r for r in rows if r.paired_leaked is not None]
    if contrastive:
        block["paired_leak_rate"] = _mean(float((r.paired_leaked or 0) > 0) for r in contrastive)
        block["paired_per_query"] = _mean(r.paired_leaked for r in contrastive)
    return block


def summarize(scores: Sequence[InstanceScore], *, k: int, embedder: str | None) -> dict[str, Any]:
    by_method: dict[str, list[InstanceScore]] = defaultdict(list)
    for s in scores:
        by_method[s.method].append(s)
    return {
        "k": k,
        "embedder": embedder,
        "methods": {
            method: {
                "all": _block(rows),
                "by_type": {
                    t: _block([r for r in rows if r.instance_type == t])
                    for t in INSTANCE_TYPES
                    if any(r.instance_type == t for r in rows)
                },
            }
            for method, rows in by_method.items()
        },
    }


def score_records(scores: Sequence[InstanceScore]) -> list[dict[str, Any]]:
    return [asdict(s) for s in scores]


def format_table(summary: dict[str, Any]) -> str:
    """A markdown table: one row per method and instance type."""
    cols = [
        ("P", "precision"),
        ("R", "recall"),
        ("newest first", "newest_first"),
        ("superseded leak", "superseded_leak_rate"),
        ("paired leak", "paired_leak_rate"),
        ("tokens vs full", "token_ratio"),
    ]
    caption = (
        f"CUPID retrieval at k={summary['k']} (embedder {summary['embedder']}); oracle = sessions "
        "sharing the current preference"
    )
    rows = [
        [
            method,
            name,
            block["n"],
            *("" if block.get(key) is None else f"{block[key]:.3f}" for _, key in cols),
        ]
        for method, result in summary["methods"].items()
        for name, block in [("all", result["all"]), *result["by_type"].items()]
    ]
    return markdown_table(caption, ["method", "type", "n", *(c for c, _ in cols)], rows)


def memory_eval(
    data: str, *, k: int | None, embedder: str, methods: Sequence[str] | None
) -> MemoryEvalResult:
    """`personalign memory-eval --format cupid` (the spec's `memory_eval` hook): precision/recall of
    the retrieved sessions against the oracle ones, k = 2 sessions unless given."""
    dataset = load_cupid(data)
    summary, scores = evaluate_cupid(
        dataset.instances, k=k or 2, embedder=embedder, methods=tuple(methods or METHODS)
    )
    return MemoryEvalResult(
        dataset.source, dataset.sha256, summary, format_table(summary), score_records(scores)
    )
