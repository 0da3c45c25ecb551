from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.hicupid.data import describe_source, load_hicupid
from personalign.errors import DataError
from personalign.fixtures import fixture_path


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in fixture_path(name).read_text().splitlines()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_fixture_groups_turns_into_dialogues_in_row_order() -> None:
    data = load_hicupid("fixture")
    assert sorted(data.histories) == [0, 1, 2, 3, 4]
    history = data.histories[0]
    assert history.dialogue_ids == tuple(range(12))
    assert [d.type for d in history.dialogues[:4]] == ["persona", "profile", "persona", "schedule"]
    first = history.dialogues[0]
    assert len(first.turns) == 2
    assert [m.role for m in first.messages()] == ["user", "assistant", "user", "assistant"]
    assert first.turns[0].user.startswith("I finally sent that overhanging route")
    assert data.dialogue_splits[4] == "test"


def test_fixture_has_all_splits_and_types_with_both_answers() -> None:
    data = load_hicupid()
    for split in ("train", "test_1", "test_2"):
        assert {q.type for q in data.questions([split])} == {"persona", "profile", "schedule"}
    # Test Set 2 users never appear in train; Test Set 1 users all do.
    train_users = {q.user_id for q in data.questions(["train"])}
    assert {q.user_id for q in data.questions(["test_2"])}.isdisjoint(train_users)
    assert {q.user_id for q in data.questions(["test_1"])} <= train_users
    profile = next(q for q in data.qa if q.type == "profile")
    assert len(profile.dialogue_id) == 6 and len(profile.gold_groups()) == 2
    assert all(q.personalized_answer != q.general_answer for q in data.qa)
    assert len({q.id for q in data.qa}) == len(data.qa)


def test_hub_layout_directory_takes_splits_from_file_names(tmp_path: Path) -> None:
    dialogue, qa = _rows("hicupid_dialogue.jsonl"), _rows("hicupid_qa.jsonl")
    for row in dialogue:
        row.pop("split")
    _write(tmp_path / "dialogue" / "train-00000-of-00001.jsonl", dialogue)
    by_split: dict[str, list[dict[str, Any]]] = {}
    for row in qa:
        by_split.setdefault(row.pop("split"), []).append(row)
    for split, rows in by_split.items():
        _write(tmp_path / "qa" / f"{split}-00000-of-00001.jsonl", rows)
    data = load_hicupid(tmp_path)
    assert len(data.qa) == len(qa)
    assert {q.split for q in data.qa} == {"train", "test_1", "test_2"}
    source, sha = describe_source(tmp_path)
    assert source == str(tmp_path) and sha == data.sha256


def _flat(tmp_path: Path, dialogue: list[dict[str, Any]], qa: list[dict[str, Any]]) -> Path:
    _write(tmp_path / "dialogue.jsonl", dialogue)
    _write(tmp_path / "qa.jsonl", qa)
    return tmp_path


@pytest.mark.parametrize(
    ("mutate", "field", "row", "message"),
    [
        (lambda d, q: q[3].update(dialogue_id=[5, 999]), "dialogue_id", 3, "999"),
        (lambda d, q: q[0].pop("personalized_answer"), "personalized_answer", 0, "Field required"),
        (lambda d, q: q[1].update(type="hobby"), "type", 1, "Input should be"),
        (lambda d, q: q[2].update(split="validation"), "split", None, "unknown qa split"),
        (lambda d, q: q[4].update(question_id=q[0]["question_id"]), "question_id", 4, "duplicate"),
        (lambda d, q: q[6]["metadata"].update(schedule=None), None, 6, "metadata.schedule"),
        (lambda d, q: d[1].update(type="profile"), "type", 1, "was 'persona' at row 0"),
        (lambda d, q: d[2].pop("assistant"), "assistant", 2, "missing field"),
        (lambda d, q: d[3].update(user_id="zero"), "user_id", 3, "expected int"),
        (lambda d, q: d[20].update(dialogue_id=0), "dialogue_id", 20, "belongs to user 0"),
    ],
)
def test_bad_rows_name_file_row_and_field(
    tmp_path: Path, mutate: Any, field: str | None, row: int | None, message: str
) -> None:
    dialogue, qa = _rows("hicupid_dialogue.jsonl"), _rows("hicupid_qa.jsonl")
    if field == "dialogue_id" and row == 20:
        dialogue[20]["user_id"] = 1
    mutate(dialogue, qa)
    with pytest.raises(DataError) as info:
        load_hicupid(_flat(tmp_path, dialogue, qa))
    err = info.value
    assert err.source.endswith(".jsonl")
    if row is not None:
        assert err.row == row
    if field is not None:
        assert err.field == field
    assert message in str(err)


def test_missing_files_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no HiCUPID files"):
        load_hicupid(tmp_path)


def test_hub_parquet_snapshot_with_nested_metadata(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dialogue, qa = _rows("hicupid_dialogue.jsonl"), _rows("hicupid_qa.jsonl")
    for row in dialogue:
        row.pop("split")
    (tmp_path / "dialogue").mkdir()
    (tmp_path / "qa").mkdir()
    pq.write_table(pa.Table.from_pylist(dialogue), tmp_path / "dialogue" / "train-00000-of-00001.parquet")
    for split in ("train", "test_1", "test_2"):
        rows = [{k: v for k, v in r.items() if k != "split"} for r in qa if r["split"] == split]
        # One table per split: struct columns with nulls (profile/schedule) as the hub stores them.
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "qa" / f"{split}-00000-of-00001.parquet")
    data = load_hicupid(tmp_path)
    fixture = load_hicupid()
    assert sorted(data.qa, key=lambda q: q.id) == sorted(fixture.qa, key=lambda q: q.id)
    assert data.histories == fixture.histories
