"""The SQLite memory store: users, sessions, turns, memories with provenance and validity, history.

One file per store. Every write is one transaction (a process killed mid-write leaves the previous
state); every read and write names a user id and touches only that user's rows. Superseded memories
are kept with their validity interval; the ``memory_history`` table records each change.
The queries are shared with the PostgreSQL store (:mod:`personalign.memory.sqlbase`); this module
holds the connection, the SQLite schema and its migrations.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from personalign.errors import ConfigError
from personalign.memory.backend import DEFAULT_LIMITS, DEFAULT_TENANT, Limits, NewSession, UnknownUserError
from personalign.memory.sqlbase import (
    ROLES,
    SqlStore,
    Tx,
    check_tenant,
    check_text,
    check_time,
    session_source,
    validate_messages,
)

# Version 1: the schema of the first memory store (one user namespace); version 2: tenants, internal
# user ids, ids never reused. A store written by an older personalign is migrated when opened.
SCHEMA_VERSION = 2

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (
  user_id TEXT PRIMARY KEY, created REAL NOT NULL, revision INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS sessions (
  id INTEGER PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(user_id), external_id TEXT,
  ts REAL NOT NULL, seq INTEGER NOT NULL, n_turns INTEGER NOT NULL, metadata TEXT NOT NULL,
  created REAL NOT NULL, UNIQUE (user_id, external_id), UNIQUE (user_id, seq));
CREATE TABLE IF NOT EXISTS turns (
  session_id INTEGER NOT NULL REFERENCES sessions(id), user_id TEXT NOT NULL, idx INTEGER NOT NULL,
  role TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (session_id, idx));
CREATE TABLE IF NOT EXISTS memories (
  id INTEGER PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(user_id), kind TEXT NOT NULL,
  category TEXT NOT NULL, factor TEXT NOT NULL, factor_key TEXT NOT NULL, content TEXT NOT NULL,
  session_id INTEGER REFERENCES sessions(id), evidence TEXT NOT NULL, valid_from REAL NOT NULL,
  valid_to REAL, superseded_by INTEGER REFERENCES memories(id), source TEXT NOT NULL,
  created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memory_history (
  id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, memory_id INTEGER NOT NULL REFERENCES memories(id),
  event TEXT NOT NULL, at REAL NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS embeddings (
  user_id TEXT NOT NULL, unit TEXT NOT NULL, unit_id INTEGER NOT NULL, embedder TEXT NOT NULL,
  vector BLOB NOT NULL, PRIMARY KEY (unit, unit_id, embedder));
CREATE TABLE IF NOT EXISTS extractions (
  session_id INTEGER NOT NULL REFERENCES sessions(id), user_id TEXT NOT NULL, extractor TEXT NOT NULL,
  status TEXT NOT NULL, error TEXT, n_memories INTEGER NOT NULL, at REAL NOT NULL,
  PRIMARY KEY (session_id, extractor));
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user_id, seq);
CREATE INDEX IF NOT EXISTS turns_user ON turns (user_id, session_id);
CREATE INDEX IF NOT EXISTS memories_user ON memories (user_id, factor_key, kind);
CREATE INDEX IF NOT EXISTS history_memory ON memory_history (user_id, memory_id);
CREATE INDEX IF NOT EXISTS embeddings_user ON embeddings (user_id, unit, embedder);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '1');
"""

