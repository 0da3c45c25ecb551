"""memory-eval: the measures on hand-built instances, and the command on the bundled fixture."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from personalign.benchmarks.cupid.memory_eval import (
    approx_tokens,
    paired_factor_positions,
    score_instance,
)
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.cli import app
from personalign.types import Message, Session


def session(factor: str, preference: str, text: str) -> Session:
    return Session(
        context_factor=factor,
        contextual_preference=preference,
        dialogue=(Message(role="user", content=text), Message(role="assistant", content="ok")),
    )


def instance(kind: str, priors: list[Session], preference: str = "new") -> CupidInstance:
    return CupidInstance(
        persona_id="p1",
        instance_type=kind,  # type: ignore[arg-type]
        current_request="Update for Okafor",
        current_context_factor="Okafor",
        current_contextual_preference=preference,
        current_checklist=("Is it right?",),
        prior_interactions=tuple(priors),
    )


def test_changing_measures() -> None:
    priors = [
        session("Okafor", "old", "a"),
        session("Club", "x", "b"),
        session("Okafor", "old", "c"),
        session("Okafor", "new", "d"),
        session("Okafor", "new", "e"),
    ]
    inst = instance("changing", priors)
    good = score_instance(inst, "m", [4, 3], None)
    assert (good.precision, good.recall, good.newest_first, good.superseded_leaked) == (1.0, 1.0, 1.0, 0)
    bad = score_instance(inst, "m", [1, 2, 4], None)
    assert bad.precision == 1 / 3 and bad.recall == 0.5
    assert bad.newest_first == 0.0 and bad.superseded_leaked == 1  # session 2 is superseded
    none = score_instance(inst, "m", [1], None)
    assert none.newest_first is None and none.precision == 0.0
    assert 0 < good.token_ratio < 1


def test_contrastive_pairs_come_from_the_consistent_sibling() -> None:
    shared = [session("Okafor", "new", "a"), session("Club", "x", "b"), session("Okafor", "new", "c")]
    consistent = instance("consistent", [*shared, session("Cove", "y", "d")])
    contrastive = instance("contrastive", [*shared, session("Reyes", "z", "e"), session("Reyes", "z", "f")])
    paired = paired_factor_positions(contrastive, [consistent, contrastive])
    assert paired == {3, 4}
    assert paired_factor_positions(contrastive, [contrastive]) is None
    assert score_instance(contrastive, "m", [0, 3], paired).paired_leaked == 1


def test_approx_tokens() -> None:  # Hit@k lives in personalign.benchmarks.hicupid.context (tests/context)
    assert approx_tokens("Hello, world!") == 4


def test_memory_eval_command_on_fixture(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["memory-eval", "--embedder", "hash", "--k", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "| memory | changing |" in result.output
    report = json.loads(out.read_text())
    methods = report["summary"]["methods"]
    assert set(methods) == {"recent", "bm25", "dense", "fused", "memory"}
    assert report["summary"]["data"]["source"] == "fixture:cupid_sample.jsonl"
    assert len(report["instances"]) == 18 * 5
    # the most recent k sessions are the baseline's positions, newest first
    recent = [r for r in report["instances"] if r["method"] == "recent"]
    assert all(r["retrieved"] == [7, 6] for r in recent)
    # on the fixture, context-first ordering surfaces the newest preference more often than fusion alone
    changing = {m: methods[m]["by_type"]["changing"] for m in ("fused", "memory")}
    assert changing["memory"]["newest_first"] > changing["fused"]["newest_first"]
    assert methods["memory"]["all"]["recall"] > methods["recent"]["all"]["recall"]
    lo, hi = methods["memory"]["all"]["recall_ci"]
    assert lo <= methods["memory"]["all"]["recall"] <= hi


def test_memory_eval_bad_method() -> None:
    result = CliRunner().invoke(app, ["memory-eval", "--embedder", "hash", "--method", "magic"])
    assert result.exit_code == 2 and "unknown methods" in result.output
