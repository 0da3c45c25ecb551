"""The memory store's queries, written once for SQLite and PostgreSQL (:class:`SqlStore`).

A backend supplies connections and transactions (:meth:`SqlStore._write`, :meth:`SqlStore._read`),
its placeholder style and its row lock; everything else (validation, supersession, scoping by tenant
and user, deletion, export, consistency checks) lives here, so both stores behave the same.

Users are rows of ``users`` keyed by (tenant, user_id) with an internal id (``uid``) that is never
reused; every other table carries that ``uid``. A user id is only ever a bound parameter.
A write transaction first locks its user's row, so one user's writes are serialised across
threads, processes and replicas: ids of a user's rows grow in commit order and no update is lost.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import ConfigError, DataError
from personalign.memory.backend import (
    DEFAULT_LIMITS,
    DEFAULT_TENANT,
    CatchUp,
    Limits,
    NewSession,
    Recorded,
    UnknownUserError,
)
from personalign.memory.supersession import factor_key, same_context, supersession
from personalign.memory.types import MEMORY_KINDS, MemoryRecord, StoredSession, Turn

ROLES = ("user", "assistant", "system")
# Child tables first: the order in which a user's rows are deleted.
TABLES = ("extractions", "embeddings", "memory_history", "turns", "memories", "sessions", "users")
MAX_TENANT_CHARS = 200
SESSION_BATCH = 200  # sessions per INSERT statement (7 parameters each; SQLite allows 32766)


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
    messages: Sequence[Any], *, source: str, limits: Limits = DEFAULT_LIMITS
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


def check_tenant(tenant: Any) -> str:
    """A tenant name: non-empty text of at most MAX_TENANT_CHARS characters, without NUL."""
    if not isinstance(tenant, str) or not tenant.strip():
        raise DataError("tenant", None, "tenant", "tenant must be a non-empty string")
    check_text(tenant, "tenant", None, "tenant")
    if len(tenant) > MAX_TENANT_CHARS or "\x00" in tenant:
        raise DataError("tenant", None, "tenant", f"tenant longer than {MAX_TENANT_CHARS} characters or NUL")
    return tenant


def _vector_blob(vector: npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


# a memory row's columns, in the order _memory_record reads them ({t}: a table alias and dot, or none)
MEMORY_COLUMNS = (
    "{t}id, {t}kind, {t}category, {t}factor, {t}content, {t}session_id, {t}evidence, {t}valid_from,"
    " {t}valid_to, {t}superseded_by, {t}source"
)


def _memory_record(user_id: str, r: Sequence[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=int(r[0]),
        user_id=user_id,
        kind=r[1],
        category=r[2],
        context_factor=r[3],
        content=r[4],
        session_id=None if r[5] is None else int(r[5]),
        evidence_turns=tuple(json.loads(r[6])),
        valid_from=float(r[7]),
        valid_to=None if r[8] is None else float(r[8]),
        superseded_by=None if r[9] is None else int(r[9]),
        source=r[10],
    )


def _stored_sessions(
    user_id: str, rows: Sequence[Sequence[Any]], turn_rows: Sequence[Sequence[Any]]
) -> list[StoredSession]:
    """Sessions from their rows (id, external id, ts, seq, metadata) and their turns' rows
    (session id, index, role, content; in order), in the sessions' order."""
    turns: dict[int, list[Turn]] = {}
    for sid, idx, role, content in turn_rows:
        turns.setdefault(int(sid), []).append(Turn(int(idx), role, content))
    return [
        StoredSession(
            int(sid), user_id, ext, float(ts), int(seq), json.loads(meta), tuple(turns.get(int(sid), ()))
        )
        for sid, ext, ts, seq, meta in rows
    ]


