"""Read tabular records from local files, keeping the row number for error messages.

Supported: `.parquet`, `.jsonl`, `.json` (a list of records, or one record), and a
directory of `.json` files (one record per file, e.g. locally synthesized instances).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from personalign.errors import ConfigError, DataError


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


NOT_UTF8 = "is not UTF-8 text; re-save it as UTF-8 (e.g. iconv -t UTF-8) and try again"


def _decode(path: Path, data: bytes, line_no: int | None, row: int | None) -> str:
    """`data` as UTF-8, or a `DataError` naming the file, row, line and byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"line {line_no}, byte {exc.start}" if line_no is not None else f"byte {exc.start}"
        raise DataError(str(path), row, None, f"{where} {NOT_UTF8}") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(str(path), None, None, f"cannot read it ({exc.strerror or exc})") from None


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    row = 0
    for line_no, raw in enumerate(_read_bytes(path).split(b"\n"), start=1):
        line = _decode(path, raw, line_no, row)
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(str(path), row, None, f"line {line_no} is not valid JSON ({exc.msg})") from exc
        yield _as_record(str(path), row, value)
        row += 1


def _read_json(path: Path) -> Iterator[RawRecord]:
    text = _decode(path, _read_bytes(path), None, None)
    try:
        value = json.loads(text)
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


def json_files(directory: Path) -> list[Path]:
    """The `.json` files of a directory source, in name order; warns naming any other file it skips."""
    entries = sorted(directory.iterdir())
    skipped = [f.name for f in entries if f.suffix != ".json" and not f.name.startswith(".")]
    if skipped:
        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        warnings.warn(
            f"{directory}: skipping {len(skipped)} file(s) that are not .json: {shown}", stacklevel=3
        )
    return [f for f in entries if f.suffix == ".json" and f.is_file()]


def read_records(path: str | Path) -> Iterator[RawRecord]:
    """Yield the records of a local file or directory of JSON files."""
    p = Path(path)
    if not p.exists():
        raise DataError(str(p), None, None, "no such file or directory")
    if p.is_dir():
        files = json_files(p)
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
    files = sorted(f for f in p.iterdir() if f.suffix == ".json" and f.is_file()) if p.is_dir() else [p]
    for f in files:
        with f.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def is_hub_source(text: str) -> bool:
    """`hf` or `hf:repo[:split]`: the dataset comes from the Hugging Face hub."""
    return text == "hf" or text.startswith("hf:")


def hub_records(spec: str, default_repo: str, default_split: str) -> tuple[str, list[RawRecord]]:
    """The rows of `hf[:repo[:split]]` from the hub (needs the `hf` extra and network), as records
    named ``hf:repo:split`` with their row numbers."""
    parts = spec.split(":")
    repo = parts[1] if len(parts) > 1 and parts[1] else default_repo
    split = parts[2] if len(parts) > 2 and parts[2] else default_split
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError("loading from the hub needs `pip install personalign[hf]`") from exc
    source = f"hf:{repo}:{split}"
    rows = datasets.load_dataset(repo, split=split)
    return source, [RawRecord(source, i, dict(row)) for i, row in enumerate(rows)]


def describe_file_source(source: str | Path, fixture: Path, fixture_name: str) -> tuple[str, str | None]:
    """(source, sha256) of a one-file dataset source, without parsing it: the bundled fixture,
    the hub (no hash: the hub's copy may change) or a local file."""
    text = str(source)
    if text == "fixture":
        return f"fixture:{fixture_name}", file_sha256(fixture)
    if is_hub_source(text):
        return text, None
    if not Path(text).exists():
        raise DataError(text, None, None, "no such file or directory")
    return text, file_sha256(text)


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ``prior_interactions[2].dialogue[0].role``."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts)


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


ItemT = TypeVar("ItemT", bound=_HasId)


def parse_unique(
    records: Iterable[RawRecord],
    parse: Callable[[RawRecord], ItemT],
    field: str,
    what: str,
    note: str = "",
) -> list[ItemT]:
    """Parse every record; a second item with an id already seen is a DataError naming the file,
    the row, `field` and the row where the id first appeared (`note` says what the id is made of)."""
    items: list[ItemT] = []
    seen: dict[str, RawRecord] = {}
    for record in records:
        item = parse(record)
        if item.id in seen:
            detail = f"{note} as row" if note else "first seen at row"
            raise DataError(
                record.source,
                record.row,
                field,
                f"duplicate {what} {item.id!r} ({detail} {seen[item.id].row})",
            )
        seen[item.id] = record
        items.append(item)
    return items


def load_one_file_source(
    source: str | Path,
    fixture: Path,
    hub: tuple[str, str],
    validate: Callable[[Iterable[RawRecord]], list[ItemT]],
    what: str,
) -> tuple[list[ItemT], str, str | None]:
    """(items, source, sha256) of a one-file dataset: the bundled `fixture` ("fixture"), the hub
    (`hf[:repo[:split]]`, defaults `hub`; no hash) or a local file (refused when it holds no `what`)."""
    text = str(source)
    if text == "fixture":
        return validate(read_records(fixture)), f"fixture:{fixture.name}", file_sha256(fixture)
    if is_hub_source(text):
        name, records = hub_records(text, *hub)
        return validate(records), name, None
    path = Path(text)
    items = validate(read_records(path))
    if not items:
        raise DataError(str(path), None, None, f"no {what} found")
    return items, str(path), file_sha256(path)
