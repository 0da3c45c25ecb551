"""CUPID loader: the official schema from the HF hub or local files, validated row by row.

Sources:
- `fixture` (default): the bundled sample of our own, in the official schema;
- `hf` or `hf:<repo>[:<split>]`: the hub (default `kixlab/CUPID`, split `test`), needs `datasets`;
- a path to `.parquet`, `.json`, `.jsonl`, or a directory of per-instance `.json` files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from personalign.benchmarks.cupid.schema import CupidInstance
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

HF_REPO = "kixlab/CUPID"
HF_SPLIT = "test"


@dataclass(frozen=True)
class LoadedDataset(Loaded[CupidInstance]):
    """Validated CUPID instances plus where they came from (for the manifest)."""

    @property
    def instances(self) -> list[CupidInstance]:
        return self.items


def parse_instance(record: RawRecord) -> CupidInstance:
    """Validate one raw record; errors name the file, row and the first offending field."""
    data = dict(record.data)
    try:
        return CupidInstance.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(tuple(first["loc"]))
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unexpected field (not in the CUPID schema)"
        raise DataError(record.source, record.row, field or None, message) from None


def validate_instances(records: Iterable[RawRecord]) -> list[CupidInstance]:
    """Every instance validated; a repeated `persona_id#instance_type` is refused."""
    return parse_unique(records, parse_instance, "persona_id", "instance id")


def describe_source(source: str | Path) -> tuple[str, str | None]:
    """The (source, sha256) that `load_cupid` would report, without parsing the data."""
    return describe_file_source(source, fixture_path("cupid_sample.jsonl"), "cupid_sample.jsonl")


def load_cupid(source: str | Path = "fixture") -> LoadedDataset:
    """Load and validate CUPID instances from `source` (see module docstring)."""
    instances, name, sha256 = load_one_file_source(
        source, fixture_path("cupid_sample.jsonl"), (HF_REPO, HF_SPLIT), validate_instances, "instances"
    )
    return LoadedDataset(instances, name, sha256)
