"""BenchPreS loader: the official schema from the HF hub or local files, validated row by row.

Sources:
- `fixture` (default): the bundled sample of our own, in the official schema;
- `hf` or `hf:<repo>[:<split>]`: the hub (default `sangyon/BenchPreS`, split `test`), needs `datasets`;
- a path to `.parquet`, `.json` or `.jsonl` (or a directory of `.json` files).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from personalign.data.cupid import _field_path
from personalign.data.files import RawRecord, file_sha256, read_records
from personalign.errors import ConfigError, DataError
from personalign.fixtures import fixture_path
from personalign.types import BenchPresRow

HF_REPO = "sangyon/BenchPreS"
HF_SPLIT = "test"
FIXTURE = "benchpres_sample.jsonl"


@dataclass(frozen=True)
class LoadedBenchPres:
    """Validated rows plus where they came from (for the manifest)."""

    rows: list[BenchPresRow]
    source: str
    sha256: str | None


def parse_row(record: RawRecord) -> BenchPresRow:
    """Validate one raw record; errors name the file, row and the first offending field."""
    try:
        return BenchPresRow.model_validate(dict(record.data))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = _field_path(tuple(first["loc"])) or "preference_label"
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unexpected field (not in the BenchPreS schema)"
        raise DataError(record.source, record.row, field, message) from None


def validate_rows(records: Iterable[RawRecord]) -> list[BenchPresRow]:
    rows: list[BenchPresRow] = []
    seen: dict[str, RawRecord] = {}
    for record in records:
        row = parse_row(record)
        if row.id in seen:
            raise DataError(
                record.source,
                record.row,
                "name",
                f"duplicate row id {row.id!r} (same name, recipient and task as row {seen[row.id].row})",
            )
        seen[row.id] = record
        rows.append(row)
    return rows


def _load_hf(spec: str) -> LoadedBenchPres:
    parts = spec.split(":")
    repo = parts[1] if len(parts) > 1 and parts[1] else HF_REPO
    split = parts[2] if len(parts) > 2 and parts[2] else HF_SPLIT
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError("loading from the hub needs `pip install personalign[hf]`") from exc
    rows: list[dict[str, Any]] = [dict(r) for r in datasets.load_dataset(repo, split=split)]
    source = f"hf:{repo}:{split}"
    return LoadedBenchPres(validate_rows(RawRecord(source, i, r) for i, r in enumerate(rows)), source, None)


def describe_source(source: str | Path) -> tuple[str, str | None]:
    """The (source, sha256) that `load_benchpres` would report, without parsing the data."""
    text = str(source)
    if text == "fixture":
        return f"fixture:{FIXTURE}", file_sha256(fixture_path(FIXTURE))
    if text == "hf" or text.startswith("hf:"):
        return text, None
    path = Path(text)
    if not path.exists():
        raise DataError(text, None, None, "no such file or directory")
    return text, file_sha256(path)


def load_benchpres(source: str | Path = "fixture") -> LoadedBenchPres:
    """Load and validate BenchPreS rows from `source` (see module docstring)."""
    text = str(source)
    if text == "fixture":
        path = fixture_path(FIXTURE)
        return LoadedBenchPres(validate_rows(read_records(path)), f"fixture:{FIXTURE}", file_sha256(path))
    if text == "hf" or text.startswith("hf:"):
        return _load_hf(text)
    path = Path(text)
    rows = validate_rows(read_records(path))
    if not rows:
        raise DataError(str(path), None, None, "no rows found")
    return LoadedBenchPres(rows, str(path), file_sha256(path))
