"""Per-user retrieval over a store: BM25, dense and exact-name channels, fused by rank.

The index is kept in step with the store incrementally: a refresh takes only the sessions with ids
above the last one it has seen (the store's ids of a user grow in commit order) and appends them to
every channel, BM25 included (:class:`~personalign.retrieval.IncrementalBM25`, whose scores equal a
fresh build). It rebuilds only when the store no longer matches what was appended: rows deleted (the
session count is short of what it has seen plus the new rows), a new session older than the newest
indexed one (positions follow time order), or the user deleted and re-added. Memories are reread
when the user's revision moves (they are few, and supersession edits them) and their text index is
extended while the old list is a prefix of the new one, rebuilt otherwise. So an incremental index
ranks exactly as a full rebuild, ties included, on every replica sharing the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from personalign.memory.backend import CatchUp, MemoryBackend, Recorded
from personalign.memory.entities import EntityIndex, entity_keys, factor_matches
from personalign.memory.types import MemoryRecord, StoredSession
from personalign.retrieval import DenseIndex, Embedder, IncrementalBM25, reciprocal_rank_fusion, tokenize

CHANNELS = ("bm25", "dense", "exact")


def dense_text(session: StoredSession) -> str:
    """What the embedder sees of a session: the user's own turns (the context and the feedback)."""
    user = [t.content for t in session.turns if t.role == "user"]
    return "\n".join(user or [t.content for t in session.turns])


def memory_text(memory: MemoryRecord) -> str:
    return f"{memory.context_factor}: {memory.content}" if memory.context_factor else memory.content


@dataclass
class _Units:
    """One kind of unit (sessions or memories) with its three channels."""

    texts: list[str] = field(default_factory=list)
    dense_rows: list[np.ndarray] = field(default_factory=list)
    entities: EntityIndex = field(default_factory=EntityIndex)
    bm25: IncrementalBM25 = field(default_factory=IncrementalBM25)
    dense: DenseIndex | None = None

    def lexical(self) -> IncrementalBM25:
        """The BM25 index over ``texts``, extended by the texts appended since the last search."""
        if self.bm25.size < len(self.texts):
            self.bm25.add(self.texts[self.bm25.size :])
        return self.bm25

    def vectors(self, embedder: Embedder) -> DenseIndex:
        if self.dense is None or self.dense.size != len(self.dense_rows):
            matrix = (
                np.vstack(self.dense_rows).astype(np.float32, copy=False)
                if self.dense_rows
                else np.zeros((0, embedder.dim), dtype=np.float32)
            )
            self.dense = DenseIndex(embedder, vectors=matrix)
        return self.dense


