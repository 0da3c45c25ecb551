"""Loader error paths: each error names the file, the row and the field, in its message too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.benchpres.build import (
    MemoryPreference,
    MemoryProfile,
    RecipientTaskContext,
    load_build_source,
)
from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.errors import DataError
from personalign.fixtures import fixture_path


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in fixture_path(name).read_text().splitlines()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _hicupid_dir(tmp_path: Path, dialogue: list[dict[str, Any]], qa: list[dict[str, Any]]) -> Path:
    _write(tmp_path / "dialogue.jsonl", dialogue)
    _write(tmp_path / "qa.jsonl", qa)
    return tmp_path


def _raises(load: Any, source: Path, row: int | None, field: str | None, detail: str) -> DataError:
    """`load` fails naming `source`, `row` and `field`, in the attributes and in the message."""
    with pytest.raises(DataError) as info:
        load()
    err = info.value
    assert (err.source, err.row, err.field) == (str(source), row, field)
    where = (
        str(source) + (f", row {row}" if row is not None else "") + (f", field '{field}'" if field else "")
    )
    assert str(err).startswith(f"{where}: ")
    assert detail in str(err)
    return err


# --- HiCUPID ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "file", "row", "field", "detail"),
    [
        (lambda d, q: d[2].update(user="  "), "dialogue", 2, "user", "empty user turn"),
        (lambda d, q: d[5].update(type="hobby"), "dialogue", 5, "type", "unknown type 'hobby'"),
        (lambda d, q: q[3].pop("split"), "qa", 3, "split", "local qa rows need a split"),
        (lambda d, q: q[4].update(user_id=77), "qa", 4, "user_id", "user 77 has no dialogues"),
        (lambda d, q: q[1].update(dialogue_id=[998]), "qa", 1, "dialogue_id", "[998]"),
    ],
)
def test_hicupid_bad_rows(tmp_path: Path, change: Any, file: str, row: int, field: str, detail: str) -> None:
    dialogue, qa = _rows("hicupid_dialogue.jsonl"), _rows("hicupid_qa.jsonl")
    change(dialogue, qa)
    root = _hicupid_dir(tmp_path, dialogue, qa)
    _raises(lambda: load_hicupid(root), root / f"{file}.jsonl", row, field, detail)


def test_hicupid_empty_files(tmp_path: Path) -> None:
    dialogue, qa = _rows("hicupid_dialogue.jsonl"), _rows("hicupid_qa.jsonl")
    root = _hicupid_dir(tmp_path, [], qa)
    _raises(lambda: load_hicupid(root), root, None, None, "no dialogue rows found")
    root = _hicupid_dir(tmp_path, dialogue, [])
    _raises(lambda: load_hicupid(root), root, None, None, "no qa rows found")


# --- BenchPreS ---------------------------------------------------------------------------------


def test_benchpres_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    _raises(lambda: load_benchpres(path), path, None, None, "no rows found")


PROFILE = MemoryProfile(
    name="Ana",
    facts=("I rent a flat.",),
    preferences=(MemoryPreference(category="tone", attribute="humorous tone", statement="I like humor."),),
)
CONTEXT = RecipientTaskContext(
    recipient="landlord", task="ask for a repair", domain="housing", labels={"Ana": {"tone": False}}
)


def _source(profiles: list[MemoryProfile]) -> dict[str, Any]:
    return {
        "profiles": [p.model_dump(mode="json") for p in profiles],
        "contexts": [CONTEXT.model_dump(mode="json")],
    }


def test_benchpres_builder_source_errors(tmp_path: Path) -> None:
    path = tmp_path / "source.json"
    _raises(lambda: load_build_source(path), path, None, None, "no such file")
    path.write_text('{"profiles": [')
    _raises(lambda: load_build_source(path), path, None, None, "not valid JSON")
    path.write_text(json.dumps(_source([PROFILE, PROFILE])))
    _raises(lambda: load_build_source(path), path, None, "profiles.name", "profile names must be unique")
    path.write_text(json.dumps(_source([PROFILE])))
    assert [p.name for p in load_build_source(path).profiles] == ["Ana"]
    broken = _source([PROFILE])
    broken["contexts"][0]["labels"] = {"Ana": {}}
    path.write_text(json.dumps(broken))
    _raises(lambda: load_build_source(path), path, 0, "contexts.labels", "lacks labels for 'Ana'")
