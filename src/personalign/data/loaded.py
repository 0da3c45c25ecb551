"""A benchmark's loaded data: its validated items and where they came from (for the manifest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """Validated items plus where they came from: `source` names the file or hub dataset, `sha256`
    its content hash (None where there is none to take, e.g. a hub dataset)."""

    items: list[T]
    source: str
    sha256: str | None
