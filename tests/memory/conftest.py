"""The memory store fixtures: each store test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from personalign.memory import MemoryBackend, open_store

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store: a SQLite file path, or a new database on the test PostgreSQL server."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "m.sqlite")


@pytest.fixture
def make_store(store_url: str) -> Iterator[Callable[..., MemoryBackend]]:
    """Open (another handle on) the test's store; every handle is closed after the test."""
    opened: list[MemoryBackend] = []

    def make(**options: Any) -> MemoryBackend:
        store = open_store(store_url, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
