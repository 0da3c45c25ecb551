"""The incremental user index: same rankings as a full rebuild, bounded, shared by replicas."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from personalign.errors import DataError
from personalign.memory import MemoryBackend, MemoryEngine
from personalign.memory.entities import entity_keys
from personalign.memory.index import UserIndex
from personalign.memory.sqlbase import SqlStore
from personalign.retrieval import BM25Index, IncrementalBM25, load_embedder

MakeStore = Callable[..., MemoryBackend]
WORDS = [
    *[
        "coffee",
        "tea",
        "morning",
        "bank",
        "loan",
        "email",
        "formal",
        "casual",
        "boss",
        "Mom",
        "dinner",
        "sushi",
        "pizza",
        "gym",
    ],
    *["Professor", "Okafor", "Dana", "report", "slides", "brief", "bullet", "summary", "numbers"],
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_incremental_bm25_scores_equal_a_fresh_bm25s_index_bit_for_bit() -> None:
    rng = random.Random(3)
    for _ in range(200):
        docs = [sentence(rng, rng.randint(0, 12)) for _ in range(rng.randint(1, 30))]
        index = IncrementalBM25()
        cut = rng.randint(0, len(docs))
        index.add(docs[:cut])
        index.add(docs[cut:])
        full = BM25Index(docs)
        for _ in range(4):
            query = sentence(rng, rng.randint(1, 5)) + rng.choice(["", " zebra"])
            assert np.array_equal(index.scores(query), full.scores(query))
            assert index.search(query, 8) == full.search(query, 8)
    assert IncrementalBM25().search("coffee", 3) == []


def rankings(index: UserIndex, query: str, qvec: np.ndarray) -> tuple[object, ...]:
    """Everything a search returns, with the units named by store id (positions differ by design)."""
    keys = entity_keys(query)
    sessions = [
        (index.sessions[i].id, score, ranks)
        for i, score, ranks in index.search_sessions(query, 10, qvec=qvec, request_keys=keys)
    ]
    hits, matched = index.search_memories(query, 10, qvec=qvec, request_keys=keys, include_superseded=True)
    memories = [(index.memories[i].id, score, ranks) for i, score, ranks in hits]
    current, _ = index.search_memories(query, 10, qvec=qvec, request_keys=keys)
    return sessions, memories, matched, [index.memories[i].id for i, _, _ in current]


def delete_session(store: MemoryBackend, user: str, session_id: int) -> None:
    """A row removed behind the index's back (no API deletes one session): the index must notice."""
    assert isinstance(store, SqlStore)
    with store._write() as tx:
        tx.run("DELETE FROM embeddings WHERE unit = 's' AND unit_id = ?", (session_id,))
        tx.run("DELETE FROM turns WHERE session_id = ?", (session_id,))
        tx.run("DELETE FROM sessions WHERE id = ?", (session_id,))
        tx.run("UPDATE users SET revision = revision + 1 WHERE user_id = ?", (user,))


def test_random_inserts_and_deletes_rank_exactly_as_a_full_rebuild(make_store: MakeStore) -> None:
    store = make_store()
    embedder = load_embedder("hash")
    store.add_user("ana")
    live = UserIndex(store, "ana", embedder)
    rng = random.Random(11)
    clock = 100.0
    for step in range(60):
        op = rng.random()
        if op < 0.45 or not store.sessions("ana"):
            clock += rng.choice([0.0, 1.0, 5.0])  # equal timestamps: ties ordered by insertion
            stamp = clock if rng.random() < 0.85 else clock - rng.uniform(1, 50)  # sometimes back-dated
            new = [
                {"role": "user", "content": sentence(rng, rng.randint(1, 8))},
                {"role": "assistant", "content": sentence(rng, 3)},
            ]
            store.add_session(
                "ana", new, timestamp=stamp, vectors={embedder.name: embedder.encode([new[0]["content"]])[0]}
            )
        elif op < 0.65:
            kind = rng.choice(["preference", "preference", "fact"])
            store.add_memory(
                "ana", sentence(rng, 4), kind=kind, context_factor=rng.choice(["", "Okafor", "Mom"])
            )
        elif op < 0.75 and store.memories("ana", include_superseded=True):
            target = rng.choice(store.memories("ana", include_superseded=True))
            store.delete_memory("ana", target.id)
        elif op < 0.85 and store.memories("ana"):
            store.correct_memory("ana", rng.choice(store.memories("ana")).id, sentence(rng, 3))
        else:
            delete_session(store, "ana", rng.choice(store.sessions("ana")).id)
        live.refresh()
        fresh = UserIndex(store, "ana", embedder)
        fresh.refresh()
        assert [s.id for s in live.sessions] == [s.id for s in fresh.sessions], step
        for _ in range(3):
            query = sentence(rng, rng.randint(1, 4))
            qvec = embedder.encode([query])[0]
            assert rankings(live, query, qvec) == rankings(fresh, query, qvec), (step, query)
    assert live.rebuilds > 0  # back-dated sessions and deletes did force rebuilds


