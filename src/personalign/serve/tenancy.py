"""The gateway's one door to the memory store: tenant-scoped users over today's `MemoryEngine`.

Every store call goes through :class:`MemoryService`, which keys a user as an opaque
(tenant, user) pair: ``scoped_id`` builds a length-prefixed composite (``"<len(tenant)>:<tenant>:<user>"``),
so no choice of tenant or user text can produce another pair's id, and the id only ever reaches
the store as a bound SQL parameter. When the storage slice (``open_store(url)`` with a tenant
column, ``delete_user``, ``export_user``) lands, this module is the only one to switch.

The deletion and export helpers below reach into the SQLite store directly (a stop-gap until the
store offers them): every statement is parameterised and names the scoped user id.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import DataError
from personalign.llm import Model
from personalign.memory.engine import MemoryBlock, MemoryEngine, Retrieval
from personalign.memory.select import SelectionPolicy
from personalign.memory.store import NewSession, UnknownUserError, check_text, validate_messages
from personalign.memory.types import CommunicationContext, MemoryRecord

MAX_USER_CHARS = 128
# The tables that hold a user's rows, children first (deletion order).
USER_TABLES = ("embeddings", "extractions", "memory_history", "memories", "turns", "sessions", "users")


def check_user(user: Any, source: str = "request") -> str:
    """A user id as given by a client: any non-empty text up to 128 characters (opaque data)."""
    if not isinstance(user, str) or not user:
        raise DataError(source, None, "user", "a user id must be a non-empty string")
    if len(user) > MAX_USER_CHARS:
        raise DataError(source, None, "user", f"a user id has at most {MAX_USER_CHARS} characters")
    check_text(user, source, None, "user")
    return user


def scoped_id(tenant: str, user: str) -> str:
    """The store's id for ``user`` of ``tenant``: injective (the tenant's length comes first)."""
    return f"{len(tenant)}:{tenant}:{user}"


def split_scoped(scoped: str) -> tuple[str, str]:
    """The (tenant, user) pair back from :func:`scoped_id`."""
    length, _, rest = scoped.partition(":")
    n = int(length)
    return rest[:n], rest[n + 1 :]


def memory_json(m: MemoryRecord) -> dict[str, Any]:
    """A memory as the REST API shows it (without the scoped user id)."""
    data = asdict(m)
    del data["user_id"]
    data["evidence_turns"] = list(m.evidence_turns)
    data["current"] = m.current
    return data


class MemoryService:
    """Tenant-scoped memory operations for the gateway (all blocking: call them off the event loop)."""

    def __init__(self, engine: MemoryEngine, *, shards: int = 1) -> None:
        """``shards``: engines over the same store and embedder, each user's index in one of them
        (by a hash of the scoped id), so index upkeep for one user holds up only its shard."""
        self.engine = engine
        self.store = engine.store
        self.engines = [engine] + [
            MemoryEngine(engine.store, embedder=engine.embedder, config=engine.config)
            for _ in range(max(1, shards) - 1)
        ]
        self._users_lock = threading.Lock()
        self._known: set[str] = set()

    def shard(self, sid: str) -> MemoryEngine:
        digest = hashlib.blake2b(sid.encode("utf-8", "surrogatepass"), digest_size=4).digest()
        return self.engines[int.from_bytes(digest, "big") % len(self.engines)]

    def close(self) -> None:
        self.engine.close()

    # --- request path ------------------------------------------------------------------------

    def ensure_user(self, tenant: str, user: str) -> str:
        sid = scoped_id(tenant, check_user(user))
        if sid not in self._known:
            self.engine.add_user(sid)
            with self._users_lock:
                self._known.add(sid)
        return sid

    def has_user(self, tenant: str, user: str) -> bool:
        return self.store.has_user(scoped_id(tenant, check_user(user)))

    def _require(self, tenant: str, user: str) -> str:
        sid = scoped_id(tenant, check_user(user))
        if not self.store.has_user(sid):
            raise UnknownUserError(user, self.store.path)
        return sid

    def encode(self, text: str) -> npt.NDArray[np.float32] | None:
        """The request encoded once by the engine's embedder (None without one): it serves both the
        retrieval and, since a recorded exchange is embedded by its user turn, the stored session."""
        embedder = self.engine.embedder
        if embedder is None or "dense" not in self.engine.config.channels:
            return None
        vector: npt.NDArray[np.float32] = embedder.encode([text])[0]
        return vector

    def retrieve(
        self,
        tenant: str,
        user: str,
        query: str,
        *,
        k_sessions: int,
        k_memories: int,
        query_vector: npt.NDArray[np.float32] | None = None,
        refresh: bool = True,
    ) -> Retrieval:
        """``refresh=False`` while the user's index upkeep (:meth:`warm`) is under way: search the
        index as it is (the exchange being added may be missing) instead of waiting to rebuild it."""
        sid = self._require(tenant, user)
        return self.shard(sid).retrieve(
            sid,
            query,
            k_sessions=k_sessions,
            k_memories=k_memories,
            include_history=True,
            query_vector=query_vector,
            refresh=refresh,
        )

    async def personalize(
        self,
        tenant: str,
        user: str,
        request: str,
        context: CommunicationContext | None,
        *,
        judge: Model | None,
        policy: SelectionPolicy | None,
    ) -> MemoryBlock:
        """Retrieve, select and render the memory block (the engine's `personalize`)."""
        sid = scoped_id(tenant, check_user(user))
        return await self.shard(sid).personalize(sid, request, context, judge=judge, policy=policy)

    def record_turn(
        self,
        tenant: str,
        user: str,
        messages: Sequence[Mapping[str, str]],
        *,
        session_id: str,
        metadata: Mapping[str, Any],
        user_vector: npt.NDArray[np.float32] | None = None,
    ) -> int:
        """Store one exchange as a session (with its embedding) in one transaction.

        ``user_vector``: the exchange's user turn already encoded (see :meth:`encode`), stored as the
        session's embedding instead of encoding the same text again.
        """
        sid = self.ensure_user(tenant, user)
        embedder = self.engine.embedder
        users = [m for m in messages if m.get("role") == "user"]
        if user_vector is None or embedder is None or len(users) != 1:
            return self.engine.add_session(sid, list(messages), metadata=metadata, session_id=session_id)
        new = NewSession(
            list(messages), metadata=metadata, external_id=session_id, vectors={embedder.name: user_vector}
        )
        return self.store.add_sessions(sid, [new])[0]

    def check_exchange(self, tenant: str, user: str, messages: Sequence[Mapping[str, str]]) -> None:
        """Raise DataError for an exchange the store would refuse (too long, bad text)."""
        validate_messages(list(messages), source=f"user {user!r} request", limits=self.store.limits)

    def warm(self, tenant: str, user: str, query: str, query_vector: npt.NDArray[np.float32] | None) -> None:
        """Bring the user's index up to date (new sessions appended, BM25 rebuilt) off the request path."""
        sid = scoped_id(tenant, user)
        if self.store.has_user(sid):
            self.shard(sid).retrieve(sid, query, k_sessions=1, k_memories=1, query_vector=query_vector)

    def refresh(self, sid: str) -> None:
        """Bring a user's index up to date now (after a memory write or delete through the API)."""
        if self.store.has_user(sid):
            self.shard(sid).retrieve(sid, "refresh", k_sessions=0, k_memories=0)

    # --- REST API ----------------------------------------------------------------------------

    def memories(self, tenant: str, user: str, *, include_superseded: bool) -> list[MemoryRecord]:
        return self.engine.memories(self._require(tenant, user), include_superseded=include_superseded)

    def add_memory(self, tenant: str, user: str, content: str, **fields: Any) -> MemoryRecord:
        sid = self.ensure_user(tenant, user)
        record = self.engine.add_memory(sid, content, **fields)
        self.refresh(sid)
        return record

    def memory(self, tenant: str, user: str, memory_id: int) -> MemoryRecord:
        sid = self._require(tenant, user)
        for m in self.store.memories(sid, include_superseded=True):
            if m.id == memory_id:
                return m
        raise DataError(f"user {user!r}", None, "memory_id", f"no memory {memory_id} for this user")

    def chain(self, tenant: str, user: str, memory_id: int) -> list[MemoryRecord]:
        self.memory(tenant, user, memory_id)
        return self.store.memory_chain(self._require(tenant, user), memory_id)

    def correct(self, tenant: str, user: str, memory_id: int, content: str) -> MemoryRecord:
        """A corrected version of a memory: same kind, category and context factor, superseding it."""
        old = self.memory(tenant, user, memory_id)
        sid = self._require(tenant, user)
        new = self.engine.add_memory(
            sid, content, kind=old.kind, category=old.category, context_factor=old.context_factor
        )
        if old.kind != "preference":  # facts never supersede each other: retire the old one explicitly
            self._retire(sid, old.id, new.id)
            new = self.memory(tenant, user, new.id)
        self.refresh(sid)
        return new

    def _retire(self, sid: str, old_id: int, new_id: int) -> None:
        with self.store._write() as cur:
            now = time.time()
            cur.execute(
                "UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ? AND user_id = ?",
                (now, new_id, old_id, sid),
            )
            cur.execute(
                "INSERT INTO memory_history (user_id, memory_id, event, at, detail)"
                " VALUES (?, ?, 'superseded', ?, ?)",
                (sid, old_id, now, json.dumps({"by": new_id})),
            )
            cur.execute("UPDATE users SET revision = revision + 1 WHERE user_id = ?", (sid,))

    def delete_memory(self, tenant: str, user: str, memory_id: int) -> None:
        """Remove one memory, its history and its embeddings. Versions it superseded stay retired."""
        self.memory(tenant, user, memory_id)
        sid = self._require(tenant, user)
        with self.store._write() as cur:
            cur.execute(
                "UPDATE memories SET superseded_by = NULL WHERE user_id = ? AND superseded_by = ?",
                (sid, memory_id),
            )
            cur.execute("DELETE FROM memory_history WHERE user_id = ? AND memory_id = ?", (sid, memory_id))
            cur.execute(
                "DELETE FROM embeddings WHERE user_id = ? AND unit = 'm' AND unit_id = ?", (sid, memory_id)
            )
            cur.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", (sid, memory_id))
            cur.execute("UPDATE users SET revision = revision + 1 WHERE user_id = ?", (sid,))
        self.refresh(sid)

    def delete_user(self, tenant: str, user: str) -> dict[str, int]:
        """Delete every row of the user in one transaction; return the rows deleted per table.

        Afterwards the store is queried again for each table: any remaining row raises.
        """
        sid = self._require(tenant, user)
        deleted: dict[str, int] = {}
        engine = self.shard(sid)
        with engine._lock, self.store._write() as cur:
            cur.execute("UPDATE memories SET superseded_by = NULL WHERE user_id = ?", (sid,))
            for table in USER_TABLES:
                cur.execute(f"DELETE FROM {table} WHERE user_id = ?", (sid,))  # table: a constant
                deleted[table] = cur.rowcount
            engine._indexes.pop(sid, None)
        with self._users_lock:
            self._known.discard(sid)
        left = self.remaining_rows(sid)
        if any(left.values()):
            raise RuntimeError(f"rows left after deleting a user: {left}")
        return deleted

    def remaining_rows(self, sid: str) -> dict[str, int]:
        """How many rows each table still holds for a scoped user id (all zero after a delete)."""
        return {
            table: int(self.store._read(f"SELECT COUNT(*) FROM {table} WHERE user_id = ?", (sid,))[0][0])
            for table in USER_TABLES
        }

    def export_user(self, tenant: str, user: str) -> dict[str, Any]:
        """Everything stored about a user, as JSON-ready data."""
        sid = self._require(tenant, user)
        sessions = [
            {
                "id": s.id,
                "external_id": s.external_id,
                "timestamp": s.timestamp,
                "metadata": s.metadata,
                "turns": [{"index": t.index, "role": t.role, "content": t.content} for t in s.turns],
            }
            for s in self.store.sessions(sid)
        ]
        extractions = [
            {"session_id": r[0], "extractor": r[1], "status": r[2], "error": r[3], "n_memories": r[4]}
            for r in self.store._read(
                "SELECT session_id, extractor, status, error, n_memories FROM extractions"
                " WHERE user_id = ? ORDER BY session_id",
                (sid,),
            )
        ]
        return {
            "tenant": tenant,
            "user": user,
            "sessions": sessions,
            "memories": [memory_json(m) for m in self.store.memories(sid, include_superseded=True)],
            "history": self.store.history(sid),
            "extractions": extractions,
        }