class UserIndex:
    """Search structures for one user's sessions and memories, kept in step with the store."""

    def __init__(self, store: MemoryBackend, user_id: str, embedder: Embedder | None) -> None:
        self.store = store
        self.user_id = user_id
        self.embedder = embedder
        self.sessions: list[StoredSession] = []
        self.memories: list[MemoryRecord] = []
        self._s = _Units()
        self._m = _Units()
        self._factor_words: list[frozenset[str]] = []
        self._revision: tuple[int, int] = (-1, -1)  # (the user's internal id, revision)
        self._last_session = 0
        self._times: np.ndarray = np.zeros(0)  # (timestamp, seq) of each session, for ordering
        self._seqs: np.ndarray = np.zeros(0, dtype=np.int64)
        self.rebuilds = 0  # full session rebuilds after the first build (deletes, out-of-order rows)

    def refresh(self) -> None:
        """Catch up with the store: append what was added since the last refresh, rebuild what changed.

        One read (:meth:`MemoryBackend.catch_up`, one snapshot) gives the user's version and, if it
        moved, the new sessions, the memories and their stored vectors; only a rebuild reads more."""
        found = self.store.catch_up(
            self.user_id,
            after_id=self._last_session,
            known=self._revision,
            embedder=self.embedder.name if self.embedder is not None else None,
        )
        if found.version == self._revision:
            return
        if found.version[0] != self._revision[0] and self._revision[0] != -1:
            # the user was deleted and added again: nothing cached is theirs (the new sessions read
            # are then complete only if the count says so; else the rebuild below reads them all)
            self._reset()
        self._refresh_sessions(found)
        self._refresh_memories(found)
        self._revision = found.version

    def take(self, recorded: Recorded) -> bool:
        """Append sessions this process just stored, without reading them back, when the index held
        the user exactly as they were before that write and the sessions come after every indexed one
        (else False: nothing changes and a :meth:`refresh` reads what moved)."""
        new = recorded.sessions
        ordered = [_order(s) for s in new]
        if recorded.before != self._revision or ordered != sorted(ordered) or not self._follows(new):
            return False
        if new:
            mine = recorded.vectors.get(self.embedder.name, {}) if self.embedder is not None else {}
            self._add_sessions(new, {("s", sid): vec for sid, vec in mine.items()})
            self._last_session = max(self._last_session, max(s.id for s in new))
        self._revision = recorded.version
        return True

    def prepare(self) -> None:
        """Bring every search structure up to date now (BM25 extended, dense matrix rebuilt), so the
        next search pays for none of it (they are otherwise updated lazily by the first search)."""
        for units in (self._s, self._m):
            units.lexical()
            if self.embedder is not None:
                units.vectors(self.embedder)

    def _follows(self, new: Sequence[StoredSession]) -> bool:
        """Whether sessions in the store's order (time, then insertion) all come after the newest
        indexed one, so appending keeps the index in that order."""
        return not (new and self.sessions) or _order(new[0]) > _order(self.sessions[-1])

    def _refresh_sessions(self, found: CatchUp) -> None:
        new = found.sessions
        known: Mapping[tuple[str, int], np.ndarray] | None = found.vectors
        if len(self.sessions) + len(new) != found.count or not self._follows(new):
            # rows deleted, or a session older than the newest indexed one: rebuild in the store's order
            self._reset_sessions()
            new = self.store.sessions(self.user_id, until_id=found.last)
            known = None  # older sessions' vectors were not read: look them up
            self.rebuilds += 1
        if new:
            self._add_sessions(new, known)
            self._last_session = max(self._last_session, max(s.id for s in new))

    def _refresh_memories(self, found: CatchUp) -> None:
        memories = found.memories or []
        texts = [memory_text(m) for m in memories]
        old = len(self.memories)
        extend = (
            len(memories) >= old
            and all(m.id == o.id for m, o in zip(memories, self.memories, strict=False))
            and texts[:old] == self._m.texts
        )
        if not extend:
            self._m = _Units()
            self._factor_words = []
            old = 0
        self.memories = memories
        self._m.texts.extend(texts[old:])
        self._factor_words.extend(frozenset(tokenize(m.context_factor)) for m in memories[old:])
        if self.embedder is not None and len(memories) > old:
            self._m.dense_rows.extend(
                self._embed("m", [m.id for m in memories[old:]], texts[old:], found.vectors)
            )

    def _reset_sessions(self) -> None:
        self.sessions = []
        self._s = _Units()
        self._last_session = 0
        self._times = np.zeros(0)
        self._seqs = np.zeros(0, dtype=np.int64)

    def _reset(self) -> None:
        self._reset_sessions()
        self.memories = []
        self._m = _Units()
        self._factor_words = []

    def _add_sessions(
        self, new: Sequence[StoredSession], known: Mapping[tuple[str, int], np.ndarray] | None
    ) -> None:
        self.sessions.extend(new)
        self._times = np.concatenate([self._times, np.array([s.timestamp for s in new], dtype=np.float64)])
        self._seqs = np.concatenate([self._seqs, np.array([s.seq for s in new], dtype=np.int64)])
        self._s.texts.extend(s.text for s in new)
        self._s.entities.add(entity_keys(s.text) for s in new)
        if self.embedder is not None:
            ids, texts = [s.id for s in new], [dense_text(s) for s in new]
            self._s.dense_rows.extend(self._embed("s", ids, texts, known))

    def _embed(
        self,
        unit: str,
        ids: list[int],
        texts: list[str],
        known: Mapping[tuple[str, int], np.ndarray] | None,
    ) -> list[np.ndarray]:
        """The units' stored vectors (from ``known``, read with them, when given; else looked up),
        encoding and storing those that have none."""
        assert self.embedder is not None
        if known is None:
            cached = self.store.vectors(self.user_id, unit, self.embedder.name, ids)
        else:
            cached = {uid: known[(unit, uid)] for uid in ids if (unit, uid) in known}
        missing = [i for i, uid in enumerate(ids) if uid not in cached]
        if missing:
            fresh = self.embedder.encode([texts[i] for i in missing])
            computed = {ids[i]: fresh[row] for row, i in enumerate(missing)}
            self.store.put_vectors(self.user_id, unit, self.embedder.name, computed)
            cached.update(computed)
        return [cached[uid] for uid in ids]

    # --- search ------------------------------------------------------------------------------

    def _rankings(
        self, units: _Units, n: int, query: str, qvec: np.ndarray | None, exact: list[int], depth: int
    ) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        if n == 0:
            return {c: [] for c in CHANNELS}
        out["bm25"] = [h.index for h in units.lexical().search(query, depth)]
        if qvec is not None and self.embedder is not None:
            out["dense"] = [h.index for h in units.vectors(self.embedder).search(qvec, depth)]
        out["exact"] = exact[:depth]
        return out

    def search_sessions(
        self,
        query: str,
        k: int,
        *,
        qvec: np.ndarray | None,
        request_keys: Sequence[frozenset[str]],
        channels: Sequence[str] = CHANNELS,
        depth: int = 50,
        context_first: bool = True,
    ) -> list[tuple[int, float, dict[str, int]]]:
        """Top ``k`` session positions as (position, fused score, per-channel 1-based ranks).

        The exact channel lists the sessions naming the request's names: by the request's first-named
        name they mention, then newest first. With ``context_first`` (and the exact channel on), the
        sessions naming the request's first-mentioned known name (taken as its context) lead the
        result, newest first, so the newest preference for that context wins; the rest follow in
        fused order.
        """
        matched = self._s.entities.matches(request_keys)
        exact = self._exact_order(matched)
        rankings = self._rankings(self._s, len(self.sessions), query, qvec, exact, depth)
        rankings = {c: r for c, r in rankings.items() if c in channels}
        fused = _fuse(rankings, len(self.sessions))
        if context_first and "exact" in rankings and matched:
            top = min(matched.values())
            lead = [i for i in exact if matched[i] == top]
            position = {i: n for n, i in enumerate(lead)}
            fused.sort(key=lambda hit: position.get(hit[0], len(position)))
        return fused[:k]

    def _exact_order(self, matched: dict[int, int]) -> list[int]:
        """Matched sessions by the request's first-named name they mention, then newest first."""
        if not matched:
            return []
        units = np.fromiter(matched.keys(), dtype=np.int64, count=len(matched))
        named = np.fromiter(matched.values(), dtype=np.int64, count=len(matched))
        order = np.lexsort((-self._seqs[units], -self._times[units], named))
        return [int(i) for i in units[order]]

    def search_memories(
        self,
        query: str,
        k: int,
        *,
        qvec: np.ndarray | None,
        request_keys: Sequence[frozenset[str]],
        include_superseded: bool = False,
        channels: Sequence[str] = CHANNELS,
    ) -> tuple[list[tuple[int, float, dict[str, int]]], bool]:
        """Top ``k`` memory positions and whether the request named a stored context factor.

        When it did, memories bound to any other factor are left out (a preference for one context
        is not evidence for a similar one); memories without a factor stay eligible.
        """
        words = frozenset(tokenize(query))
        by_factor = {
            i
            for i, fw in enumerate(self._factor_words)
            if factor_matches(fw, words) or any(q <= fw for q in request_keys if len(q) >= 2)
        }
        eligible = [i for i, m in enumerate(self.memories) if include_superseded or m.valid_to is None]
        if by_factor:
            eligible = [i for i in eligible if i in by_factor or not self._factor_words[i]]
        allowed = set(eligible)
        exact = sorted(
            (i for i in by_factor if i in allowed), key=lambda i: self.memories[i].valid_from, reverse=True
        )
        depth = max(50, len(self.memories))
        rankings = self._rankings(self._m, len(self.memories), query, qvec, exact, depth)
        filtered = {c: [i for i in r if i in allowed] for c, r in rankings.items() if c in channels}
        if not filtered.get("bm25") and not filtered.get("dense") and not filtered.get("exact"):
            # nothing scored (e.g. no shared words and no embedder): newest eligible memories first
            filtered = {"recent": sorted(allowed, key=lambda i: self.memories[i].valid_from, reverse=True)}
        return _fuse(filtered, k), bool(by_factor)


def _order(session: StoredSession) -> tuple[float, int]:
    """A session's place in the store's order (timestamp, then insertion)."""
    return (session.timestamp, session.seq)


def _fuse(rankings: dict[str, list[int]], k: int) -> list[tuple[int, float, dict[str, int]]]:
    fused = reciprocal_rank_fusion(list(rankings.values()))[:k]
    return [(i, score, {c: r.index(i) + 1 for c, r in rankings.items() if i in r}) for i, score in fused]