class Tx:
    """One open transaction (or read) on a DB-API cursor, with the store's placeholder style."""

    def __init__(self, cursor: Any, paramstyle: str) -> None:
        self.cursor = cursor
        self._pg = paramstyle == "format"

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cursor.execute(self._sql(sql), tuple(params))
        return [tuple(r) for r in self.cursor.fetchall()] if self.cursor.description is not None else []

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a statement; return the number of rows it changed."""
        self.cursor.execute(self._sql(sql), tuple(params))
        return int(self.cursor.rowcount or 0)

    def many(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        batch = [tuple(p) for p in params]
        if batch:
            self.cursor.executemany(self._sql(sql), batch)

    def insert(self, sql: str, params: Sequence[Any]) -> int:
        """Insert one row and return its generated id."""
        row = self.one(sql + " RETURNING id", params)
        assert row is not None
        return int(row[0])


class SqlStore(ABC):
    """The memory store on any SQL backend, bound to one tenant (see the module docstring)."""

    url: str
    tenant: str
    limits: Limits
    allows_nul = True  # PostgreSQL text cannot hold NUL characters
    lock_suffix = ""  # appended to the user-row lookup in a write (" FOR UPDATE" on PostgreSQL)

    # --- backend hooks -----------------------------------------------------------------------

    @abstractmethod
    def _write(self) -> AbstractContextManager[Tx]:
        """One write transaction: all of it lands, or (on an error or a kill) none of it."""

    @abstractmethod
    def _read_tx(self) -> AbstractContextManager[Tx]:
        """A cursor for reads."""

    @abstractmethod
    def _backend_problems(self) -> list[str]:
        """Problems the database itself reports (an integrity check), for :meth:`check`."""

    @abstractmethod
    def _view(self, tenant: str) -> SqlStore:
        """A handle on the same database and connections, bound to ``tenant``."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def schema_version(self) -> int: ...

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One query's rows."""
        with self._read_tx() as tx:
            return tx.rows(sql, params)

    def _read_many(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        """Several independent queries' rows, read in one snapshot (a server backend sends them
        together: one round trip)."""
        with self._read_tx() as tx:
            return [tx.rows(sql, params) for sql, params in queries]

    # --- plumbing ----------------------------------------------------------------------------

    def tenant_view(self, tenant: str) -> SqlStore:
        """This store bound to another tenant; shares connections (close the original, not the view)."""
        return self._view(check_tenant(tenant))

    def _lookup_ok(self, user_id: Any) -> bool:
        """False for ids no row can have (wrong type, too long, NUL on PostgreSQL): they match nothing."""
        return (
            isinstance(user_id, str)
            and len(user_id) <= self.limits.max_user_id_chars
            and (self.allows_nul or "\x00" not in user_id)
            and _encodable(user_id)
        )

    def _storable(self, text: Any) -> bool:
        """Whether ``text`` could have been stored at all (a str this backend can hold)."""
        return isinstance(text, str) and (self.allows_nul or "\x00" not in text) and _encodable(text)

    def _uid(self, tx: Tx, user_id: str, *, lock: bool = False) -> int:
        """The internal id of ``user_id`` in this tenant (row locked in a write); else UnknownUserError."""
        row = None
        if self._lookup_ok(user_id):
            row = tx.one(
                "SELECT id FROM users WHERE tenant = ? AND user_id = ?" + (self.lock_suffix if lock else ""),
                (self.tenant, user_id),
            )
        if row is None:
            raise UnknownUserError(user_id, self.url)
        return int(row[0])

    @staticmethod
    def _bump(tx: Tx, uid: int) -> None:
        tx.run("UPDATE users SET revision = revision + 1 WHERE id = ?", (uid,))

    def _text(self, value: Any, source: str, row: int | None, field: str) -> str:
        check_text(value, source, row, field)
        if not self.allows_nul and "\x00" in value:
            raise DataError(source, row, field, "contains a NUL character, which this store cannot hold")
        return str(value)

    # --- users -------------------------------------------------------------------------------

    def add_user(self, user_id: str, *, exist_ok: bool = True) -> None:
        if not isinstance(user_id, str) or not user_id.strip():
            raise DataError("user", None, "user_id", "user id must be a non-empty string")
        self._text(user_id, "user", None, "user_id")
        if len(user_id) > self.limits.max_user_id_chars:
            raise DataError(
                "user", None, "user_id", f"user id longer than {self.limits.max_user_id_chars} characters"
            )
        with self._write() as tx:
            added = tx.rows(
                "INSERT INTO users (tenant, user_id, created) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, user_id) DO NOTHING RETURNING id",
                (self.tenant, user_id, time.time()),
            )
        if not added and not exist_ok:
            raise ConfigError(f"user {user_id!r} already exists in {self.url}")

    def has_user(self, user_id: str) -> bool:
        if not self._lookup_ok(user_id):
            return False
        return bool(
            self._read("SELECT 1 FROM users WHERE tenant = ? AND user_id = ?", (self.tenant, user_id))
        )

    def users(self) -> list[str]:
        return [
            str(r[0])
            for r in self._read("SELECT user_id FROM users WHERE tenant = ? ORDER BY user_id", (self.tenant,))
        ]

    def revision(self, user_id: str) -> int:
        """A counter that moves on every write to the user's sessions or memories."""
        return self.user_version(user_id)[1]

    def user_version(self, user_id: str) -> tuple[int, int]:
        """(internal id, revision): changes on every write, and when the user is deleted and re-added."""
        rows = []
        if self._lookup_ok(user_id):
            rows = self._read(
                "SELECT id, revision FROM users WHERE tenant = ? AND user_id = ?", (self.tenant, user_id)
            )
        if not rows:
            raise UnknownUserError(user_id, self.url)
        return int(rows[0][0]), int(rows[0][1])

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Delete the user and everything of theirs, in one transaction; return rows deleted per table."""
        counts: dict[str, int] = {}
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            tx.run("UPDATE memories SET superseded_by = NULL WHERE uid = ?", (uid,))
            for table in TABLES:
                column = "id" if table == "users" else "uid"
                counts[table] = tx.run(f"DELETE FROM {table} WHERE {column} = ?", (uid,))
        return counts

    def export_user(self, user_id: str) -> dict[str, Any]:
        """Everything stored for the user as JSON-able dicts (sessions, memories, history, vectors...)."""
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            created, revision = tx.rows("SELECT created, revision FROM users WHERE id = ?", (uid,))[0]
            extractions = [
                {"session_id": r[0], "extractor": r[1], "status": r[2], "error": r[3], "n_memories": r[4]}
                | {"at": r[5]}
                for r in tx.rows(
                    "SELECT session_id, extractor, status, error, n_memories, at FROM extractions"
                    " WHERE uid = ? ORDER BY session_id, extractor",
                    (uid,),
                )
            ]
            vectors = [
                {"unit": r[0], "unit_id": r[1], "embedder": r[2]}
                | {"vector": np.frombuffer(bytes(r[3]), dtype=np.float32).tolist()}
                for r in tx.rows(
                    "SELECT unit, unit_id, embedder, vector FROM embeddings WHERE uid = ?"
                    " ORDER BY unit, unit_id, embedder",
                    (uid,),
                )
            ]
        sessions = [
            {
                "id": s.id,
                "external_id": s.external_id,
                "timestamp": s.timestamp,
                "seq": s.seq,
                "metadata": s.metadata,
                "turns": [{"index": t.index, "role": t.role, "content": t.content} for t in s.turns],
            }
            for s in self.sessions(user_id)
        ]
        memories = [
            {**asdict(m), "evidence_turns": list(m.evidence_turns)}
            for m in self.memories(user_id, include_superseded=True)
        ]
        return {
            "tenant": self.tenant,
            "user_id": user_id,
            "created": created,
            "revision": revision,
            "sessions": sessions,
            "memories": memories,
            "history": self.history(user_id),
            "extractions": extractions,
            "vectors": vectors,
        }

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
        return [s.id for s in self.record_sessions(user_id, sessions).sessions]

    def record_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> Recorded:
        """:meth:`add_sessions`, returning what was stored and the user's version before and after."""
        rows = []
        for n, new in enumerate(sessions):
            source = session_source(user_id, new.external_id, n, len(sessions))
            pairs = validate_messages(new.messages, source=source, limits=self.limits)
            for i, (_, content) in enumerate(pairs):
                self._text(content, source, i, "content")
            if new.external_id is not None:
                self._text(new.external_id, source, None, "external_id")
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
        external = [new.external_id for new, *_ in rows if new.external_id is not None]
        if len(set(external)) < len(external):
            seen: dict[str, int] = {}
            for n, (new, source, *_) in enumerate(rows):
                if new.external_id in seen:
                    where = f"(sessions {seen[new.external_id]} and {n}, counted from 0)"
                    raise DataError(
                        source, None, "external_id", f"the same id is given twice in this batch {where}"
                    )
                if new.external_id is not None:
                    seen[new.external_id] = n
        if not self._lookup_ok(user_id):
            raise UnknownUserError(user_id, self.url)
        uid, revision, seq, ids = self._insert_sessions(user_id, rows)
        by_embedder: dict[str, dict[int, npt.NDArray[np.float32]]] = {}
        for (new, *_), session_id in zip(rows, ids, strict=True):
            for name, vector in (new.vectors or {}).items():  # as a read would return them
                by_embedder.setdefault(name, {})[session_id] = np.frombuffer(_vector_blob(vector), np.float32)
        return Recorded(
            before=(uid, revision),
            version=(uid, revision + 1),
            sessions=_stored_sessions(
                user_id,
                [
                    (session_id, new.external_id, ts, seq + n, meta_json)
                    for n, ((new, _, _, meta_json, ts), session_id) in enumerate(zip(rows, ids, strict=True))
                ],
                [
                    (session_id, i, role, content)
                    for (_, _, pairs, _, _), session_id in zip(rows, ids, strict=True)
                    for i, (role, content) in enumerate(pairs)
                ],
            ),
            vectors=by_embedder,
        )

    @staticmethod
    def _taken(rows: Sequence[tuple[Any, ...]], taken: Callable[[str], Any]) -> DataError | None:
        """The error naming the first of a batch's validated sessions whose external id is already
        stored (``taken(id)``: whether it is); None when none is."""
        for new, source, *_ in rows:
            if new.external_id is not None and taken(new.external_id):
                return DataError(source, None, "external_id", "a session with this id is already stored")
        return None

    def _insert_sessions(
        self, user_id: str, rows: Sequence[tuple[Any, ...]]
    ) -> tuple[int, int, int, list[int]]:
        """Store validated sessions ``(new, source, pairs, metadata JSON, ts)`` in one transaction with
        the revision bump; (user's internal id, revision before, first seq, the sessions' ids in order).

        The PostgreSQL store overrides it with one round trip."""
        turns: list[tuple[Any, ...]] = []
        vectors: list[tuple[Any, ...]] = []
        ids: list[int] = []
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            row = tx.one(
                "SELECT revision, (SELECT COALESCE(MAX(seq), -1) + 1 FROM sessions WHERE uid = ?)"
                " FROM users WHERE id = ?",
                (uid, uid),
            )
            assert row is not None  # the row is locked
            revision, seq = int(row[0]), int(row[1])
            taken = self._taken(
                rows,
                lambda ext: tx.one("SELECT 1 FROM sessions WHERE uid = ? AND external_id = ?", (uid, ext)),
            )
            if taken is not None:
                raise taken
            now = time.time()
            for start in range(0, len(rows), SESSION_BATCH):  # one multi-row statement per batch
                chunk = rows[start : start + SESSION_BATCH]
                values = [
                    (uid, new.external_id, ts, seq + start + n, len(pairs), meta_json, now)
                    for n, (new, _, pairs, meta_json, ts) in enumerate(chunk)
                ]
                placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(values))
                by_seq = {
                    int(r[1]): int(r[0])
                    for r in tx.rows(
                        "INSERT INTO sessions (uid, external_id, ts, seq, n_turns, metadata, created)"
                        f" VALUES {placeholders} RETURNING id, seq",
                        [v for row in values for v in row],
                    )
                }
                for n, (new, _, pairs, _, _) in enumerate(chunk):
                    session_id = by_seq[seq + start + n]  # matched by seq: RETURNING order is not promised
                    turns.extend((session_id, uid, i, role, c) for i, (role, c) in enumerate(pairs))
                    vectors.extend(
                        (uid, "s", session_id, e, _vector_blob(v)) for e, v in (new.vectors or {}).items()
                    )
                    ids.append(session_id)
            # one batch each for the turns and vectors of every session
            tx.many("INSERT INTO turns (session_id, uid, idx, role, content) VALUES (?, ?, ?, ?, ?)", turns)
            tx.many(
                "INSERT INTO embeddings (uid, unit, unit_id, embedder, vector) VALUES (?, ?, ?, ?, ?)",
                vectors,
            )
            self._bump(tx, uid)
        return uid, revision, seq, ids

    def sessions(
        self, user_id: str, *, after_id: int = 0, until_id: int | None = None
    ) -> list[StoredSession]:
        """A user's sessions, oldest first (by timestamp, then insertion); only ids in
        (``after_id``, ``until_id``] (an index catching up takes the rows it has not seen)."""
        upper = " AND id <= ?" if until_id is not None else ""
        bounds: tuple[int, ...] = (after_id,) if until_id is None else (after_id, until_id)
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            rows = tx.rows(
                "SELECT id, external_id, ts, seq, metadata FROM sessions WHERE uid = ? AND id > ?"
                + upper
                + " ORDER BY ts, seq",
                (uid, *bounds),
            )
            turns = tx.rows(
                "SELECT session_id, idx, role, content FROM turns WHERE uid = ? AND session_id > ?"
                + upper.replace("id", "session_id")
                + " ORDER BY session_id, idx",
                (uid, *bounds),
            )
        return _stored_sessions(user_id, rows, turns)

    def session(self, user_id: str, session_id: int) -> StoredSession:
        found = [s for s in self.sessions(user_id, after_id=session_id - 1) if s.id == session_id]
        if not found:
            raise DataError(f"user {user_id!r}", None, "session_id", f"no session {session_id} for this user")
        return found[0]

    def count_sessions(self, user_id: str | None = None) -> int:
        """Sessions of one user, or (``None``) of every user of this tenant."""
        if user_id is None:
            row = self._read(
                "SELECT COUNT(*) FROM sessions s JOIN users u ON u.id = s.uid WHERE u.tenant = ?",
                (self.tenant,),
            )
            return int(row[0][0])
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            return int(tx.rows("SELECT COUNT(*) FROM sessions WHERE uid = ?", (uid,))[0][0])

    def session_span(self, user_id: str) -> tuple[int, int]:
        """(number of sessions, largest session id) of a user, read at once: with the ids an index
        has seen, it tells whether rows were only added since (count grew by the new ids) or not."""
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            row = tx.one("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM sessions WHERE uid = ?", (uid,))
        assert row is not None
        return int(row[0]), int(row[1])

    def catch_up(
        self, user_id: str, *, after_id: int, known: tuple[int, int], embedder: str | None
    ) -> CatchUp:
        """Everything an index at version ``known`` that has seen the sessions up to ``after_id``
        needs: the user's version (:meth:`user_version`) and, only if it moved, read in one snapshot
        (:meth:`_read_many`: one round trip on PostgreSQL), the version again, the session count and
        span, their sessions above ``after_id``, every memory, and those sessions' and memories'
        vectors under ``embedder``."""
        # rows of the user, read only when their version is not the one the caller has
        of_user = (
            " JOIN users u ON u.id = x.uid WHERE u.tenant = ? AND u.user_id = ?"
            " AND NOT (u.id = ? AND u.revision = ?)"
        )
        key = (self.tenant, user_id, int(known[0]), int(known[1]))
        # the usual case (the version has not moved) is one short statement; else all of it in one
        # snapshot, the version read again (a pipeline of six statements costs ~4x one statement)
        version = self.user_version(user_id)
        if version == tuple(known):
            return CatchUp(version, -1, -1, [], None, {})
        queries: list[tuple[str, Sequence[Any]]] = [
            (
                # COUNT and MAX in one aggregate over the user's rows (a lone MAX(id) would be
                # planned as a backward scan of every user's sessions, slow for users with old ids)
                "SELECT u.id, u.revision, c.n, c.last FROM users u,"
                " (SELECT COUNT(*) AS n, COALESCE(MAX(s.id), 0) AS last FROM sessions s"
                "  WHERE s.uid = (SELECT id FROM users WHERE tenant = ? AND user_id = ?)) c"
                " WHERE u.tenant = ? AND u.user_id = ?",
                (self.tenant, user_id, self.tenant, user_id),
            ),
            (
                "SELECT x.id, x.external_id, x.ts, x.seq, x.metadata FROM sessions x"
                + of_user
                + " AND x.id > ? ORDER BY x.ts, x.seq",
                (*key, after_id),
            ),
            (
                "SELECT x.session_id, x.idx, x.role, x.content FROM turns x"
                + of_user
                + " AND x.session_id > ? ORDER BY x.session_id, x.idx",
                (*key, after_id),
            ),
            (
                f"SELECT {MEMORY_COLUMNS.format(t='x.')} FROM memories x"
                + of_user
                + " ORDER BY x.valid_from, x.id",
                key,
            ),
        ]
        if embedder is not None:
            queries.append(
                (
                    # looked up by key (unit, id, embedder): only the new sessions' and the memories'
                    # vectors are read, not every vector of the user
                    "SELECT x.unit, x.unit_id, x.vector FROM embeddings x WHERE x.unit = 's'"
                    " AND x.embedder = ? AND x.unit_id IN (SELECT x.id FROM sessions x"
                    + of_user
                    + " AND x.id > ?) UNION ALL SELECT x.unit, x.unit_id, x.vector FROM embeddings x"
                    " WHERE x.unit = 'm' AND x.embedder = ? AND x.unit_id IN (SELECT x.id FROM memories x"
                    + of_user
                    + ")",
                    (embedder, *key, after_id, embedder, *key),
                )
            )
        head, sessions, turns, memories, *vectors = self._read_many(queries)
        if not head:
            raise UnknownUserError(user_id, self.url)
        uid, revision, count, last = (int(v) for v in head[0])
        return CatchUp(
            (uid, revision),
            count,
            last,
            _stored_sessions(user_id, sessions, turns),
            [_memory_record(user_id, r) for r in memories],
            {
                (str(unit), int(unit_id)): np.frombuffer(bytes(blob), dtype=np.float32)
                for unit, unit_id, blob in (vectors[0] if vectors else [])
            },
        )

    # --- embeddings --------------------------------------------------------------------------

    def vectors(
        self, user_id: str, unit: str, embedder: str, ids: Iterable[int]
    ) -> dict[int, npt.NDArray[np.float32]]:
        """Cached embeddings of a user's units (``unit`` 's' = session, 'm' = memory) by id."""
        wanted = {int(i) for i in ids}
        if not wanted:
            return {}
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            sql = "SELECT unit_id, vector FROM embeddings WHERE uid = ? AND unit = ? AND embedder = ?"
            params: list[Any] = [uid, unit, embedder]
            if len(wanted) <= 500:  # a few new units (a growing store): look them up by key
                sql += f" AND unit_id IN ({', '.join('?' * len(wanted))})"
                params.extend(sorted(wanted))
            rows = tx.rows(sql, params)
        return {
            int(unit_id): np.frombuffer(bytes(blob), dtype=np.float32)
            for unit_id, blob in rows
            if unit_id in wanted
        }

    def put_vectors(
        self, user_id: str, unit: str, embedder: str, vectors: Mapping[int, npt.NDArray[np.float32]]
    ) -> None:
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            tx.many(
                "INSERT INTO embeddings (uid, unit, unit_id, embedder, vector) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (unit, unit_id, embedder) DO UPDATE SET vector = excluded.vector",
                [(uid, unit, int(i), embedder, _vector_blob(v)) for i, v in vectors.items()],
            )

    def search_vectors(
        self, user_id: str, unit: str, embedder: str, query: npt.NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]:
        """The ``k`` stored units nearest to ``query`` by cosine similarity, best first (exact search)."""
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            rows = tx.rows(
                "SELECT unit_id, vector FROM embeddings WHERE uid = ? AND unit = ? AND embedder = ?",
                (uid, unit, embedder),
            )
        if not rows or k <= 0:
            return []
        ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
        matrix = np.vstack([np.frombuffer(bytes(r[1]), dtype=np.float32) for r in rows])
        q = np.asarray(query, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(q)) or 1.0)
        scores = (matrix @ q) / np.where(norms == 0, 1.0, norms)
        order = np.lexsort((ids, -scores))[:k]  # best score first, ties by id
        return [(int(ids[i]), float(scores[i])) for i in order]

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
            self._text(content, where, i, "content")
            for name in ("category", "context_factor"):
                if item.get(name) is not None:
                    self._text(item[name], where, i, name)
        self._text(source, where, None, "source")
        if extractor is not None:
            self._text(extractor, where, None, "extractor")
        check_time(valid_from, where, None, "valid_from")
        ids: list[int] = []
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            ts = valid_from
            if session_id is not None:
                row = tx.one("SELECT ts, n_turns FROM sessions WHERE id = ? AND uid = ?", (session_id, uid))
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
                ids.append(self._insert_memory(tx, uid, item, session_id, ts, source, supersede))
            if extractor is not None and session_id is not None:
                self._record_extraction(tx, uid, session_id, extractor, "ok", None, len(items))
            self._bump(tx, uid)
        by_id = {m.id: m for m in self.memories(user_id, include_superseded=True)}
        return [by_id[i] for i in ids]

    @staticmethod
    def _record_extraction(
        tx: Tx, uid: int, session_id: int, extractor: str, status: str, error: str | None, n: int
    ) -> None:
        tx.run(
            "INSERT INTO extractions (session_id, uid, extractor, status, error, n_memories, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, extractor) DO UPDATE SET"
            " status = excluded.status, error = excluded.error, n_memories = excluded.n_memories,"
            " at = excluded.at",
            (session_id, uid, extractor, status, error, n, time.time()),
        )

    def _insert_memory(
        self,
        tx: Tx,
        uid: int,
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
        new_id = tx.insert(
            "INSERT INTO memories (uid, kind, category, factor, factor_key, content, session_id,"
            " evidence, valid_from, valid_to, superseded_by, source, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
            (
                uid,
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
        tx.run(
            "INSERT INTO memory_history (uid, memory_id, event, at, detail) VALUES (?, ?, 'add', ?, ?)",
            (uid, new_id, now, json.dumps({"session_id": session_id, "source": source})),
        )
        if not (supersede and kind == "preference"):
            return new_id
        rivals = tx.rows(
            "SELECT id, valid_from, category FROM memories WHERE uid = ? AND kind = 'preference'"
            " AND factor_key = ? AND valid_to IS NULL AND id != ? ORDER BY id",
            (uid, key, new_id),
        )
        for rival_id, rival_from, rival_category in rivals:
            if not same_context(key, category, key, rival_category):
                continue
            # a new memory older than the current one is history on arrival
            old, new, at = supersession(new_id, ts, int(rival_id), float(rival_from))
            tx.run(
                "UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ? AND uid = ?",
                (at, new, old, uid),
            )
            tx.run(
                "INSERT INTO memory_history (uid, memory_id, event, at, detail)"
                " VALUES (?, ?, 'superseded', ?, ?)",
                (uid, old, now, json.dumps({"by": new})),
            )
            if old == new_id:
                break
        return new_id

    def correct_memory(self, user_id: str, memory_id: int, content: str) -> MemoryRecord:
        """A corrected version of a memory, in one transaction: same kind, category and context
        factor, ``source='correction'``; the old version stays in the history, superseded by it (a
        preference through the usual supersession of its context, a fact retired explicitly)."""
        where = f"user {user_id!r} memory {memory_id}"
        if not isinstance(content, str) or not content.strip():
            raise DataError(where, None, "content", "memory content must be a non-empty string")
        if len(content) > self.limits.max_chars_per_turn:
            raise DataError(where, None, "content", "memory content exceeds the per-message limit")
        self._text(content, where, None, "content")
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            old = tx.one(
                "SELECT kind, category, factor, valid_to FROM memories WHERE id = ? AND uid = ?",
                (int(memory_id), uid),
            )
            if old is None:
                raise DataError(
                    f"user {user_id!r}", None, "memory_id", f"no memory {memory_id} for this user"
                )
            kind, category, factor, valid_to = old
            item = {"content": content, "kind": kind, "category": category, "context_factor": factor}
            new_id = self._insert_memory(tx, uid, item, None, time.time(), "correction", True)
            if kind != "preference" and valid_to is None:  # facts never supersede each other
                now = time.time()
                tx.run(
                    "UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ? AND uid = ?",
                    (now, new_id, int(memory_id), uid),
                )
                tx.run(
                    "INSERT INTO memory_history (uid, memory_id, event, at, detail)"
                    " VALUES (?, ?, 'superseded', ?, ?)",
                    (uid, int(memory_id), now, json.dumps({"by": new_id})),
                )
            self._bump(tx, uid)
        return next(m for m in self.memories(user_id, include_superseded=True) if m.id == new_id)

    def delete_memory(self, user_id: str, memory_id: int) -> None:
        """Remove one memory with its history events and embeddings, in one transaction. Versions it
        had superseded stay retired (their link to it is cleared); an unknown id is a DataError."""
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            if tx.one("SELECT 1 FROM memories WHERE id = ? AND uid = ?", (int(memory_id), uid)) is None:
                raise DataError(
                    f"user {user_id!r}", None, "memory_id", f"no memory {memory_id} for this user"
                )
            tx.run(
                "UPDATE memories SET superseded_by = NULL WHERE uid = ? AND superseded_by = ?",
                (uid, int(memory_id)),
            )
            tx.run("DELETE FROM memory_history WHERE uid = ? AND memory_id = ?", (uid, int(memory_id)))
            tx.run(
                "DELETE FROM embeddings WHERE uid = ? AND unit = 'm' AND unit_id = ?", (uid, int(memory_id))
            )
            tx.run("DELETE FROM memories WHERE uid = ? AND id = ?", (uid, int(memory_id)))
            self._bump(tx, uid)

    def memories(
        self, user_id: str, *, include_superseded: bool = False, kind: str | None = None
    ) -> list[MemoryRecord]:
        """A user's memories, oldest first; only current ones unless ``include_superseded``."""
        sql = f"SELECT {MEMORY_COLUMNS.format(t='')} FROM memories WHERE uid = ?"
        with self._read_tx() as tx:
            params: list[Any] = [self._uid(tx, user_id)]
            if not include_superseded:
                sql += " AND valid_to IS NULL"
            if kind is not None:
                sql += " AND kind = ?"
                params.append(kind)
            rows = tx.rows(sql + " ORDER BY valid_from, id", params)
        return [_memory_record(user_id, r) for r in rows]

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
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            rows = tx.rows(
                "SELECT memory_id, event, at, detail FROM memory_history WHERE uid = ? ORDER BY id", (uid,)
            )
        return [{"memory_id": int(r[0]), "event": r[1], "at": float(r[2]), **json.loads(r[3])} for r in rows]

    # --- extraction bookkeeping --------------------------------------------------------------

    def pending_extraction(self, user_id: str, extractor: str) -> list[int]:
        """Ids of the user's sessions not yet extracted successfully by ``extractor``, oldest first."""
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            if not self._storable(extractor):  # such a name was never stored: nothing is extracted
                return [
                    int(r[0])
                    for r in tx.rows("SELECT id FROM sessions WHERE uid = ? ORDER BY ts, seq", (uid,))
                ]
            rows = tx.rows(
                "SELECT s.id FROM sessions s LEFT JOIN extractions e ON e.session_id = s.id"
                " AND e.extractor = ? AND e.status = 'ok' WHERE s.uid = ? AND e.session_id IS NULL"
                " ORDER BY s.ts, s.seq",
                (extractor, uid),
            )
        return [int(r[0]) for r in rows]

    def record_extraction_error(self, user_id: str, session_id: int, extractor: str, error: str) -> None:
        where = f"user {user_id!r} extraction"
        self._text(extractor, where, None, "extractor")
        if not self.allows_nul:
            error = error.replace("\x00", "\\x00")
        with self._write() as tx:
            uid = self._uid(tx, user_id, lock=True)
            if tx.one("SELECT 1 FROM sessions WHERE id = ? AND uid = ?", (session_id, uid)) is None:
                raise DataError(where, None, "session_id", f"no session {session_id} for this user")
            self._record_extraction(tx, uid, session_id, extractor, "error", error, 0)

    def extraction_errors(self, user_id: str, extractor: str) -> dict[int, str]:
        with self._read_tx() as tx:
            uid = self._uid(tx, user_id)
            if not self._storable(extractor):
                return {}
            rows = tx.rows(
                "SELECT session_id, error FROM extractions WHERE uid = ? AND extractor = ?"
                " AND status = 'error'",
                (uid, extractor),
            )
        return {int(r[0]): str(r[1]) for r in rows}

    # --- whole-store checks ------------------------------------------------------------------

    def row_counts(self) -> dict[str, int]:
        """Rows per table over the whole store (every tenant): for operators and deletion tests."""
        return {t: int(self._read(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in TABLES}

    def check(self) -> list[str]:
        """Consistency problems in the store (empty when consistent): used after crashes and in tests."""
        problems = self._backend_problems()
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
            "SELECT DISTINCT t.uid FROM turns t JOIN sessions s ON s.id = t.session_id WHERE s.uid != t.uid"
        ):
            problems.append(f"turns of user #{uid} attached to another user's session")
        for table in ("turns", "memories", "memory_history", "embeddings", "extractions", "sessions"):
            for (n,) in self._read(
                f"SELECT COUNT(*) FROM {table} x LEFT JOIN users u ON u.id = x.uid WHERE u.id IS NULL"
            ):
                if n:
                    problems.append(f"{table}: {n} rows of a user that does not exist")
        return problems


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


__all__ = [
    "DEFAULT_TENANT",
    "ROLES",
    "TABLES",
    "SqlStore",
    "Tx",
    "check_tenant",
    "check_text",
    "check_time",
    "session_source",
    "validate_messages",
]
