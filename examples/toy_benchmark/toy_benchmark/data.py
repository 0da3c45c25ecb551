"""The toy benchmark's data: one JSON object per line (`ColourItem`), read strictly.

`load("fixture")` reads the bundled `fixtures/colours.jsonl`; any other value is a path to a file
in the same schema. A bad line is a `DataError` naming the file, the row and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from personalign.errors import DataError
from personalign.types import Message

FIXTURE = "colours.jsonl"


class ColourItem(BaseModel):
    """One question: a short history in which the user states (and maybe changes) a favourite colour."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    kind: Literal["stated", "changed"]  # "changed": an older favourite precedes the current one
    history: tuple[Message, ...] = Field(min_length=1)
    question: str = Field(min_length=1)
    colour: str = Field(min_length=1, description="the current favourite colour (gold answer)")


@dataclass(frozen=True)
class ColourDataset:
    """What the lifecycle needs from a loaded dataset: `source`, `sha256`, and the items."""

    source: str
    sha256: str | None
    items: tuple[ColourItem, ...]


def _resolve(data: str | Path) -> tuple[str, bytes]:
    """(source as recorded in the manifest, file bytes) of `data`."""
    if str(data) == "fixture":
        raw = resources.files("toy_benchmark").joinpath(f"fixtures/{FIXTURE}").read_bytes()
        return f"fixture:{FIXTURE}", raw
    path = Path(data)
    try:
        return str(path), path.read_bytes()
    except OSError as exc:
        raise DataError(str(path), None, None, f"cannot read the data ({exc.strerror or exc})") from None


def describe(data: str | Path) -> tuple[str, str | None]:
    """(source, sha256) without parsing: lets a finished run be found without loading."""
    source, raw = _resolve(data)
    return source, hashlib.sha256(raw).hexdigest()


def load(data: str | Path) -> ColourDataset:
    """Every item of `data`, validated; duplicate ids are refused (ids key results and resume)."""
    source, raw = _resolve(data)
    items: list[ColourItem] = []
    seen: set[str] = set()
    for row, line in enumerate(raw.decode("utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            item = ColourItem.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(source, row, None, f"not valid JSON ({exc.msg})") from None
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise DataError(source, row, field, str(error["msg"])) from None
        if item.id in seen:
            raise DataError(source, row, "id", f"duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise DataError(source, None, None, "no items")
    return ColourDataset(source, hashlib.sha256(raw).hexdigest(), tuple(items))
