"""Read tabular records from local files, keeping the row number for error messages.

Supported: `.parquet`, `.jsonl`, `.json` (a list of records, or one record), and a
directory of `.json` files (one record per file, e.g. locally synthesized instances).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign.errors import DataError


@dataclass(frozen=True)
class RawRecord:
    """One record as read from disk, with where it came from."""

    source: str
    row: int
    data: dict[str, Any]


def _as_record(source: str, row: int, value: Any) -> RawRecord:
    if not isinstance(value, dict):
        raise DataError(source, row, None, f"expected a JSON object, got {type(value).__name__}")
    return RawRecord(source, row, value)


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    with path.open(encoding="utf-8") as handle:
        row = 0
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    str(path), row, None, f"line {line_no} is not valid JSON ({exc.msg})"
                ) from exc
            yield _as_record(str(path), row, value)
            row += 1


def _read_json(path: Path) -> Iterator[RawRecord]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(str(path), None, None, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if isinstance(value, list):
        for row, item in enumerate(value):
            yield _as_record(str(path), row, item)
    else:
        yield _as_record(str(path), 0, value)


def _read_parquet(path: Path) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(str(path), None, None, f"cannot read parquet ({exc})") from exc
    for row, item in enumerate(table.to_pylist()):
        yield _as_record(str(path), row, item)


def read_records(path: str | Path) -> Iterator[RawRecord]:
    """Yield the records of a local file or directory of JSON files."""
    p = Path(path)
    if not p.exists():
        raise DataError(str(p), None, None, "no such file or directory")
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".json")
        if not files:
            raise DataError(str(p), None, None, "directory holds no .json files")
        for f in files:
            yield from _read_json(f)
        return
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        yield from _read_jsonl(p)
    elif suffix == ".json":
        yield from _read_json(p)
    elif suffix == ".parquet":
        yield from _read_parquet(p)
    else:
        raise DataError(
            str(p), None, None, f"unsupported file type {suffix!r} (use .parquet, .json or .jsonl)"
        )


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, or of a directory's `.json` files in name order."""
    p = Path(path)
    digest = hashlib.sha256()
    files = sorted(f for f in p.iterdir() if f.suffix == ".json") if p.is_dir() else [p]
    for f in files:
        with f.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
