"""A benchmark's loaded data: its validated items and where they came from (for the manifest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Loaded(Generic[T]):
    """Validated items plus where they came from: `source` names the file or hub dataset, `sha256`
    its content hash (None where there is none to take, e.g. a hub dataset)."""

    items: list[T]
    source: str
    sha256: str | None

    def record(self, count: str) -> dict[str, Any]:
        """For the run manifest: source, sha256 and the number of items under the key `count`."""
        return {"source": self.source, "sha256": self.sha256, count: len(self.items)}
