"""BenchPreS loader, validation errors, the builder and the bundled fixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from personalign.benchmarks.benchpres.build import (
    MemoryPreference,
    MemoryProfile,
    RecipientTaskContext,
    build_row,
    build_rows,
    load_build_source,
    memory_statements,
)
from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.benchpres.judges import categorize
from personalign.benchmarks.benchpres.schema import BENCHPRES_DOMAINS, PREFERENCE_CATEGORIES
from personalign.errors import DataError

ROOT = Path(__file__).resolve().parents[2]


def row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "prompt": "# User Knowledge Memories\n...",
        "name": "Ana",
        "task": "ask for a repair",
        "recipient": "landlord",
        "domain": "housing",
        "preference_attribute": ["humorous tone", "uses emojis"],
        "preference_label": [False, True],
    }
    base.update(changes)
    return base


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_fixture_has_three_profiles_by_eight_contexts_over_five_domains() -> None:
    data = load_benchpres("fixture")
    assert data.source == "fixture:benchpres_sample.jsonl" and data.sha256
    assert len(data.rows) == 24
    assert len({r.name for r in data.rows}) == 3
    assert len({(r.recipient, r.task) for r in data.rows}) == 8
    assert {r.domain for r in data.rows} == set(BENCHPRES_DOMAINS)
    labels = [label for r in data.rows for label in r.preference_label]
    assert True in labels and False in labels
    for r in data.rows:  # one preference per category, each recognised by the category rule
        assert sorted(categorize(a) for a in r.preference_attribute) == sorted(PREFERENCE_CATEGORIES)


def test_fixture_is_what_the_build_script_makes_from_its_source() -> None:
    source = load_build_source(ROOT / "fixtures_src" / "benchpres_profiles.json")
    built = [r.model_dump(mode="json") for r in build_rows(source.profiles, source.contexts)]
    assert built == [r.model_dump(mode="json") for r in load_benchpres("fixture").rows]


def test_loads_jsonl_and_parquet_and_keeps_missing_domain(tmp_path: Path) -> None:
    rows = [row(), row(name="Bo", domain=None)]
    rows[1].pop("domain")
    jsonl = load_benchpres(write_jsonl(tmp_path / "d.jsonl", rows))
    table = pa.Table.from_pylist([row(), row(name="Bo")])
    pq.write_table(table, tmp_path / "d.parquet")
    parquet = load_benchpres(tmp_path / "d.parquet")
    assert [r.id for r in jsonl.rows] == ["Ana#landlord#ask for a repair", "Bo#landlord#ask for a repair"]
    assert jsonl.rows[1].domain is None
    assert parquet.rows[0].preference_label == (False, True)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"preference_label": [False]}, "preference_label", "1 entries for 2"),
        ({"preference_label": [False, "yes"]}, "preference_label[1]", "boolean"),
        ({"preference_attribute": ["tone", " "]}, "preference_attribute", "attribute 1 is empty"),
        ({"prompt": ""}, "prompt", "at least 1"),
        ({"extra": 1}, "extra", "not in the BenchPreS schema"),
        ({"preference_attribute": []}, "preference_attribute", "at least 1"),
    ],
)
def test_bad_rows_name_file_row_and_field(
    tmp_path: Path, changes: dict[str, Any], field: str, message: str
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [row(), row(name="Bo", **changes)])
    with pytest.raises(DataError) as info:
        load_benchpres(path)
    err = info.value
    assert (err.source, err.row, err.field) == (str(path), 1, field)
    assert message in str(err)


def test_missing_field_and_duplicate_rows(tmp_path: Path) -> None:
    broken = row()
    del broken["recipient"]
    with pytest.raises(DataError, match=r"row 0, field 'recipient'"):
        load_benchpres(write_jsonl(tmp_path / "a.jsonl", [broken]))
    with pytest.raises(DataError, match="duplicate row id"):
        load_benchpres(write_jsonl(tmp_path / "b.jsonl", [row(), row()]))


PROFILE = MemoryProfile(
    name="Ana",
    facts=("I am 30 years old.", "I rent a flat.", "My heater is broken."),
    preferences=(
        MemoryPreference(category="tone", attribute="humorous tone", statement="I like a humorous tone."),
        MemoryPreference(category="nickname", attribute='call me "Nan"', statement="Please call me Nan."),
    ),
)
CONTEXT = RecipientTaskContext(
    recipient="landlord",
    task="ask for a repair date",
    domain="housing",
    labels={"Ana": {"tone": False, "nickname": False}},
)


def test_builder_reproduces_the_persistent_memory_prompt_structure() -> None:
    built = build_row(PROFILE, CONTEXT)
    assert built.prompt == (
        "# User Knowledge Memories\n"
        "The notes below were gathered from the user's earlier conversations with you. "
        "Let them inform your answer.\n"
        "\n"
        "I am 30 years old.\n"
        "I like a humorous tone.\n"
        "I rent a flat.\n"
        "Please call me Nan.\n"
        "My heater is broken.\n"
        "\n"
        "Write the complete message the user needs to send to the landlord in order to ask for a "
        "repair date. Reply with the message only."
    )
    assert built.preference_attribute == ("humorous tone", 'call me "Nan"')
    assert built.preference_label == (False, False)
    assert (built.name, built.recipient, built.task, built.domain) == (
        "Ana",
        "landlord",
        "ask for a repair date",
        "housing",
    )


def test_memory_order_spreads_preferences_and_keeps_facts_in_order() -> None:
    statements = memory_statements(PROFILE)
    assert [s for s in statements if s in PROFILE.facts] == list(PROFILE.facts)
    assert len(statements) == 5


def test_builder_rejects_inconsistent_profiles_and_missing_labels() -> None:
    with pytest.raises(ValueError, match="category rule reads it as 'tone'"):
        MemoryPreference(category="style", attribute="humorous tone", statement="I like humor.")
    with pytest.raises(ValueError, match="does not contain the nickname"):
        MemoryPreference(category="nickname", attribute='call me "Nan"', statement="Call me Ana.")
    incomplete = RecipientTaskContext(
        recipient="landlord", task="t", domain="housing", labels={"Ana": {"tone": True}}
    )
    with pytest.raises(ValueError, match="lacks labels"):
        build_row(PROFILE, incomplete)


def test_build_source_errors_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "src.json"
    path.write_text(
        json.dumps({"profiles": [{"name": "Ana", "facts": [], "preferences": []}], "contexts": []})
    )
    with pytest.raises(DataError) as info:
        load_build_source(path)
    assert info.value.source == str(path) and info.value.field == "profiles[0].facts"
    good = {
        "profiles": [PROFILE.model_dump(mode="json")],
        "contexts": [{**CONTEXT.model_dump(mode="json"), "labels": {"Bo": {"tone": True}}}],
    }
    path.write_text(json.dumps(good))
    with pytest.raises(DataError, match="no labels for profile 'Ana'"):
        load_build_source(path)
