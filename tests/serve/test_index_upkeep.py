"""Index upkeep off the request path: `retrieve(refresh=False)` searches the index as last refreshed,
memory writes through the API refresh at once, users spread over independently locked shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from personalign.memory.engine import MemoryEngine
from personalign.serve.tenancy import MemoryService


def turn(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]


def test_refresh_false_searches_the_index_as_last_refreshed(tmp_path: Path) -> None:
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
    engine.add_user("u")
    engine.add_session("u", turn("Kelp counts for Professor Okafor."))
    # a user's first search builds the index whatever the flag says
    assert len(engine.retrieve("u", "kelp Okafor", refresh=False).sessions) == 1
    engine.add_session("u", turn("More kelp counts for Okafor."))
    assert len(engine.retrieve("u", "kelp Okafor", refresh=False).sessions) == 1  # stale on purpose
    assert len(engine.retrieve("u", "kelp Okafor").sessions) == 2
    assert len(engine.retrieve("u", "kelp Okafor", refresh=False).sessions) == 2


def test_api_memory_writes_are_searchable_at_once_even_without_a_refreshing_search(tmp_path: Path) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash", shards=4)
    service.record_turn("t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={})
    assert service.retrieve("t", "ana", "Lisbon trip", k_sessions=3, k_memories=3).sessions
    added = service.add_memory("t", "ana", "Prefers window seats.", category="travel")

    def memories() -> list[str]:
        found = service.retrieve("t", "ana", "window seats travel", k_sessions=0, k_memories=5, refresh=False)
        return [m.memory.content for m in found.memories if m.memory is not None]

    assert memories() == ["Prefers window seats."]
    service.correct("t", "ana", added.id, "Prefers aisle seats.")
    assert memories() == ["Prefers aisle seats."]
    current = service.memories("t", "ana", include_superseded=False)
    service.delete_memory("t", "ana", current[0].id)
    assert memories() == []


def test_users_spread_over_shards_that_share_one_store(tmp_path: Path) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash", shards=8)
    engines = {id(service.engine("t", f"user{i}")): service.engine("t", f"user{i}") for i in range(64)}
    assert 4 < len(engines) <= 8
    assert all(e.store is service.view("t") for e in engines.values())
    assert service.engine("t", "user1") is service.engine("t", "user1")
    assert service.engine("u", "user1") is not service.engine("t", "user1")  # tenants never share one
    for i in range(8):
        service.record_turn("t", f"user{i}", turn(f"Note {i} about Porto."), session_id="s", metadata={})
        found = service.retrieve("t", f"user{i}", "Porto note", k_sessions=5, k_memories=0)
        assert [s.session.turns[0].content for s in found.sessions if s.session] == [f"Note {i} about Porto."]
    service.delete_user("t", "user3")
    assert "user3" not in service.engine("t", "user3")._indexes
    assert not service.has_user("t", "user3") and service.has_user("t", "user4")


def test_lookup_encodes_once_and_retrieves_in_one_call(tmp_path: Path) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash", max_users=2)
    qvec, found = service.lookup("t", "new", "Lisbon trip", k_sessions=3, k_memories=3)
    assert found is None and qvec is not None and qvec.shape == (service.embedder.dim,)  # type: ignore[union-attr]
    service.record_turn(
        "t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={}, user_vector=qvec
    )
    qvec2, found = service.lookup("t", "ana", "Lisbon trip", k_sessions=3, k_memories=3)
    assert found is not None and [s.session.id for s in found.sessions if s.session] == [1]
    assert qvec2 is not None and (qvec2 == qvec).all()
    for user in ("b", "c", "d"):  # the index bound holds across the shards of a tenant
        service.record_turn("t", user, turn("hello"), session_id="s", metadata={})
        service.lookup("t", user, "hello", k_sessions=1, k_memories=0)
    assert sum(len(e._indexes) for e in service._engines.values()) <= 2


def test_recording_a_known_users_turn_is_a_single_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash")
    service.record_turn("t", "ana", turn("First."), session_id="s1", metadata={})  # adds the user too
    view = service.view("t")
    calls: list[object] = []
    monkeypatch.setattr(view, "add_user", lambda *args, **kwargs: calls.append(args))
    qvec = service.encode("Second.")
    service.record_turn("t", "ana", turn("Second."), session_id="s2", metadata={}, user_vector=qvec)
    service.record_turn("t", "ana", turn("Third."), session_id="s3", metadata={})
    assert calls == [] and view.count_sessions("ana") == 3


def test_upkeep_after_an_exchange_prepares_the_index_without_searching_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from personalign.memory.index import UserIndex

    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash", shards=2)
    service.record_turn("t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={})
    service.retrieve("t", "ana", "Lisbon", k_sessions=3, k_memories=3)
    service.record_turn("t", "ana", turn("Porto trip planning."), session_id="s2", metadata={})
    searches: list[str] = []
    original = UserIndex.search_sessions
    monkeypatch.setattr(
        UserIndex,
        "search_sessions",
        lambda self, query, *a, **k: searches.append(query) or original(self, query, *a, **k),
    )
    service.warm("t", "ana")
    assert searches == []  # upkeep used to run a whole retrieval just to refresh
    index = service.engine("t", "ana")._indexes["ana"]
    assert len(index.sessions) == 2 and index._s.bm25.size == 2  # appended and extended, ready
    assert index._s.dense is not None and index._s.dense.size == 2
    found = service.retrieve("t", "ana", "Porto trip", k_sessions=1, k_memories=0, refresh=False)
    assert searches == ["Porto trip"]
    assert [s.session.turns[0].content for s in found.sessions if s.session] == ["Porto trip planning."]


def test_a_lookup_reads_the_user_row_once_and_keeps_nothing_for_unknown_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash", shards=1)
    engine = service.engine("t", "nobody")
    assert service.lookup("t", "nobody", "Lisbon", k_sessions=3, k_memories=3)[1] is None
    assert engine._indexes == {}  # an unknown user's (empty) index is not cached
    service.record_turn("t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={})
    reads = count_reads(service.view("t"), monkeypatch, ("has_user", "catch_up"))
    found = service.lookup("t", "ana", "Lisbon trip", k_sessions=3, k_memories=3)[1]
    assert found is not None and len(found.sessions) == 1
    assert reads == ["catch_up"]  # the existence check and the refresh are one read
    reads.clear()
    service.lookup("t", "ana", "Lisbon trip", k_sessions=3, k_memories=3, refresh=False)
    assert reads == ["has_user"]  # a search of the index as it is still checks the user exists
    service.view("t").delete_user("ana")  # deleted behind the engine's back (another replica)
    assert service.lookup("t", "ana", "Lisbon trip", k_sessions=3, k_memories=3)[1] is None
    assert "ana" not in engine._indexes


def count_reads(
    view: object,
    monkeypatch: pytest.MonkeyPatch,
    names: tuple[str, ...] = ("catch_up", "sessions", "vectors", "user_version", "has_user"),
) -> list[str]:
    """The names of ``view``'s read methods, in the order they are called from now on."""
    reads: list[str] = []
    for name in names:
        original = getattr(view, name)
        monkeypatch.setattr(view, name, lambda *a, _o=original, _n=name, **k: reads.append(_n) or _o(*a, **k))
    return reads


