"""HiCUPID loader: the official `dialogue` and `qa` configs, from the hub or local files.

Sources:
- `fixture` (default): the bundled sample of our own (`fixtures/hicupid_dialogue.jsonl`,
  `fixtures/hicupid_qa.jsonl`), in the official schema plus a `split` column;
- `hf` or `hf:<repo>` (default `arranonymsub/HiCUPID`; also published as `12kimih/HiCUPID`): both
  configs with every split, via `datasets` (needs the `hf` extra and network);
- a directory holding either `dialogue.<ext>` and `qa.<ext>` whose rows carry a `split` column, or
  the hub layout `dialogue/<split>[-*].<ext>` and `qa/<split>[-*].<ext>` (ext: parquet, jsonl, json).

Turns are grouped into dialogues by `(user_id, dialogue_id)` and dialogues into each user's history
in the order they first appear (the data has no timestamps; row order is the chronology). Every
question's gold dialogue ids must exist in its user's history.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from personalign.benchmarks.hicupid.schema import (
    QA_SPLITS,
    QUESTION_TYPES,
    HiCupidDialogue,
    HiCupidHistory,
    HiCupidQA,
    HiCupidTurn,
)
from personalign.data.files import RawRecord, is_hub_source, read_records
from personalign.errors import ConfigError, DataError
from personalign.fixtures import fixture_path

HF_REPO = "arranonymsub/HiCUPID"
FIXTURE_FILES = ("hicupid_dialogue.jsonl", "hicupid_qa.jsonl")
_EXTS = (".parquet", ".jsonl", ".json")


@dataclass(frozen=True)
class HiCupidDataset:
    """Users' histories and the questions, plus where they came from (for the manifest)."""

    histories: dict[int, HiCupidHistory]
    qa: list[HiCupidQA]
    source: str
    sha256: str | None
    dialogue_splits: dict[int, str] = field(default_factory=dict)

    def questions(self, splits: Iterable[str]) -> list[HiCupidQA]:
        wanted = set(splits)
        return [q for q in self.qa if q.split in wanted]

    def history(self, user_id: int) -> HiCupidHistory:
        return self.histories[user_id]


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in loc)


