"""CUPID's label-to-score step end to end: matcher labels chosen by hand give exact P / R / F1."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.benchmarks.cupid.steps import CupidBenchmark, CupidConfig, CupidModels, summarize
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.llm.types import GenerateConfig
from personalign.runs.records import InstanceRecord
from personalign.types import Message
from tests.support.models import run, scripted_model

INFERRED = "The user wants the kelp counts first."
PRED_ITEMS = ["Does the reply open with the kelp counts?", "Does the reply list counts per transect?"]
# inferred items against the gold preference: 1 + 0.5 of 2 items
PRED_LABELS = ["Fully Covered", "Partially Covered"]


def gold_labels(n: int) -> list[str]:
    """Gold items against the inferred preference: one Partially Covered, the rest Not Covered."""
    return ["Partially Covered"] + ["Not Covered"] * (n - 1)


def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    user = next(m.content for m in messages if m.role == "user")
    name = config.schema_name if config.json_schema is not None else ""
    if name == "checklist":
        return json.dumps({"checklist": PRED_ITEMS})
    if name == "match_results":
        checklist = user.split("Checklist:", 1)[1]
        n = len(re.findall(r"^\d+\.\s", checklist, re.MULTILINE))
        # the gold->inferred direction states the inferred preference
        labels = gold_labels(n) if f"Preference: {INFERRED}" in user else PRED_LABELS
        assert len(labels) == n
        results = [
            {"index": i, "reasoning": "set by the test", "label": lab} for i, lab in enumerate(labels, 1)
        ]
        return json.dumps({"results": results})
    return f"### Analysis\nRead the sessions.\n\n### Most Likely Preference\n{INFERRED}"


def instances() -> list[CupidInstance]:
    chosen = [i for i in load_cupid("fixture").instances if len(i.current_checklist) >= 2]
    # two instances whose gold checklists differ in length, so pooling differs from averaging
    first = chosen[0]
    second = next(i for i in chosen if len(i.current_checklist) != len(first.current_checklist))
    return [first, second]


def test_matcher_labels_turn_into_exact_precision_recall_f1(tmp_path: Path) -> None:
    factory, model = scripted_model(tmp_path, ScriptedBackend(responder))
    config = CupidConfig(
        subject="scripted/x", decomposer="scripted/x", matcher="scripted/x", judge="scripted/x"
    )
    bench = CupidBenchmark(config, CupidModels(model, model, model, model))
    chosen = instances()

    async def evaluate_all() -> list[InstanceRecord]:
        return [await bench.evaluate(i) for i in chosen]

    records = run(factory, evaluate_all())
    for instance, record in zip(chosen, records, strict=True):
        result = record.results["inference"]
        assert result.status == "ok", result.error
        n_gold = len(instance.current_checklist)
        scores = result.scores
        assert (scores["n_pred"], scores["matched_pred"]) == (2, 1.5)
        assert (scores["n_gold"], scores["matched_gold"]) == (n_gold, 0.5)
        precision, recall = 0.75, 0.5 / n_gold
        assert scores["precision"] == pytest.approx(precision)
        assert scores["recall"] == pytest.approx(recall)
        assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
        assert scores["inferred_preference"] == INFERRED

    pooled = summarize(records, ["inference"])["inference"]["all"]
    n_gold_total = sum(len(i.current_checklist) for i in chosen)
    precision, recall = 3.0 / 4, 1.0 / n_gold_total  # (1.5 + 1.5) / (2 + 2); (0.5 + 0.5) / sum
    assert pooled["precision"] == pytest.approx(precision)
    assert pooled["recall"] == pytest.approx(recall)
    assert pooled["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