def test_new_sessions_are_appended_without_rebuilding_bm25(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    for n in range(20):
        store.add_session(
            "ana", [{"role": "user", "content": f"session {n} about sushi"}], timestamp=float(n)
        )
    index = UserIndex(store, "ana", None)
    index.refresh()
    assert index._s.lexical().size == 20
    bm25 = index._s.bm25
    store.add_session("ana", [{"role": "user", "content": "ramen tonight"}], timestamp=50.0)
    index.refresh()
    assert [h.index for h in index._s.lexical().search("ramen", 3)] == [20]
    assert index._s.bm25 is bm25 and index.rebuilds == 0  # extended in place, not rebuilt


def test_an_engine_keeps_at_most_max_users_indexes(make_store: MakeStore) -> None:
    store = make_store()
    engine = MemoryEngine(store, embedder=None, max_users=2)
    for user in ("a", "b", "c"):
        engine.add_user(user)
        engine.add_session(user, [{"role": "user", "content": f"{user} likes tea"}])
    engine.retrieve("a", "tea")
    engine.retrieve("b", "tea")
    engine.retrieve("a", "tea")  # a is now the most recent
    engine.retrieve("c", "tea")
    assert list(engine._indexes) == ["a", "c"]
    assert engine.retrieve("b", "tea").sessions[0].session is not None  # rebuilt from the store
    with pytest.raises(Exception, match="max_users"):
        MemoryEngine(store, embedder=None, max_users=0)


def test_two_replicas_on_one_store_catch_up_with_each_others_writes(make_store: MakeStore) -> None:
    replica_a = MemoryEngine(make_store(tenant="acme"), embedder="hash")
    replica_b = MemoryEngine(make_store(tenant="acme"), embedder="hash")
    replica_a.add_user("ana")
    replica_a.add_session("ana", [{"role": "user", "content": "I take my coffee black"}])
    assert replica_b.retrieve("ana", "coffee").sessions  # B builds its index
    replica_a.add_session("ana", [{"role": "user", "content": "Emails to Professor Okafor are formal"}])
    found = replica_b.retrieve("ana", "email for Professor Okafor")
    assert "Okafor" in found.sessions[0].session.text  # type: ignore[union-attr]
    memory = replica_b.add_memory("ana", "Formal with Okafor", context_factor="Okafor")
    assert [m.memory.id for m in replica_a.retrieve("ana", "Okafor").memories] == [memory.id]  # type: ignore[union-attr]
    replica_b.store.delete_memory("ana", memory.id)
    assert replica_a.retrieve("ana", "Okafor").memories == []
    b_index = replica_b._indexes["ana"]
    assert b_index.rebuilds == 0  # B only ever appended


# --- the public single-memory correct / delete (both stores) ----------------------------------


def test_correct_memory_supersedes_in_one_write(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    fact = store.add_memory("ana", "Lives in Lyon", kind="fact")
    pref = store.add_memory("ana", "Short emails", context_factor="boss")
    before = store.revision("ana")
    new_fact = store.correct_memory("ana", fact.id, "Lives in Porto")
    assert store.revision("ana") == before + 1  # one transaction
    assert (new_fact.kind, new_fact.content, new_fact.source, new_fact.current) == (
        "fact",
        "Lives in Porto",
        "correction",
        True,
    )
    old = next(m for m in store.memories("ana", include_superseded=True) if m.id == fact.id)
    assert old.superseded_by == new_fact.id and old.valid_to is not None
    new_pref = store.correct_memory("ana", pref.id, "Very short emails")
    assert new_pref.context_factor == "boss"
    assert [m.id for m in store.memories("ana")] == [new_fact.id, new_pref.id]
    assert [m.id for m in store.memory_chain("ana", new_pref.id)] == [pref.id, new_pref.id]
    with pytest.raises(DataError, match="content"):
        store.correct_memory("ana", pref.id, "  ")


def test_delete_memory_removes_it_its_history_and_vectors(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    store.add_user("ben")
    old = store.add_memory("ana", "Short emails", context_factor="boss")
    new = store.add_memory("ana", "Very short emails", context_factor="boss")
    store.put_vectors("ana", "m", "e", {new.id: np.ones(2, dtype=np.float32)})
    with pytest.raises(DataError, match="memory_id"):
        store.delete_memory("ben", new.id)  # another user's memory id
    store.delete_memory("ana", new.id)
    left = store.memories("ana", include_superseded=True)
    assert [(m.id, m.superseded_by, m.current) for m in left] == [(old.id, None, False)]  # stays retired
    assert all(h["memory_id"] != new.id for h in store.history("ana"))
    assert store.vectors("ana", "m", "e", [new.id]) == {}
    assert store.check() == []
    with pytest.raises(DataError, match="memory_id"):
        store.delete_memory("ana", new.id)
