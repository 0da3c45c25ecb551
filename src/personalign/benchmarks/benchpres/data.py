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

from pydantic import ValidationError

from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.data.files import (
    RawRecord,
    describe_file_source,
    field_path,
    load_one_file_source,
    parse_unique,
)
from personalign.data.loaded import Loaded
from personalign.errors import DataError
from personalign.fixtures import fixture_path

HF_REPO = "sangyon/BenchPreS"
HF_SPLIT = "test"
FIXTURE = "benchpres_sample.jsonl"


@dataclass(frozen=True)
class LoadedBenchPres(Loaded[BenchPresRow]):
    """Validated BenchPreS rows plus where they came from (for the manifest)."""

    @property
    def rows(self) -> list[BenchPresRow]:
        return self.items


# Names a release of the data may give the per-attribute category column; read as
# `preference_category` (the first present wins; two present is an error).
CATEGORY_FIELDS = (
    "preference_category",
    "preference_categories",
    "preference_type",
    "category",
    "categories",
)


def parse_row(record: RawRecord) -> BenchPresRow:
    """Validate one raw record; errors name the file, row and the first offending field."""
    data = dict(record.data)
    present = [name for name in CATEGORY_FIELDS if name in data]
    if len(present) > 1:
        raise DataError(record.source, record.row, present[1], f"two category columns ({', '.join(present)})")
    if present and present[0] != "preference_category":
        data["preference_category"] = data.pop(present[0])
    try:
        return BenchPresRow.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(tuple(first["loc"])) or "preference_label"
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unexpected field (not in the BenchPreS schema)"
        raise DataError(record.source, record.row, field, message) from None


def validate_rows(records: Iterable[RawRecord]) -> list[BenchPresRow]:
    """Every row validated; a repeated (name, recipient, task) is refused."""
    return parse_unique(records, parse_row, "name", "row id", "same name, recipient and task")


def describe_source(source: str | Path) -> tuple[str, str | None]:
    """The (source, sha256) that `load_benchpres` would report, without parsing the data."""
    return describe_file_source(source, fixture_path(FIXTURE), FIXTURE)


def load_benchpres(source: str | Path = "fixture") -> LoadedBenchPres:
    """Load and validate BenchPreS rows from `source` (see module docstring)."""
    rows, name, sha256 = load_one_file_source(
        source, fixture_path(FIXTURE), (HF_REPO, HF_SPLIT), validate_rows, "rows"
    )
    return LoadedBenchPres(rows, name, sha256)
