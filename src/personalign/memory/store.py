"""The SQLite memory store: users, sessions, turns, memories with provenance and validity, history.

One file per store. Every write is one transaction (a process killed mid-write leaves the previous
state); every read and write names a user id and touches only that user's rows. Superseded memories
are kept with their validity interval; the ``memory_history`` table records each change.
"""

from __future__ import annotations

import json
import math
import numbers
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import ConfigError, DataError, PersonalignError
from personalign.memory.supersession import factor_key, same_context, supersession
from personalign.memory.types import MEMORY_KINDS, MemoryRecord, StoredSession, Turn

SCHEMA_VERSION = 1
ROLES = ("user", "assistant", "system")

_SCHEMA = """
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
"""


class UnknownUserError(PersonalignError):
    """A read or write named a user id the store does not hold."""

    def __init__(self, user_id: str, path: Path) -> None:
        super().__init__(f"unknown user id {user_id!r} in memory store {path} (add it with add_user first)")
        self.user_id = user_id


@dataclass(frozen=True)
class Limits:
    """Bounds on one session; anything larger is rejected with a DataError rather than stored."""

    max_turns: int = 1000
    max_chars_per_turn: int = 50_000
    max_chars_per_session: int = 500_000
    max_user_id_chars: int = 200


@dataclass(frozen=True)
class NewSession:
    """A session to store: its messages and optional time, metadata, id and embeddings."""

    messages: Sequence[Any]
    timestamp: float | None = None
    metadata: Mapping[str, Any] | None = None
    external_id: str | None = None
    vectors: Mapping[str, npt.NDArray[np.float32]] | None = None


def session_source(user_id: str, external_id: str | None, n: int, total: int) -> str:
    """How errors name a session: by its id, else by its position in a batch."""
    label: str | int | None = external_id if external_id is not None else (n if total > 1 else None)
    return f"user {user_id!r} session {label!r}" if label is not None else f"user {user_id!r} session"


def check_text(value: Any, source: str, row: int | None, field: str) -> str:
    """`value` as text that SQLite and the tokenizers can store: a str with no lone surrogates."""
    if not isinstance(value, str):
        raise DataError(source, row, field, f"expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(
            source, row, field, f"not valid Unicode text (a lone surrogate at character {exc.start})"
        ) from None
    return value