# Version 2 tables are built beside the version 1 ones (suffix _v2), filled, and renamed over them.
# The indexes on referencing columns keep the foreign-key checks of delete_user from scanning tables.
# The index names stay those of version 1, so an older personalign opening a migrated file skips
# its CREATE INDEX statements and stops at its schema-version check with a clear message.
_TABLES_V2 = """
CREATE TABLE users_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, user_id TEXT NOT NULL,
  created REAL NOT NULL, revision INTEGER NOT NULL DEFAULT 0, UNIQUE (tenant, user_id));
CREATE TABLE sessions_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL REFERENCES users_v2(id), external_id TEXT,
  ts REAL NOT NULL, seq INTEGER NOT NULL, n_turns INTEGER NOT NULL, metadata TEXT NOT NULL,
  created REAL NOT NULL, UNIQUE (uid, external_id), UNIQUE (uid, seq));
CREATE TABLE turns_v2 (
  session_id INTEGER NOT NULL REFERENCES sessions_v2(id), uid INTEGER NOT NULL, idx INTEGER NOT NULL,
  role TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (session_id, idx));
CREATE TABLE memories_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL REFERENCES users_v2(id), kind TEXT NOT NULL,
  category TEXT NOT NULL, factor TEXT NOT NULL, factor_key TEXT NOT NULL, content TEXT NOT NULL,
  session_id INTEGER REFERENCES sessions_v2(id), evidence TEXT NOT NULL, valid_from REAL NOT NULL,
  valid_to REAL, superseded_by INTEGER REFERENCES memories_v2(id), source TEXT NOT NULL,
  created REAL NOT NULL);
CREATE TABLE memory_history_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL,
  memory_id INTEGER NOT NULL REFERENCES memories_v2(id), event TEXT NOT NULL, at REAL NOT NULL,
  detail TEXT NOT NULL);
CREATE TABLE embeddings_v2 (
  uid INTEGER NOT NULL, unit TEXT NOT NULL, unit_id INTEGER NOT NULL, embedder TEXT NOT NULL,
  vector BLOB NOT NULL, PRIMARY KEY (unit, unit_id, embedder));
CREATE TABLE extractions_v2 (
  session_id INTEGER NOT NULL REFERENCES sessions_v2(id), uid INTEGER NOT NULL, extractor TEXT NOT NULL,
  status TEXT NOT NULL, error TEXT, n_memories INTEGER NOT NULL, at REAL NOT NULL,
  PRIMARY KEY (session_id, extractor));
INSERT INTO users_v2 (tenant, user_id, created, revision)
  SELECT 'default', user_id, created, revision FROM users ORDER BY created, user_id;
INSERT INTO sessions_v2 (id, uid, external_id, ts, seq, n_turns, metadata, created)
  SELECT s.id, u.id, s.external_id, s.ts, s.seq, s.n_turns, s.metadata, s.created
  FROM sessions s JOIN users_v2 u ON u.tenant = 'default' AND u.user_id = s.user_id;
INSERT INTO turns_v2 (session_id, uid, idx, role, content)
  SELECT t.session_id, s.uid, t.idx, t.role, t.content FROM turns t JOIN sessions_v2 s ON s.id = t.session_id;
INSERT INTO memories_v2 (id, uid, kind, category, factor, factor_key, content, session_id, evidence,
  valid_from, valid_to, superseded_by, source, created)
  SELECT m.id, u.id, m.kind, m.category, m.factor, m.factor_key, m.content, m.session_id, m.evidence,
  m.valid_from, m.valid_to, m.superseded_by, m.source, m.created
  FROM memories m JOIN users_v2 u ON u.tenant = 'default' AND u.user_id = m.user_id;
INSERT INTO memory_history_v2 (id, uid, memory_id, event, at, detail)
  SELECT h.id, m.uid, h.memory_id, h.event, h.at, h.detail
  FROM memory_history h JOIN memories_v2 m ON m.id = h.memory_id;
INSERT INTO embeddings_v2 (uid, unit, unit_id, embedder, vector)
  SELECT u.id, e.unit, e.unit_id, e.embedder, e.vector
  FROM embeddings e JOIN users_v2 u ON u.tenant = 'default' AND u.user_id = e.user_id;
INSERT INTO extractions_v2 (session_id, uid, extractor, status, error, n_memories, at)
  SELECT x.session_id, s.uid, x.extractor, x.status, x.error, x.n_memories, x.at
  FROM extractions x JOIN sessions_v2 s ON s.id = x.session_id;
DROP TABLE extractions;
DROP TABLE embeddings;
DROP TABLE memory_history;
DROP TABLE turns;
DROP TABLE memories;
DROP TABLE sessions;
DROP TABLE users;
ALTER TABLE users_v2 RENAME TO users;
ALTER TABLE sessions_v2 RENAME TO sessions;
ALTER TABLE turns_v2 RENAME TO turns;
ALTER TABLE memories_v2 RENAME TO memories;
ALTER TABLE memory_history_v2 RENAME TO memory_history;
ALTER TABLE embeddings_v2 RENAME TO embeddings;
ALTER TABLE extractions_v2 RENAME TO extractions;
CREATE INDEX sessions_user ON sessions (uid, seq);
CREATE INDEX turns_user ON turns (uid, session_id);
CREATE INDEX memories_user ON memories (uid, factor_key, kind);
CREATE INDEX history_memory ON memory_history (uid, memory_id);
CREATE INDEX embeddings_user ON embeddings (uid, unit, embedder);
CREATE INDEX memories_session ON memories (session_id);
CREATE INDEX memories_superseded ON memories (superseded_by);
CREATE INDEX history_memory_id ON memory_history (memory_id);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
"""


def _script(sql: str) -> Callable[[sqlite3.Cursor], None]:
    def apply(cur: sqlite3.Cursor) -> None:
        for statement in sql.split(";"):
            if statement.strip():
                cur.execute(statement)

    return apply