def test_upkeep_takes_in_its_own_write_without_reading_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash")
    service.record_turn("t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={})
    service.lookup("t", "ana", "Lisbon", k_sessions=3, k_memories=3)  # the index is built
    qvec = service.encode("Porto trip planning.")
    recorded = service.record_turn(
        "t", "ana", turn("Porto trip planning."), session_id="s2", metadata={"m": 1}, user_vector=qvec
    )
    reads = count_reads(service.view("t"), monkeypatch)
    service.warm("t", "ana", recorded)
    assert reads == []  # appended from what the write returned
    index = service.engine("t", "ana")._indexes["ana"]
    # the same index a fresh process builds by reading the store
    fresh = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash")
    fresh.lookup("t", "ana", "Lisbon", k_sessions=3, k_memories=3)
    built = fresh.engine("t", "ana")._indexes["ana"]
    assert index.sessions == built.sessions and index._revision == built._revision
    assert index._s.texts == built._s.texts and index._last_session == built._last_session
    assert all((a == b).all() for a, b in zip(index._s.dense_rows, built._s.dense_rows, strict=True))
    assert index._s.dense_rows[1].tolist() == qvec.tolist()  # the vector stored with the turn
    found = service.retrieve("t", "ana", "Porto trip", k_sessions=1, k_memories=0, refresh=False)
    assert [s.session.turns[0].content for s in found.sessions if s.session] == ["Porto trip planning."]
    assert reads == ["has_user"]  # the search's own existence check; nothing was read back


def test_upkeep_reads_the_store_when_another_write_came_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash")
    other = MemoryService(str(tmp_path / "m.sqlite"), embedder="hash")  # another replica
    service.record_turn("t", "ana", turn("Lisbon trip planning."), session_id="s1", metadata={})
    service.lookup("t", "ana", "Lisbon", k_sessions=3, k_memories=3)
    other.record_turn("t", "ana", turn("Faro trip planning."), session_id="s2", metadata={})
    recorded = service.record_turn("t", "ana", turn("Porto trip planning."), session_id="s3", metadata={})
    reads = count_reads(service.view("t"), monkeypatch)
    service.warm("t", "ana", recorded)
    assert reads[:1] == ["catch_up"]  # the index was not at the write's starting version: read
    index = service.engine("t", "ana")._indexes["ana"]
    assert [s.external_id for s in index.sessions] == ["s1", "s2", "s3"]
    assert index._revision == service.view("t").user_version("ana")


def test_a_recorded_session_older_than_the_indexed_ones_is_not_appended(tmp_path: Path) -> None:
    from personalign.memory.backend import NewSession

    engine = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
    engine.add_user("u")
    engine.add_session("u", turn("Kelp counts."), timestamp=10.0)
    engine.retrieve("u", "kelp")
    index = engine._indexes["u"]
    late = engine.record_sessions("u", [NewSession(turn("Older kelp notes."), timestamp=5.0)])
    assert not index.take(late) and len(index.sessions) == 1  # refused, nothing changed
    engine.refresh("u", late)  # falls back to a read, which rebuilds in the store's order
    assert [s.timestamp for s in engine._indexes["u"].sessions] == [5.0, 10.0]
    assert index.rebuilds == 1
