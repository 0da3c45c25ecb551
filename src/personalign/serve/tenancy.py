"""The gateway's one door to the memory store: tenant-scoped users over `MemoryEngine` / `open_store`.

A store handle is bound to one tenant (``tenant_view``), so a tenant's requests can only ever name
that tenant's users; user ids are opaque data, passed to the store as bound SQL parameters. Each
tenant's users are spread over ``shards`` engines (independently locked indexes) by a hash of the
(tenant, user) pair, so index upkeep for one user holds up only its shard.

Each engine keeps at most ``max_users // shards`` users' indexes (least recently searched evicted).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import DataError
from personalign.memory.backend import MemoryBackend, NewSession, Recorded, UnknownUserError
from personalign.memory.engine import MemoryEngine, Retrieval, RetrievalConfig
from personalign.memory.sqlbase import check_text, validate_messages
from personalign.memory.stores import open_store
from personalign.memory.types import MemoryRecord
from personalign.retrieval import Embedder, load_embedder
from personalign.retrieval.batching import QueryBatcher

MAX_USER_CHARS = 128


def check_user(user: Any, source: str = "request") -> str:
    """A user id as given by a client: any non-empty text up to 128 characters (opaque data)."""
    if not isinstance(user, str) or not user:
        raise DataError(source, None, "user", "a user id must be a non-empty string")
    if len(user) > MAX_USER_CHARS:
        raise DataError(source, None, "user", f"a user id has at most {MAX_USER_CHARS} characters")
    check_text(user, source, None, "user")
    return user


def scoped_id(tenant: str, user: str) -> str:
    """The gateway's own key for a (tenant, user) pair (its in-memory maps, log pseudonyms): injective,
    the tenant's length comes first. The store keys users by the pair itself."""
    return f"{len(tenant)}:{tenant}:{user}"


def split_scoped(scoped: str) -> tuple[str, str]:
    """The (tenant, user) pair back from :func:`scoped_id`."""
    length, _, rest = scoped.partition(":")
    n = int(length)
    return rest[:n], rest[n + 1 :]


def memory_json(m: MemoryRecord) -> dict[str, Any]:
    """A memory as the REST API shows it."""
    data = asdict(m)
    del data["user_id"]
    data["evidence_turns"] = list(m.evidence_turns)
    data["current"] = m.current
    return data


