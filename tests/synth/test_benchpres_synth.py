"""BenchPreS-style builder inputs with scripted models, and the labels CSV round trip."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.benchpres.synth import (
    CATEGORIES,
    DOMAIN_COUNTS,
    BenchpresRow,
    BenchpresSynthConfig,
    import_labels,
    synthesize_benchpres,
)
from personalign.errors import DataError
from personalign.llm import ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend

SPEC = "scripted/bp"


def factory_for(backend: ScriptedBackend) -> ModelFactory:
    backends: dict[str, Backend] = {str(parse_model_spec(SPEC)): backend}
    return ModelFactory(cache=None, backends=backends)


def small(**overrides: Any) -> BenchpresSynthConfig:
    base: dict[str, Any] = dict(
        generator=SPEC, n_profiles=2, n_facts=6, domain_counts={"finance/legal": 2, "education": 1}
    )
    return BenchpresSynthConfig(**{**base, **overrides})


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_paper_defaults() -> None:
    config = BenchpresSynthConfig(generator=SPEC)
    assert sum(config.domain_counts.values()) == 39 and config.n_profiles == 10
    assert DOMAIN_COUNTS["finance/legal"] == 13 and len(CATEGORIES) == 5


def test_rows_in_the_official_schema_with_unverified_labels(tmp_path: Path) -> None:
    out = tmp_path / "out"
    backend = ScriptedBackend()
    result = synthesize_benchpres(small(), out, factory_for(backend))
    assert result.summary["passed_validation"] == 2 and result.summary["failed"] == []
    rows = [BenchpresRow.model_validate(r) for r in jsonl(out / "benchpres_unverified.jsonl")]
    assert len(rows) == 2 * 3  # profiles x contexts
    assert {r.domain for r in rows} == {"finance/legal", "education"}
    for row in rows:
        assert len(row.preference_attribute) == len(row.preference_label) == 5
        assert row.recipient.lower() in row.prompt and row.task in row.prompt
        for statement in row.preference_attribute:  # the preferences sit among the memories
            assert statement in row.prompt
        assert "I have personal detail number 1." in row.prompt
        assert any('"' in s for s in row.preference_attribute)  # the nickname, quoted for exact match
    sheet = read_csv(out / "labels.csv")
    assert len(sheet) == 6 * 5
    assert {r["final_label"] for r in sheet} == {""}
    assert {r["proposed_label"] for r in sheet} == {"apply", "suppress"}
    calls = backend.calls
    synthesize_benchpres(small(), out, factory_for(backend))
    assert backend.calls == calls  # finished: nothing regenerated


def test_csv_round_trip_sets_the_final_labels(tmp_path: Path) -> None:
    out = tmp_path / "out"
    synthesize_benchpres(small(), out, factory_for(ScriptedBackend()))
    sheet = read_csv(out / "labels.csv")
    with pytest.raises(DataError, match="no final label"):
        import_labels(out)
    for k, row in enumerate(sheet):
        row["final_label"] = "Apply" if k % 3 == 0 else "suppress"
    write_csv(out / "labels.csv", sheet)
    report = import_labels(out)
    assert report["rows"] == 6 and report["apply"] == 10 and report["suppress"] == 20
    final = jsonl(out / "benchpres.jsonl")
    unverified = jsonl(out / "benchpres_unverified.jsonl")
    assert [r["prompt"] for r in final] == [r["prompt"] for r in unverified]
    flat = [label for r in final for label in r["preference_label"]]
    assert flat == [k % 3 == 0 for k in range(30)]
    loaded = load_benchpres(out / "benchpres.jsonl")  # the benchmark's loader accepts the output
    assert [label for row in loaded.rows for label in row.preference_label] == flat

    sheet[7]["final_label"] = "maybe"
    write_csv(out / "labels.csv", sheet)
    with pytest.raises(DataError) as err:
        import_labels(out)
    assert "labels.csv" in str(err.value) and "row 7" in str(err.value) and "final_label" in str(err.value)

    sheet[7]["final_label"] = ""
    write_csv(out / "labels.csv", sheet)
    partial = import_labels(out, partial=True)
    assert partial["rows"] == 5 and partial["skipped"] == [sheet[7]["row_id"]]


def test_a_failed_profile_is_reported_and_the_others_are_written(tmp_path: Path) -> None:
    from personalign.llm.backends.scripted import default_responder

    seen = {"preferences": 0}

    def responder(messages: Any, config: Any) -> str:
        if config.schema_name == "synth_benchpres_preferences":
            seen["preferences"] += 1
            if seen["preferences"] <= 2:  # the first profile's call and its re-ask
                return "{}"
        return default_responder(messages, config)

    result = synthesize_benchpres(
        small(n_profiles=4), tmp_path / "out", factory_for(ScriptedBackend(responder)), concurrency=1
    )
    failed = result.summary["failed"]
    assert [(f["id"], f["stage"]) for f in failed] == [("profile_0", "preferences/values")]
    assert "unparseable output" in failed[0]["error"]
    assert result.summary["generated"] == 3
    rows = jsonl(tmp_path / "out" / "benchpres_unverified.jsonl")
    assert len(rows) == 3 * 3


def test_only_contexts_every_judge_labels_alike_are_kept(tmp_path: Path) -> None:
    from collections.abc import Sequence

    from personalign.llm import GenerateConfig
    from personalign.llm.backends.scripted import default_responder
    from personalign.types import Message

    def split_vote(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = default_responder(messages, config)
        user = next(m.content for m in messages if m.role == "user")
        if (
            config.schema_name == "synth_benchpres_labels"
            and config.sample_index >= 1000
            and "education" in user.lower()
        ):
            data = json.loads(text)
            data["labels"][0]["apply"] = not data["labels"][0]["apply"]
            return json.dumps(data)
        return text

    out = tmp_path / "out"
    contexts = {"finance/legal": 2, "education": 1}
    one = synthesize_benchpres(
        small(n_profiles=1, domain_counts=contexts),
        tmp_path / "one",
        factory_for(ScriptedBackend(split_vote)),
    )
    assert one.summary["contexts_dropped_judges_disagree"] == 0
    three = synthesize_benchpres(
        small(n_profiles=1, n_judges=3, domain_counts=contexts), out, factory_for(ScriptedBackend(split_vote))
    )
    report = json.loads((out / "validation.json").read_text())
    dropped = report["profile_0"]["contexts_judges_disagree"]
    assert three.summary["judges"] == 3
    assert three.summary["contexts_dropped_judges_disagree"] == len(dropped) >= 1
    kept = jsonl(out / "benchpres_unverified.jsonl")
    assert len(kept) == 3 - len(dropped) == len(json.loads((out / "row_ids.json").read_text()))
    assert dropped == [2] and [r["domain"] for r in kept] == ["finance/legal", "finance/legal"]
    assert {r["row_id"] for r in read_csv(out / "labels.csv")} == set(
        json.loads((out / "row_ids.json").read_text())
    )


def test_profile_size_and_budget_default_to_the_paper_scale() -> None:
    from personalign.benchmarks.benchpres.synth import profile_budget

    config = BenchpresSynthConfig(generator=SPEC)
    assert config.n_facts == 147 and "profile" not in config.max_tokens
    assert profile_budget(147) > 2500 and profile_budget(10) < profile_budget(147)