def _check_foreign_keys(cur: sqlite3.Cursor) -> None:
    bad = cur.execute("PRAGMA foreign_key_check").fetchall()
    if bad:
        raise ConfigError(f"memory store migration left {len(bad)} broken references (first: {bad[0]})")


def _v2(cur: sqlite3.Cursor) -> None:
    _script(_TABLES_V2)(cur)
    _check_foreign_keys(cur)


# (version, description, step): applied in order, each once, inside the opening transaction.
MIGRATIONS: tuple[tuple[int, str, Callable[[sqlite3.Cursor], None]], ...] = (
    (1, "memory store tables", _script(_SCHEMA_V1)),
    (2, "tenants: users keyed by (tenant, user_id), internal user ids, ids never reused", _v2),
)


def _migrate(conn: sqlite3.Connection, where: str) -> int:
    """Bring the file to SCHEMA_VERSION; return the version it had. Concurrent openers queue on the
    write lock (BEGIN IMMEDIATE), so each migration runs once."""
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    try:
        cur.execute("PRAGMA defer_foreign_keys = ON")
        cur.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY,"
            " applied REAL NOT NULL, description TEXT NOT NULL)"
        )
        current = int(cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])
        if (
            current == 0
            and cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        ):
            # written before schema_version existed: its meta table says which version it is
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            current = int(row[0]) if row else 0
            for version, description, _ in MIGRATIONS[:current]:
                cur.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?)", (version, time.time(), description)
                )
        if current > SCHEMA_VERSION:
            raise ConfigError(
                f"memory store {where} has schema version {current}; this personalign reads versions up"
                f" to {SCHEMA_VERSION} (upgrade personalign)"
            )
        for version, description, step in MIGRATIONS:
            if version > current:
                step(cur)
                cur.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?)", (version, time.time(), description)
                )
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    else:
        cur.execute("COMMIT")
    finally:
        cur.close()
    return current


class _Shared:
    """The connection and its lock, shared by a store and its tenant views."""

    def __init__(self, path: str) -> None:
        self.lock = threading.RLock()
        self.conn = sqlite3.connect(path, check_same_thread=False, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA foreign_keys=ON")
        if path != ":memory:":
            _switch_to_wal(self.conn)
        self.conn.execute("PRAGMA synchronous=NORMAL")


def _switch_to_wal(conn: sqlite3.Connection, wait: float = 60.0) -> None:
    """WAL mode, waiting out other openers: switching a new file's journal mode needs its lock, and
    SQLite answers "database is locked" at once (no busy wait) while another connection creates it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class MemoryStore(SqlStore):
    """A thread-safe handle on one SQLite memory store file (``:memory:`` for a throwaway store)."""

    def __init__(
        self,
        path: str | Path,
        *,
        limits: Limits = DEFAULT_LIMITS,
        tenant: str = DEFAULT_TENANT,
        _shared: _Shared | None = None,
    ) -> None:
        self.path = Path(path)
        self.url = str(path)
        self.limits = limits
        self.tenant = check_tenant(tenant)
        self._owner = _shared is None
        if _shared is None:
            if str(path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            _shared = _Shared(str(path))
            try:
                self.migrated_from = _migrate(_shared.conn, self.url)
            except BaseException:
                _shared.conn.close()
                raise
        self._shared = _shared

    # --- backend hooks -----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self._shared.lock:
            cur = self._shared.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield Tx(cur, "qmark")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    @contextmanager
    def _read_tx(self) -> Iterator[Tx]:
        with self._shared.lock:
            cur = self._shared.conn.cursor()
            cur.execute("BEGIN")  # one snapshot for all of a read's queries
            try:
                yield Tx(cur, "qmark")
            finally:
                cur.execute("COMMIT")
                cur.close()

    def _backend_problems(self) -> list[str]:
        problems = []
        if self._read("PRAGMA integrity_check")[0][0] != "ok":
            problems.append("sqlite integrity_check failed")
        if self._read("PRAGMA foreign_key_check"):
            problems.append("sqlite foreign_key_check failed")
        return problems

    def _view(self, tenant: str) -> MemoryStore:
        return MemoryStore(self.path, limits=self.limits, tenant=tenant, _shared=self._shared)

    def schema_version(self) -> int:
        return int(self._read("SELECT MAX(version) FROM schema_version")[0][0])

    def close(self) -> None:
        """Close the file (a tenant view leaves it open for the store it came from)."""
        if self._owner:
            with self._shared.lock:
                self._shared.conn.close()


__all__ = [
    "ROLES",
    "SCHEMA_VERSION",
    "Limits",
    "MemoryStore",
    "NewSession",
    "UnknownUserError",
    "check_text",
    "check_time",
    "session_source",
    "validate_messages",
]