class MemoryService:
    """Tenant-scoped memory operations for the gateway (all blocking: call them off the event loop)."""

    def __init__(
        self,
        store: MemoryBackend | str | Path,
        *,
        embedder: Embedder | str | None = "minilm",
        config: RetrievalConfig | None = None,
        shards: int = 1,
        max_users: int = 4096,
    ) -> None:
        self.store = open_store(store)
        self.embedder: Embedder | None = load_embedder(embedder) if isinstance(embedder, str) else embedder
        # concurrent requests' queries share one model call (one client's is encoded at once)
        self.queries = QueryBatcher(self.embedder) if self.embedder is not None else None
        self.config = config or RetrievalConfig()
        self.shards = max(1, shards)
        self.max_users = max(1, max_users)  # users' indexes kept in memory per tenant (all shards)
        self._engines: dict[tuple[str, int], MemoryEngine] = {}
        self._views: dict[str, MemoryBackend] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.store.close()

    def view(self, tenant: str) -> MemoryBackend:
        """The store bound to ``tenant`` (shares the connections)."""
        with self._lock:
            view = self._views.get(tenant)
            if view is None:
                view = self._views[tenant] = self.store.tenant_view(tenant)
            return view

    def engine(self, tenant: str, user: str) -> MemoryEngine:
        """The engine (index shard) holding this user's index."""
        digest = hashlib.blake2b(scoped_id(tenant, user).encode("utf-8", "surrogatepass"), digest_size=4)
        key = (tenant, int.from_bytes(digest.digest(), "big") % self.shards)
        view = self.view(tenant)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = MemoryEngine(
                    view,
                    embedder=self.embedder,
                    config=self.config,
                    max_users=max(1, self.max_users // self.shards),
                )
            return engine

    def ping(self) -> None:
        """Raise when the store does not answer (readiness)."""
        self.store.schema_version()

    # --- request path ------------------------------------------------------------------------

    def has_user(self, tenant: str, user: str) -> bool:
        return self.view(tenant).has_user(check_user(user))

    def _require(self, tenant: str, user: str) -> MemoryBackend:
        view = self.view(tenant)
        if not view.has_user(check_user(user)):
            raise UnknownUserError(user, f"tenant {tenant!r}")
        return view

    def encode(self, text: str) -> npt.NDArray[np.float32] | None:
        """The request encoded once by the embedder (None without one): it serves both the
        retrieval and, since a recorded exchange is embedded by its user turn, the stored session.
        Queries of concurrent requests are encoded together (:class:`QueryBatcher`)."""
        if self.queries is None or "dense" not in self.config.channels:
            return None
        return self.queries.encode_one(text)

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
        self._require(tenant, user)
        return self.engine(tenant, user).retrieve(
            user,
            query,
            k_sessions=k_sessions,
            k_memories=k_memories,
            include_history=True,
            query_vector=query_vector,
            refresh=refresh,
        )

    def lookup(
        self, tenant: str, user: str, query: str, *, k_sessions: int, k_memories: int, refresh: bool = True
    ) -> tuple[npt.NDArray[np.float32] | None, Retrieval | None]:
        """The request's work before the upstream call, in one blocking call (one thread-pool hop for
        the gateway): the query encoded once (:meth:`encode`) and what is retrieved for it (None
        when the user has no history yet)."""
        qvec = self.encode(query)
        check_user(user)
        # a refreshing search reads the user's row anyway (and raises for an unknown user); one
        # that searches the index as it is asks the store first (the user may be gone since)
        if not refresh and not self.view(tenant).has_user(user):
            return qvec, None
        try:
            found = self.engine(tenant, user).retrieve(
                user,
                query,
                k_sessions=k_sessions,
                k_memories=k_memories,
                include_history=True,
                query_vector=qvec,
                refresh=refresh,
            )
        except UnknownUserError:  # no history yet
            return qvec, None
        return qvec, found

    def check_exchange(self, messages: Sequence[Mapping[str, str]]) -> None:
        """Raise DataError for an exchange the store would refuse (too long, bad text)."""
        validate_messages(list(messages), source="the last user message", limits=self.store.limits)

    def record_turn(
        self,
        tenant: str,
        user: str,
        messages: Sequence[Mapping[str, str]],
        *,
        session_id: str,
        metadata: Mapping[str, Any],
        user_vector: npt.NDArray[np.float32] | None = None,
    ) -> Recorded:
        """Store one exchange as a session (with its embedding) in one transaction (two for a user's
        first: the user row, then the exchange); what was stored goes to :meth:`warm`.

        ``user_vector``: the exchange's user turn already encoded (see :meth:`encode`), stored as the
        session's embedding instead of encoding the same text again.
        """
        view = self.view(tenant)
        check_user(user)
        try:  # a known user (every request after their first): one write transaction
            return self._record(view, tenant, user, messages, session_id, metadata, user_vector)
        except UnknownUserError:  # their first turn: add them, then record
            view.add_user(user)
            return self._record(view, tenant, user, messages, session_id, metadata, user_vector)

    def _record(
        self,
        view: MemoryBackend,
        tenant: str,
        user: str,
        messages: Sequence[Mapping[str, str]],
        session_id: str,
        metadata: Mapping[str, Any],
        user_vector: npt.NDArray[np.float32] | None,
    ) -> Recorded:
        new = NewSession(list(messages), metadata=metadata, external_id=session_id)
        users = [m for m in messages if m.get("role") == "user"]
        if user_vector is None or self.embedder is None or len(users) != 1:
            return self.engine(tenant, user).record_sessions(user, [new])
        return view.record_sessions(user, [replace(new, vectors={self.embedder.name: user_vector})])

    def warm(self, tenant: str, user: str, recorded: Recorded | None = None) -> None:
        """Bring the user's index up to date (new sessions appended, BM25 extended, dense matrix
        rebuilt) off the request path; no search is run (it used to run a whole retrieval).
        ``recorded``: the exchange just stored (:meth:`record_turn`), taken in without a read when
        nothing else wrote for the user since the index was last brought up to date."""
        with contextlib.suppress(UnknownUserError):  # deleted meanwhile: nothing to keep up
            self.engine(tenant, user).refresh(user, recorded)

    def refresh(self, tenant: str, user: str) -> None:
        """Bring a user's index up to date now (after a memory write or delete through the API)."""
        self.warm(tenant, user)

    # --- REST API ----------------------------------------------------------------------------

    def memories(self, tenant: str, user: str, *, include_superseded: bool) -> list[MemoryRecord]:
        return self._require(tenant, user).memories(user, include_superseded=include_superseded)

    def add_memory(self, tenant: str, user: str, content: str, **fields: Any) -> MemoryRecord:
        view = self.view(tenant)
        view.add_user(check_user(user))
        record = view.add_memory(user, content, **fields)
        self.refresh(tenant, user)
        return record

    def memory(self, tenant: str, user: str, memory_id: int) -> MemoryRecord:
        for m in self._require(tenant, user).memories(user, include_superseded=True):
            if m.id == memory_id:
                return m
        raise DataError(f"user {user!r}", None, "memory_id", f"no memory {memory_id} for this user")

    def chain(self, tenant: str, user: str, memory_id: int) -> list[MemoryRecord]:
        self.memory(tenant, user, memory_id)
        return self.view(tenant).memory_chain(user, memory_id)

    def correct(self, tenant: str, user: str, memory_id: int, content: str) -> MemoryRecord:
        """A corrected version of a memory: same kind, category and context factor, superseding it."""
        self.memory(tenant, user, memory_id)
        new = self.view(tenant).correct_memory(user, memory_id, content)
        self.refresh(tenant, user)
        return new

    def delete_memory(self, tenant: str, user: str, memory_id: int) -> None:
        """Remove one memory, its history and its embeddings. Versions it superseded stay retired."""
        self.memory(tenant, user, memory_id)
        self.view(tenant).delete_memory(user, memory_id)
        self.refresh(tenant, user)

    def delete_user(self, tenant: str, user: str) -> dict[str, int]:
        """Delete every row of the user in one transaction (and their index); rows deleted per table."""
        self._require(tenant, user)
        return self.engine(tenant, user).delete_user(user)

    def export_user(self, tenant: str, user: str) -> dict[str, Any]:
        """Everything stored about a user, as JSON-ready data."""
        data = self._require(tenant, user).export_user(user)
        data["user"] = data.pop("user_id")
        data["memories"] = [
            {**{k: v for k, v in m.items() if k != "user_id"}, "current": m.get("valid_to") is None}
            for m in data["memories"]
        ]
        return data