def check_time(value: Any, source: str, row: int | None, field: str) -> float | None:
    """A timestamp: None (now) or a finite number of seconds since the epoch; never text or NaN."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy numbers are Real
        got = f"{type(value).__name__} {value!r}"
        raise DataError(source, row, field, f"expected seconds since the epoch (a number), got {got}")
    if not math.isfinite(value):
        raise DataError(source, row, field, f"expected a finite number, got {value!r}")
    return float(value)


def validate_messages(
    messages: Sequence[Any], *, source: str, limits: Limits = Limits()
) -> list[tuple[str, str]]:
    """Check a session's messages and return them as (role, content) pairs.

    Accepts objects with ``role``/``content`` attributes (``personalign.types.Message``) or mappings.
    Errors name the session (``source``), the message index (row) and the field.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise DataError(source, None, "messages", "expected a list of messages")
    if not messages:
        raise DataError(source, None, "messages", "empty session: at least one message is required")
    if len(messages) > limits.max_turns:
        raise DataError(
            source, None, "messages", f"{len(messages)} messages exceed the limit of {limits.max_turns}"
        )
    out: list[tuple[str, str]] = []
    total = 0
    for i, message in enumerate(messages):
        if isinstance(message, Mapping):
            role, content = message.get("role"), message.get("content")
        else:
            role, content = getattr(message, "role", None), getattr(message, "content", None)
        if role not in ROLES:
            raise DataError(source, i, "role", f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
        if not isinstance(content, str) or not content.strip():
            raise DataError(source, i, "content", "message content must be a non-empty string")
        check_text(content, source, i, "content")
        if len(content) > limits.max_chars_per_turn:
            raise DataError(
                source,
                i,
                "content",
                f"{len(content)} characters exceed the per-message limit of {limits.max_chars_per_turn}",
            )
        total += len(content)
        out.append((str(role), content))
    if total > limits.max_chars_per_session:
        raise DataError(
            source,
            None,
            "messages",
            f"{total} characters exceed the per-session limit of {limits.max_chars_per_session}",
        )
    return out


def _vector_blob(vector: npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


class MemoryStore:
    """A thread-safe handle on one SQLite memory store file (``:memory:`` for a throwaway store)."""

    def __init__(self, path: str | Path, *, limits: Limits = Limits()) -> None:
        self.path = Path(path)
        self.limits = limits
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60, isolation_level=None)
        self._conn.execute("PRAGMA foreign_keys=ON")
        if str(path) != ":memory:":
            self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        with self._write() as cur:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    cur.execute(statement)
            row = cur.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise ConfigError(
                    f"memory store {self.path} has schema version {row[0]}; this personalign reads "
                    f"version {SCHEMA_VERSION}"
                )

    # --- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction: all of it lands, or (on an error or a kill) none of it."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    def _require_user(self, user_id: str, cur: sqlite3.Cursor | None = None) -> None:
        sql, params = "SELECT 1 FROM users WHERE user_id = ?", (user_id,)
        row = cur.execute(sql, params).fetchone() if cur is not None else (self._read(sql, params) or None)
        if not row:
            raise UnknownUserError(user_id, self.path)

    @staticmethod
    def _bump(cur: sqlite3.Cursor, user_id: str) -> None:
        cur.execute("UPDATE users SET revision = revision + 1 WHERE user_id = ?", (user_id,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # --- users -------------------------------------------------------------------------------

    def add_user(self, user_id: str, *, exist_ok: bool = True) -> None:
        if not isinstance(user_id, str) or not user_id.strip():
            raise DataError("user", None, "user_id", "user id must be a non-empty string")
        check_text(user_id, "user", None, "user_id")
        if len(user_id) > self.limits.max_user_id_chars:
            raise DataError(
                "user", None, "user_id", f"user id longer than {self.limits.max_user_id_chars} characters"
            )
        with self._write() as cur:
            if cur.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone():
                if not exist_ok:
                    raise ConfigError(f"user {user_id!r} already exists in {self.path}")
                return
            cur.execute("INSERT INTO users (user_id, created) VALUES (?, ?)", (user_id, time.time()))

    def has_user(self, user_id: str) -> bool:
        return bool(self._read("SELECT 1 FROM users WHERE user_id = ?", (user_id,)))

    def users(self) -> list[str]:
        return [r[0] for r in self._read("SELECT user_id FROM users ORDER BY user_id")]

    def revision(self, user_id: str) -> int:
        rows = self._read("SELECT revision FROM users WHERE user_id = ?", (user_id,))
        if not rows:
            raise UnknownUserError(user_id, self.path)
        return int(rows[0][0])

    # --- sessions ----------------------------------------------------------------------------

    def add_session(
        self,
        user_id: str,
        messages: Sequence[Any],
        *,
        timestamp: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        vectors: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> int:
        """Store one session (and its embeddings, if given) in one transaction; return its id."""
        return self.add_sessions(
            user_id,
            [
                NewSession(
                    messages, timestamp=timestamp, metadata=metadata, external_id=external_id, vectors=vectors
                )
            ],
        )[0]

    def add_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> list[int]:
        """Store several sessions in one transaction (all or none); return their ids in order."""
        rows = []
        for n, new in enumerate(sessions):
            label = new.external_id if new.external_id is not None else (n if len(sessions) > 1 else None)
            source = (
                f"user {user_id!r} session {label!r}" if label is not None else f"user {user_id!r} session"
            )
            pairs = validate_messages(new.messages, source=source, limits=self.limits)
            if new.external_id is not None:
                check_text(new.external_id, source, None, "external_id")
            try:
                meta_json = json.dumps(
                    dict(new.metadata or {}), ensure_ascii=False, sort_keys=True, allow_nan=False
                )
                meta_json.encode("utf-8")
            except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
                raise DataError(
                    source, None, "metadata", f"metadata must be JSON-serialisable text and numbers: {exc}"
                ) from None
            stamp = check_time(new.timestamp, source, None, "timestamp")
            ts = time.time() if stamp is None else stamp
            rows.append((new, source, pairs, meta_json, ts))
        ids: list[int] = []
        with self._write() as cur:
            self._require_user(user_id, cur)
            seq = cur.execute(
                "SELECT COALESCE(MAX(seq), -1) + 1 FROM sessions WHERE user_id = ?", (user_id,)
            ).fetchone()[0]
            for new, source, pairs, meta_json, ts in rows:
                if (
                    new.external_id is not None
                    and cur.execute(
                        "SELECT 1 FROM sessions WHERE user_id = ? AND external_id = ?",
                        (user_id, new.external_id),
                    ).fetchone()
                ):
                    raise DataError(source, None, "external_id", "a session with this id is already stored")
                cur.execute(
                    "INSERT INTO sessions (user_id, external_id, ts, seq, n_turns, metadata, created)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (user_id, new.external_id, ts, seq, len(pairs), meta_json, time.time()),
                )
                seq += 1
                session_id = int(cur.lastrowid or 0)
                cur.executemany(
                    "INSERT INTO turns (session_id, user_id, idx, role, content) VALUES (?, ?, ?, ?, ?)",
                    [(session_id, user_id, i, role, content) for i, (role, content) in enumerate(pairs)],
                )
                for embedder, vector in (new.vectors or {}).items():
                    cur.execute(
                        "INSERT INTO embeddings VALUES (?, 's', ?, ?, ?)",
                        (user_id, session_id, embedder, _vector_blob(vector)),
                    )
                ids.append(session_id)
            self._bump(cur, user_id)
        return ids

    def sessions(self, user_id: str, *, after_id: int = 0) -> list[StoredSession]:
        """A user's sessions, oldest first (by timestamp, then insertion); ``after_id`` skips older ids."""
        self._require_user(user_id)
        rows = self._read(
            "SELECT id, external_id, ts, seq, metadata FROM sessions WHERE user_id = ? AND id > ?"
            " ORDER BY ts, seq",
            (user_id, after_id),
        )
        turns: dict[int, list[Turn]] = {}
        for sid, idx, role, content in self._read(
            "SELECT session_id, idx, role, content FROM turns WHERE user_id = ? AND session_id > ?"
            " ORDER BY session_id, idx",
            (user_id, after_id),
        ):
            turns.setdefault(sid, []).append(Turn(idx, role, content))
        return [
            StoredSession(sid, user_id, ext, ts, seq, json.loads(meta), tuple(turns.get(sid, ())))
            for sid, ext, ts, seq, meta in rows
        ]

    def session(self, user_id: str, session_id: int) -> StoredSession:
        self._require_user(user_id)
        found = [s for s in self.sessions(user_id, after_id=session_id - 1) if s.id == session_id]
        if not found:
            raise DataError(f"user {user_id!r}", None, "session_id", f"no session {session_id} for this user")
        return found[0]

    def count_sessions(self, user_id: str | None = None) -> int:
        if user_id is None:
            return int(self._read("SELECT COUNT(*) FROM sessions")[0][0])
        self._require_user(user_id)
        return int(self._read("SELECT COUNT(*) FROM sessions WHERE user_id = ?", (user_id,))[0][0])

    # --- embeddings --------------------------------------------------------------------------

    def vectors(
        self, user_id: str, unit: str, embedder: str, ids: Iterable[int]
    ) -> dict[int, npt.NDArray[np.float32]]:
        """Cached embeddings of a user's units (``unit`` 's' = session, 'm' = memory) by id."""
        wanted = set(ids)
        if not wanted:
            return {}
        sql = "SELECT unit_id, vector FROM embeddings WHERE user_id = ? AND unit = ? AND embedder = ?"
        params: list[Any] = [user_id, unit, embedder]
        if len(wanted) <= 500:  # a few new units (a growing store): look them up by key
            sql += f" AND unit_id IN ({', '.join('?' * len(wanted))})"
            params.extend(sorted(wanted))
        rows = self._read(sql, params)
        return {uid: np.frombuffer(blob, dtype=np.float32) for uid, blob in rows if uid in wanted}

    def put_vectors(
        self, user_id: str, unit: str, embedder: str, vectors: Mapping[int, npt.NDArray[np.float32]]
    ) -> None:
        with self._write() as cur:
            self._require_user(user_id, cur)
            cur.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)",
                [(user_id, unit, uid, embedder, _vector_blob(v)) for uid, v in vectors.items()],
            )

    # --- memories ----------------------------------------------------------------------------

    def add_memory(
        self,
        user_id: str,
        content: str,
        *,
        kind: str = "preference",
        category: str = "general",
        context_factor: str = "",
        session_id: int | None = None,
        evidence_turns: Sequence[int] = (),
        valid_from: float | None = None,
        source: str = "manual",
        supersede: bool = True,
    ) -> MemoryRecord:
        """Store one memory; with ``supersede``, a preference replaces the current one of its context.

        Two preferences share a context when their context factors have the same :func:`factor_key`
        (or, with no factor, the same category). The replaced memory keeps its row with ``valid_to``
        set. A memory older than the current one for its context is stored already superseded.
        """
        return self.add_memories(
            user_id,
            [
                {
                    "content": content,
                    "kind": kind,
                    "category": category,
                    "context_factor": context_factor,
                    "evidence_turns": list(evidence_turns),
                }
            ],
            session_id=session_id,
            valid_from=valid_from,
            source=source,
            supersede=supersede,
        )[0]

    def add_memories(
        self,
        user_id: str,
        items: Sequence[Mapping[str, Any]],
        *,
        session_id: int | None = None,
        valid_from: float | None = None,
        source: str = "manual",
        supersede: bool = True,
        extractor: str | None = None,
    ) -> list[MemoryRecord]:
        """Store several memories (and, with ``extractor``, the session's extraction record) atomically."""
        where = f"user {user_id!r} memories"
        for i, item in enumerate(items):
            content = item.get("content")
            if not isinstance(content, str) or not content.strip():
                raise DataError(where, i, "content", "memory content must be a non-empty string")
            if item.get("kind", "preference") not in MEMORY_KINDS:
                raise DataError(where, i, "kind", f"kind must be one of {', '.join(MEMORY_KINDS)}")
            if len(content) > self.limits.max_chars_per_turn:
                raise DataError(where, i, "content", "memory content exceeds the per-message limit")
            check_text(content, where, i, "content")
            for name in ("category", "context_factor"):
                if item.get(name) is not None:
                    check_text(item[name], where, i, name)
        check_time(valid_from, where, None, "valid_from")
        ids: list[int] = []
        with self._write() as cur:
            self._require_user(user_id, cur)
            ts = valid_from
            if session_id is not None:
                row = cur.execute(
                    "SELECT ts, n_turns FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id)
                ).fetchone()
                if row is None:
                    raise DataError(where, None, "session_id", f"no session {session_id} for this user")
                ts = row[0] if ts is None else ts
                n_turns = int(row[1])
                for i, item in enumerate(items):
                    bad = [t for t in item.get("evidence_turns", ()) if not 0 <= int(t) < n_turns]
                    if bad:
                        raise DataError(
                            where, i, "evidence_turns", f"turns {bad} are not in session {session_id}"
                        )
            ts = time.time() if ts is None else float(ts)
            for item in items:
                ids.append(self._insert_memory(cur, user_id, item, session_id, ts, source, supersede))
            if extractor is not None and session_id is not None:
                cur.execute(
                    "INSERT OR REPLACE INTO extractions VALUES (?, ?, ?, 'ok', NULL, ?, ?)",
                    (session_id, user_id, extractor, len(items), time.time()),
                )
            self._bump(cur, user_id)
        by_id = {m.id: m for m in self.memories(user_id, include_superseded=True)}
        return [by_id[i] for i in ids]

    def _insert_memory(
        self,
        cur: sqlite3.Cursor,
        user_id: str,
        item: Mapping[str, Any],
        session_id: int | None,
        ts: float,
        source: str,
        supersede: bool,
    ) -> int:
        kind = str(item.get("kind", "preference"))
        category = str(item.get("category") or "general").strip().lower()
        factor = str(item.get("context_factor") or "").strip()
        key = factor_key(factor)
        now = time.time()
        cur.execute(
            "INSERT INTO memories (user_id, kind, category, factor, factor_key, content, session_id,"
            " evidence, valid_from, valid_to, superseded_by, source, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
            (
                user_id,
                kind,
                category,
                factor,
                key,
                str(item["content"]).strip(),
                session_id,
                json.dumps(sorted({int(t) for t in item.get("evidence_turns", ())})),
                ts,
                source,
                now,
            ),
        )
        new_id = int(cur.lastrowid or 0)
        cur.execute(
            "INSERT INTO memory_history (user_id, memory_id, event, at, detail) VALUES (?, ?, 'add', ?, ?)",
            (user_id, new_id, now, json.dumps({"session_id": session_id, "source": source})),
        )
        if not (supersede and kind == "preference"):
            return new_id
        rivals = cur.execute(
            "SELECT id, valid_from, category FROM memories WHERE user_id = ? AND kind = 'preference'"
            " AND factor_key = ? AND valid_to IS NULL AND id != ?",
            (user_id, key, new_id),
        ).fetchall()
        for rival_id, rival_from, rival_category in rivals:
            if not same_context(key, category, key, rival_category):
                continue
            # a new memory older than the current one is history on arrival
            old, new, at = supersession(new_id, ts, rival_id, rival_from)
            cur.execute(
                "UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ? AND user_id = ?",
                (at, new, old, user_id),
            )
            cur.execute(
                "INSERT INTO memory_history (user_id, memory_id, event, at, detail)"
                " VALUES (?, ?, 'superseded', ?, ?)",
                (user_id, old, now, json.dumps({"by": new})),
            )
            if old == new_id:
                break
        return new_id

    def memories(
        self, user_id: str, *, include_superseded: bool = False, kind: str | None = None
    ) -> list[MemoryRecord]:
        """A user's memories, oldest first; only current ones unless ``include_superseded``."""
        self._require_user(user_id)
        sql = (
            "SELECT id, kind, category, factor, content, session_id, evidence, valid_from, valid_to,"
            " superseded_by, source FROM memories WHERE user_id = ?"
        )
        params: list[Any] = [user_id]
        if not include_superseded:
            sql += " AND valid_to IS NULL"
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self._read(sql + " ORDER BY valid_from, id", params)
        return [
            MemoryRecord(
                id=r[0],
                user_id=user_id,
                kind=r[1],
                category=r[2],
                context_factor=r[3],
                content=r[4],
                session_id=r[5],
                evidence_turns=tuple(json.loads(r[6])),
                valid_from=r[7],
                valid_to=r[8],
                superseded_by=r[9],
                source=r[10],
            )
            for r in rows
        ]

    def memory_chain(self, user_id: str, memory_id: int) -> list[MemoryRecord]:
        """Every memory of the same context as ``memory_id``, oldest first: its change history."""
        every = self.memories(user_id, include_superseded=True)
        target = next((m for m in every if m.id == memory_id), None)
        if target is None:
            raise DataError(f"user {user_id!r}", None, "memory_id", f"no memory {memory_id} for this user")
        key = factor_key(target.context_factor)
        return [
            m
            for m in every
            if m.kind == target.kind
            and same_context(key, target.category, factor_key(m.context_factor), m.category)
        ]

    def history(self, user_id: str) -> list[dict[str, Any]]:
        """The change log of a user's memories (add / superseded events), oldest first."""
        self._require_user(user_id)
        return [
            {"memory_id": r[0], "event": r[1], "at": r[2], **json.loads(r[3])}
            for r in self._read(
                "SELECT memory_id, event, at, detail FROM memory_history WHERE user_id = ? ORDER BY id",
                (user_id,),
            )
        ]

    # --- extraction bookkeeping --------------------------------------------------------------

    def pending_extraction(self, user_id: str, extractor: str) -> list[int]:
        """Ids of the user's sessions not yet extracted successfully by ``extractor``, oldest first."""
        self._require_user(user_id)
        return [
            r[0]
            for r in self._read(
                "SELECT s.id FROM sessions s LEFT JOIN extractions e ON e.session_id = s.id"
                " AND e.extractor = ? AND e.status = 'ok' WHERE s.user_id = ? AND e.session_id IS NULL"
                " ORDER BY s.ts, s.seq",
                (extractor, user_id),
            )
        ]

    def record_extraction_error(self, user_id: str, session_id: int, extractor: str, error: str) -> None:
        with self._write() as cur:
            self._require_user(user_id, cur)
            cur.execute(
                "INSERT OR REPLACE INTO extractions VALUES (?, ?, ?, 'error', ?, 0, ?)",
                (session_id, user_id, extractor, error, time.time()),
            )

    def extraction_errors(self, user_id: str, extractor: str) -> dict[int, str]:
        self._require_user(user_id)
        return {
            r[0]: r[1]
            for r in self._read(
                "SELECT session_id, error FROM extractions WHERE user_id = ? AND extractor = ?"
                " AND status = 'error'",
                (user_id, extractor),
            )
        }

    def check(self) -> list[str]:
        """Consistency problems in the file (empty when consistent): used after crashes and in tests."""
        problems: list[str] = []
        if self._read("PRAGMA integrity_check")[0][0] != "ok":
            problems.append("sqlite integrity_check failed")
        for sid, n, actual in self._read(
            "SELECT s.id, s.n_turns, (SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) FROM sessions s"
        ):
            if n != actual:
                problems.append(f"session {sid}: {actual} turns stored, {n} expected")
        for (mid,) in self._read(
            "SELECT m.id FROM memories m LEFT JOIN memory_history h ON h.memory_id = m.id"
            " AND h.event = 'add' WHERE h.id IS NULL"
        ):
            problems.append(f"memory {mid}: no history record")
        for (uid,) in self._read(
            "SELECT DISTINCT t.user_id FROM turns t JOIN sessions s ON s.id = t.session_id"
            " WHERE s.user_id != t.user_id"
        ):
            problems.append(f"turns of user {uid} attached to another user's session")
        return problems
