"""`MemoryEngine`: record conversations, retrieve what matters for a new request, render a memory block.

The engine owns a store (a :class:`MemoryBackend`: SQLite or PostgreSQL) and one :class:`UserIndex`
per user it has searched. Without an extraction model it indexes raw sessions; with one (see
:mod:`personalign.memory.extract`) it also keeps contextual memories, the newest per context, and can
decide which ones to apply in a given communication context (see :mod:`personalign.memory.select`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import ConfigError
from personalign.llm import Model
from personalign.memory.backend import (
    DEFAULT_TENANT,
    Limits,
    MemoryBackend,
    NewSession,
    Recorded,
    UnknownUserError,
)
from personalign.memory.entities import entity_keys
from personalign.memory.extract import ExtractionReport, extract_pending
from personalign.memory.index import CHANNELS, UserIndex, dense_text
from personalign.memory.select import (
    SelectionPolicy,
    applied,
    memories_of,
    render_memory_block,
    select_memories,
)
from personalign.memory.sqlbase import check_text, session_source, validate_messages
from personalign.memory.stores import open_store
from personalign.memory.types import (
    CommunicationContext,
    MemoryRecord,
    RetrievedItem,
    SelectionDecision,
    StoredSession,
    Turn,
)
from personalign.retrieval import Embedder, load_embedder


@dataclass(frozen=True)
class RetrievalConfig:
    """How a request is matched against a user's history."""

    k_sessions: int = 3
    k_memories: int = 8
    channels: tuple[str, ...] = CHANNELS
    depth: int = 50  # candidates taken from each channel before fusion
    # Sessions naming the request's context lead, newest first (the newest preference wins).
    context_first: bool = True

    def __post_init__(self) -> None:
        unknown = set(self.channels) - set(CHANNELS)
        if unknown or not self.channels:
            raise ConfigError(f"unknown retrieval channels {sorted(unknown)} (known: {', '.join(CHANNELS)})")
        if self.k_sessions < 0 or self.k_memories < 0:
            raise ConfigError("k_sessions and k_memories must be >= 0")


@dataclass(frozen=True)
class Retrieval:
    """What :meth:`MemoryEngine.retrieve` found for one request."""

    user_id: str
    query: str
    sessions: list[RetrievedItem] = field(default_factory=list)
    memories: list[RetrievedItem] = field(default_factory=list)
    matched_factor: bool = False  # the request named a context factor of a stored memory


@dataclass(frozen=True)
class MemoryBlock:
    """The rendered block for the subject's prompt, with what was retrieved and each decision."""

    text: str
    retrieval: Retrieval
    decisions: list[SelectionDecision]