def normalize_split(name: str, source: str) -> str:
    """Map a split name to train / test_1 / test_2 (accepts test1, test-1, ...)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    mapped = {"train": "train", "test1": "test_1", "test2": "test_2"}.get(key)
    if mapped is None:
        raise DataError(source, None, "split", f"unknown qa split {name!r} (expected one of {QA_SPLITS})")
    return mapped


# --- dialogue rows ---------------------------------------------------------------------------


def _require(record: RawRecord, name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in record.data:
        raise DataError(record.source, record.row, name, "missing field")
    value = record.data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(record.source, record.row, name, f"expected {want}, got {type(value).__name__}")
    return value


def group_dialogues(records: Iterable[RawRecord]) -> tuple[dict[int, HiCupidHistory], dict[int, str]]:
    """Group turn rows into dialogues and dialogues into per-user histories, in row order."""
    turns: dict[tuple[int, int], list[HiCupidTurn]] = {}
    types: dict[tuple[int, int], tuple[str, RawRecord]] = {}
    owner: dict[int, int] = {}
    order: dict[int, list[int]] = {}
    splits: dict[int, str] = {}
    seen_turns: dict[tuple[int, int, str, str], RawRecord] = {}
    for record in records:
        user_id = _require(record, "user_id", int)
        dialogue_id = _require(record, "dialogue_id", int)
        kind = _require(record, "type", str)
        if kind not in QUESTION_TYPES:
            raise DataError(
                record.source, record.row, "type", f"unknown type {kind!r} (expected {QUESTION_TYPES})"
            )
        user = _require(record, "user", str)
        assistant = _require(record, "assistant", str)
        if not user.strip():
            raise DataError(record.source, record.row, "user", "empty user turn")
        if owner.setdefault(dialogue_id, user_id) != user_id:
            raise DataError(
                record.source,
                record.row,
                "dialogue_id",
                f"dialogue {dialogue_id} belongs to user {owner[dialogue_id]}, not {user_id}",
            )
        key = (user_id, dialogue_id)
        if key in types and types[key][0] != kind:
            first = types[key][1]
            raise DataError(
                record.source,
                record.row,
                "type",
                f"dialogue {dialogue_id} was {types[key][0]!r} at row {first.row}, now {kind!r}",
            )
        if key not in turns:
            turns[key] = []
            types[key] = (kind, record)
            order.setdefault(user_id, []).append(dialogue_id)
        first_turn = seen_turns.setdefault((user_id, dialogue_id, user, assistant), record)
        if first_turn is not record:
            raise DataError(
                record.source,
                record.row,
                "user",
                f"duplicate turn in dialogue {dialogue_id} of user {user_id}: the same user and "
                f"assistant text as row {first_turn.row}",
            )
        turns[key].append(HiCupidTurn(user=user, assistant=assistant))
        if isinstance(record.data.get("split"), str):
            splits.setdefault(user_id, record.data["split"])
    histories = {
        user_id: HiCupidHistory(
            user_id=user_id,
            dialogues=tuple(
                HiCupidDialogue(
                    user_id=user_id,
                    dialogue_id=d,
                    type=types[(user_id, d)][0],  # type: ignore[arg-type]
                    turns=tuple(turns[(user_id, d)]),
                )
                for d in ids
            ),
        )
        for user_id, ids in order.items()
    }
    return histories, splits


# --- qa rows ---------------------------------------------------------------------------------


def parse_qa(record: RawRecord, split: str | None = None) -> HiCupidQA:
    """Validate one qa row; errors name the file, row and the first offending field."""
    data = dict(record.data)
    given = data.pop("split", None)
    split_name = split if split is not None else given
    if split_name is None:
        raise DataError(record.source, record.row, "split", "missing field (local qa rows need a split)")
    if not isinstance(split_name, str):
        raise DataError(record.source, record.row, "split", "expected a string")
    data["split"] = normalize_split(split_name, record.source)
    known = set(HiCupidQA.model_fields)
    data = {k: v for k, v in data.items() if k in known}
    try:
        return HiCupidQA.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = _field_path(tuple(first["loc"])) or None
        raise DataError(record.source, record.row, field_name, first["msg"]) from None


def validate_questions(
    records: Iterable[tuple[RawRecord, str | None]], histories: dict[int, HiCupidHistory]
) -> list[HiCupidQA]:
    questions: list[HiCupidQA] = []
    seen: dict[str, RawRecord] = {}
    for record, split in records:
        qa = parse_qa(record, split)
        history = histories.get(qa.user_id)
        if history is None:
            raise DataError(record.source, record.row, "user_id", f"user {qa.user_id} has no dialogues")
        known = set(history.dialogue_ids)
        missing = [d for d in qa.dialogue_id if d not in known]
        if missing:
            raise DataError(
                record.source,
                record.row,
                "dialogue_id",
                f"gold dialogue(s) {missing} are not in user {qa.user_id}'s history",
            )
        if qa.id in seen:
            raise DataError(
                record.source,
                record.row,
                "question_id",
                f"duplicate question {qa.id!r} (first seen at row {seen[qa.id].row})",
            )
        seen[qa.id] = record
        questions.append(qa)
    return questions


# --- sources ---------------------------------------------------------------------------------


def _sha256_files(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _find_flat(directory: Path, config: str) -> Path | None:
    for ext in _EXTS:
        candidate = directory / f"{config}{ext}"
        if candidate.is_file():
            return candidate
    return None


def _split_files(directory: Path) -> list[tuple[Path, str]]:
    files = sorted(p for p in directory.iterdir() if p.suffix in _EXTS and p.is_file())
    return [(p, re.split(r"[-.]", p.name, maxsplit=1)[0]) for p in files]


def _local_files(root: Path) -> tuple[list[tuple[Path, str | None]], list[tuple[Path, str | None]]]:
    """(dialogue files, qa files), each with the split its name gives (None: rows carry it)."""
    if not root.is_dir():
        raise DataError(str(root), None, None, "expected a directory with dialogue and qa files")
    flat = (_find_flat(root, "dialogue"), _find_flat(root, "qa"))
    if flat[0] and flat[1]:
        return [(flat[0], None)], [(flat[1], None)]
    if (root / "dialogue").is_dir() and (root / "qa").is_dir():
        dialogue = [(p, s) for p, s in _split_files(root / "dialogue")]
        qa = [(p, s) for p, s in _split_files(root / "qa")]
        if dialogue and qa:
            return list(dialogue), list(qa)
    raise DataError(
        str(root),
        None,
        None,
        "no HiCUPID files: expected dialogue.<ext> and qa.<ext>, or dialogue/<split>.<ext> and "
        "qa/<split>.<ext> (ext: parquet, jsonl, json)",
    )


def _tagged(files: list[tuple[Path, str | None]]) -> Iterator[tuple[RawRecord, str | None]]:
    for path, split in files:
        for record in read_records(path):
            yield record, split


def _dialogue_records(files: list[tuple[Path, str | None]]) -> Iterator[RawRecord]:
    for record, split in _tagged(files):
        if split is not None and "split" not in record.data:
            record = RawRecord(record.source, record.row, {**record.data, "split": split})
        yield record


def build_dataset(
    dialogue_records: Iterable[RawRecord],
    qa_records: Iterable[tuple[RawRecord, str | None]],
    source: str,
    sha256: str | None,
) -> HiCupidDataset:
    histories, splits = group_dialogues(dialogue_records)
    if not histories:
        raise DataError(source, None, None, "no dialogue rows found")
    questions = validate_questions(qa_records, histories)
    if not questions:
        raise DataError(source, None, None, "no qa rows found")
    return HiCupidDataset(histories, questions, source, sha256, splits)


def load_local(root: str | Path) -> HiCupidDataset:
    path = Path(root)
    dialogue, qa = _local_files(path)
    sha = _sha256_files([p for p, _ in dialogue + qa])
    return build_dataset(_dialogue_records(dialogue), _tagged(qa), str(path), sha)


def _load_hf(spec: str) -> HiCupidDataset:
    _, _, repo = spec.partition(":")
    repo = repo or HF_REPO
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError("loading from the hub needs `pip install personalign[hf]`") from exc
    source = f"hf:{repo}"
    dialogue_rows: list[RawRecord] = []
    for split, rows in datasets.load_dataset(repo, "dialogue").items():
        base = len(dialogue_rows)
        for i, row in enumerate(rows):
            dialogue_rows.append(
                RawRecord(f"{source}:dialogue:{split}", base + i, {**dict(row), "split": split})
            )
    qa_rows: list[tuple[RawRecord, str | None]] = []
    for split, rows in datasets.load_dataset(repo, "qa").items():
        qa_rows.extend(
            (RawRecord(f"{source}:qa:{split}", i, dict(row)), str(split)) for i, row in enumerate(rows)
        )
    return build_dataset(dialogue_rows, qa_rows, source, None)


def describe_source(source: str | Path) -> tuple[str, str | None]:
    """The (source, sha256) that `load_hicupid` reports, without parsing the data."""
    text = str(source)
    if text == "fixture":
        return "fixture:hicupid", _sha256_files(fixture_path(name) for name in FIXTURE_FILES)
    if is_hub_source(text):
        return text, None
    dialogue, qa = _local_files(Path(text))
    return text, _sha256_files([p for p, _ in dialogue + qa])


def load_hicupid(source: str | Path = "fixture") -> HiCupidDataset:
    """Load and validate HiCUPID from `source` (see the module docstring)."""
    text = str(source)
    if text == "fixture":
        paths = [fixture_path(name) for name in FIXTURE_FILES]
        return build_dataset(
            _dialogue_records([(paths[0], None)]),
            _tagged([(paths[1], None)]),
            "fixture:hicupid",
            _sha256_files(paths),
        )
    if is_hub_source(text):
        return _load_hf(text)
    return load_local(text)
