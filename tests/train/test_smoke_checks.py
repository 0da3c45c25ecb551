"""The CPU smoke's own checks (scripts/train_smoke.py): epoch-mean losses from a stage's log, and a
failing exit when the SFT loss did not fall or a trained model is not above the base."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_smoke.py"


def smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_smoke", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stage(tmp_path: Path, losses: list[float], examples: int, accum: int) -> Path:
    manifest = {"data": {"examples": examples}, "hyperparameters": {"batch_size": 1, "grad_accum": accum}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    rows = [{"step": i + 1, "loss": loss, "rewards/margins": i / 8} for i, loss in enumerate(losses)]
    rows.append({"step": len(losses), "train_loss": 9.0})  # the trainer's closing row has no "loss"
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_epoch_means_group_the_steps_of_each_epoch(tmp_path: Path) -> None:
    # 10 examples at 1 x 4 per step: 3 optimizer steps per epoch (the last one short)
    d = stage(tmp_path, [3.0, 2.0, 1.0, 2.0, 1.0, 0.0, 0.5], examples=10, accum=4)
    assert smoke().epoch_means(d) == [2.0, 1.0, 0.5]
    assert smoke().step_values(d, "rewards/margins") == [i / 8 for i in range(7)]


def scores(rouge: float, bleu: float, per_question: dict[str, list[float]] | None = None) -> dict[str, Any]:
    return {"rouge_l": rouge, "bleu": bleu, "per_question": per_question or {}}


def test_paired_scores_use_only_the_questions_every_model_scored() -> None:
    results = {
        "base": scores(0, 0, {"q1": [0.2, 0.1], "q2": [0.4, 0.3]}),
        "sft": scores(0, 0, {"q1": [0.3, 0.2]}),  # q2 was cut off at --max-tokens: an error
        "sft_dpo": scores(0, 0, {"q1": [0.5, 0.4], "q2": [0.9, 0.9]}),
    }
    assert smoke().paired(results) == {
        "n": 1,
        "base": {"rouge_l": 0.2, "bleu": 0.1},
        "sft": {"rouge_l": 0.3, "bleu": 0.2},
        "sft_dpo": {"rouge_l": 0.5, "bleu": 0.4},
    }


def test_the_smoke_fails_unless_the_loss_falls_and_the_trained_models_beat_the_base() -> None:
    pair: dict[str, Any] = {
        "n": 3,
        "base": scores(0.2, 0.1),
        "sft": scores(0.3, 0.2),
        "sft_dpo": scores(0.3, 0.2),
    }
    ok: dict[str, Any] = {
        "sft_epoch_loss": [3.0, 2.5],
        "base": scores(0.19, 0.09),
        "sft": scores(0.25, 0.12),
        "sft_dpo": scores(0.24, 0.11),
        "paired": pair,
    }
    assert smoke().failures(ok) == []
    flat = {**ok, "sft_epoch_loss": [2.5, 2.5]}
    assert any("did not fall" in f for f in smoke().failures(flat))
    one_epoch = {**ok, "sft_epoch_loss": [2.5]}
    assert any("did not fall" in f for f in smoke().failures(one_epoch))
    worse = {**ok, "sft_dpo": scores(0.24, 0.09)}
    assert smoke().failures(worse) == ["sft_dpo bleu 0.0900 not above base 0.0900"]
    # above the base overall only because the base was scored on a question the others failed
    unpaired = {**ok, "paired": {**pair, "sft": scores(0.19, 0.2)}}
    assert smoke().failures(unpaired) == ["paired sft rouge_l 0.1900 not above base 0.2000"]