class MemoryEngine:
    """The personalization memory engine over one store: a path or URL for :func:`open_store`, or a store.

    ``embedder``: an :class:`~personalign.retrieval.Embedder`, a spec for
    :func:`~personalign.retrieval.load_embedder` (default ``minilm``, offline), or None for no dense
    channel. Embeddings are computed when a session is added and cached in the store.
    ``tenant``: whose users this engine serves (a store object given with another tenant is viewed
    as that tenant; the default tenant keeps single-tenant behaviour).
    ``max_users``: keep at most this many users' indexes in memory (least recently searched evicted;
    an evicted user's index is rebuilt from the store on their next search). None: no bound.
    """

    def __init__(
        self,
        store: MemoryBackend | str | Path,
        *,
        embedder: Embedder | str | None = "minilm",
        config: RetrievalConfig | None = None,
        limits: Limits | None = None,
        tenant: str | None = None,
        max_users: int | None = None,
    ) -> None:
        if max_users is not None and max_users < 1:
            raise ConfigError(f"max_users must be at least 1, got {max_users}")
        if isinstance(store, (str, Path)):
            self.store = open_store(store, limits=limits or Limits(), tenant=tenant or DEFAULT_TENANT)
        else:
            self.store = store.tenant_view(tenant) if tenant and tenant != store.tenant else store
        self.embedder: Embedder | None = load_embedder(embedder) if isinstance(embedder, str) else embedder
        self.config = config or RetrievalConfig()
        # the users' indexes, least recently searched first; at most max_users (None: no bound)
        self.max_users = max_users
        self._indexes: OrderedDict[str, UserIndex] = OrderedDict()
        self._lock = threading.RLock()  # one retrieval (refresh + search) at a time per engine

    def close(self) -> None:
        self.store.close()

    # --- writing -----------------------------------------------------------------------------

    def add_user(self, user_id: str) -> None:
        self.store.add_user(user_id)

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Delete the user and all their data from the store (and this engine's index of them)."""
        with self._lock:
            self._indexes.pop(user_id, None)
            return self.store.delete_user(user_id)

    def export_user(self, user_id: str) -> dict[str, Any]:
        """All of the user's stored data as JSON-able dicts."""
        return self.store.export_user(user_id)

    def add_session(
        self,
        user_id: str,
        messages: Sequence[Any],
        *,
        timestamp: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> int:
        """Record one conversation (a list of role/content messages); return its store id.

        The session, its turns and its embedding land in one transaction. Extraction, if used,
        runs later (:meth:`extract` or :class:`BackgroundExtractor`), off the request path.
        """
        new = NewSession(messages, timestamp=timestamp, metadata=metadata, external_id=session_id)
        return self.add_sessions(user_id, [new])[0]

    def add_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> list[int]:
        """Record several conversations at once: embedded in one batch, stored in one transaction."""
        return [s.id for s in self.record_sessions(user_id, sessions).sessions]

    def record_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> Recorded:
        """:meth:`add_sessions`, returning what was stored (for :meth:`refresh` to take in)."""
        if not self.store.has_user(user_id):
            raise UnknownUserError(user_id, self.store.url)
        if self.embedder is not None and sessions:
            texts = []
            for n, new in enumerate(sessions):
                source = session_source(user_id, new.external_id, n, len(sessions))
                pairs = validate_messages(new.messages, source=source, limits=self.store.limits)
                turns = tuple(Turn(i, r, c) for i, (r, c) in enumerate(pairs))
                texts.append(dense_text(StoredSession(0, user_id, None, 0.0, 0, {}, turns)))
            vectors = self.embedder.encode(texts)
            sessions = [
                replace(new, vectors={**(new.vectors or {}), self.embedder.name: vectors[n]})
                for n, new in enumerate(sessions)
            ]
        return self.store.record_sessions(user_id, sessions)

    def add_memory(self, user_id: str, content: str, **fields: Any) -> MemoryRecord:
        """Store a memory directly (e.g. a statement the user gave); see :meth:`MemoryBackend.add_memory`."""
        return self.store.add_memory(user_id, content, **fields)

    # --- reading -----------------------------------------------------------------------------

    def _index(self, user_id: str, refresh: bool = True) -> UserIndex:
        with self._lock:
            index = self._indexes.get(user_id)
            if index is None:
                index = UserIndex(self.store, user_id, self.embedder)
                index.refresh()  # an unknown user raises here, before anything is kept for them
                refresh = False
                self._indexes[user_id] = index
                if self.max_users is not None:
                    while len(self._indexes) > self.max_users:
                        self._indexes.popitem(last=False)  # evict the least recently searched user
            else:
                self._indexes.move_to_end(user_id)
            if refresh:
                try:
                    index.refresh()
                except UnknownUserError:  # deleted (through another engine or replica): drop it
                    self._indexes.pop(user_id, None)
                    raise
            return index

    def refresh(self, user_id: str, recorded: Recorded | None = None) -> None:
        """Catch the user's index up with the store and prepare it for search, without searching
        (index upkeep off a request path: the next search finds everything ready).

        ``recorded``: a write this process just made for the user; an index that held the user as
        they were before it takes the sessions in without reading the store."""
        with self._lock:
            index = self._indexes.get(user_id)
            if index is None or recorded is None or not index.take(recorded):
                index = self._index(user_id)
            index.prepare()

    def retrieve(
        self,
        user_id: str,
        request: str,
        *,
        k_sessions: int | None = None,
        k_memories: int | None = None,
        include_history: bool = False,
        include_superseded: bool = False,
        query_vector: npt.NDArray[np.float32] | None = None,
        refresh: bool = True,
    ) -> Retrieval:
        """Sessions and memories relevant to ``request``, best first.

        Memories: only the newest per context unless ``include_superseded``; ``include_history``
        attaches each returned memory's change history (older versions of the same context).
        ``query_vector``: the request already encoded by the engine's embedder (saves the encoding).
        ``refresh=False``: search the user's index as last refreshed, for a caller that keeps it up
        to date off its request path (the gateway); a user's first search always builds it.
        """
        check_text(request, f"user {user_id!r} request", None, "request")
        with self._lock:
            return self._retrieve(
                user_id,
                request,
                k_sessions,
                k_memories,
                include_history,
                include_superseded,
                query_vector,
                refresh,
            )

    def _retrieve(
        self,
        user_id: str,
        request: str,
        k_sessions: int | None,
        k_memories: int | None,
        include_history: bool,
        include_superseded: bool,
        query_vector: npt.NDArray[np.float32] | None,
        refresh: bool = True,
    ) -> Retrieval:
        cfg = self.config
        index = self._index(user_id, refresh)
        ks = cfg.k_sessions if k_sessions is None else k_sessions
        km = cfg.k_memories if k_memories is None else k_memories
        qvec = query_vector
        if (
            qvec is None
            and self.embedder is not None
            and "dense" in cfg.channels
            and (index.sessions or index.memories)
        ):
            qvec = self.embedder.encode([request])[0]
        keys = entity_keys(request)
        sessions = (
            [
                RetrievedItem("session", score, session=index.sessions[i], ranks=ranks)
                for i, score, ranks in index.search_sessions(
                    request,
                    ks,
                    qvec=qvec,
                    request_keys=keys,
                    channels=cfg.channels,
                    depth=cfg.depth,
                    context_first=cfg.context_first,
                )
            ]
            if ks
            else []
        )
        memories: list[RetrievedItem] = []
        matched = False
        if km and index.memories:
            hits, matched = index.search_memories(
                request,
                km,
                qvec=qvec,
                request_keys=keys,
                include_superseded=include_superseded,
                channels=cfg.channels,
            )
            for i, score, ranks in hits:
                memory = index.memories[i]
                history: tuple[MemoryRecord, ...] = ()
                if include_history:
                    history = tuple(
                        m for m in self.store.memory_chain(user_id, memory.id) if m.id != memory.id
                    )
                memories.append(RetrievedItem("memory", score, memory=memory, ranks=ranks, history=history))
        return Retrieval(user_id, request, sessions, memories, matched)

    async def extract(self, user_id: str, model: Model, *, concurrency: int = 4) -> ExtractionReport:
        """Extract memories from the user's sessions that ``model`` has not processed yet (see
        :func:`personalign.memory.extract.extract_pending`; use :class:`BackgroundExtractor` to keep
        it off the request path)."""
        return await extract_pending(self.store, user_id, model, concurrency=concurrency)

    async def personalize(
        self,
        user_id: str,
        request: str,
        context: CommunicationContext | None = None,
        *,
        judge: Model | None = None,
        policy: SelectionPolicy | None = None,
        with_sessions: bool | None = None,
    ) -> MemoryBlock:
        """Retrieve for ``request``, decide which memories apply in ``context``, render the block.

        Sessions are shown when the user has no memories yet (no extraction ran), or when
        ``with_sessions`` says so.
        """
        found = self.retrieve(user_id, request)
        decisions = await select_memories(
            memories_of(found.memories), context or CommunicationContext(), judge=judge, policy=policy
        )
        show_sessions = not found.memories if with_sessions is None else with_sessions
        text = render_memory_block(
            memories=applied(decisions),
            sessions=[s.session for s in found.sessions if s.session] if show_sessions else (),
        )
        return MemoryBlock(text, found, decisions)

    def sessions(self, user_id: str) -> list[StoredSession]:
        return self.store.sessions(user_id)

    def memories(self, user_id: str, *, include_superseded: bool = False) -> list[MemoryRecord]:
        return self.store.memories(user_id, include_superseded=include_superseded)
