"""`open_store`: a memory store from a URL or a path (SQLite file or PostgreSQL database)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.memory.backend import DEFAULT_TENANT, Limits, MemoryBackend

PG_SCHEMES = ("postgresql://", "postgres://")


def sqlite_path(target: str) -> str:
    """The file of a ``sqlite:`` URL, as SQLAlchemy reads them: ``sqlite:///rel.db`` is relative,
    ``sqlite:////abs/path.db`` absolute, ``sqlite://`` or ``sqlite:///:memory:`` a throwaway store."""
    rest = target[len("sqlite:") :]
    if rest in ("", "//", "///:memory:"):
        return ":memory:"
    if not rest.startswith("///"):
        raise ConfigError(
            f"bad SQLite store URL {target!r}: write sqlite:///relative/path or sqlite:////abs/path"
        )
    return rest[3:]


def open_store(
    target: str | Path | MemoryBackend,
    *,
    tenant: str = DEFAULT_TENANT,
    limits: Limits | None = None,
    **options: Any,
) -> MemoryBackend:
    """Open the store named by ``target``: a plain path or ``sqlite:///PATH`` (SQLite, the default),
    or ``postgresql://user@host:port/db`` (PostgreSQL; needs the ``serve`` extra). A store object
    passes through unchanged. ``options`` go to the PostgreSQL store (``pool_size``, ``timeout``).
    """
    if not isinstance(target, (str, Path)):
        return target
    text = str(target)
    if isinstance(target, Path) and re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", text):
        raise ConfigError(f"store URL given as a path ({text!r}): pass URLs as text (a path collapses '//')")
    if text.startswith(PG_SCHEMES):
        from personalign.memory.store_pg import PostgresStore

        return PostgresStore(text, limits=limits or Limits(), tenant=tenant, **options)
    if options:
        raise ConfigError(f"options {sorted(options)} apply to PostgreSQL stores only, not {text!r}")
    from personalign.memory.store import MemoryStore

    if isinstance(target, str) and text.startswith("sqlite:"):
        text = sqlite_path(text)
    elif "://" in text:
        raise ConfigError(
            f"unknown memory store URL {text!r} (use a path, sqlite:///PATH or postgresql://...)"
        )
    return MemoryStore(text, limits=limits or Limits(), tenant=tenant)
