"""Both stores (SQLite, PostgreSQL): bad input, per-user scoping, supersession with history, atomic writes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from personalign.errors import DataError
from personalign.memory import Limits, MemoryBackend, UnknownUserError, factor_key
from personalign.types import Message

CHAT = [
    {"role": "user", "content": "Write the update for Professor Ines Okafor."},
    {"role": "assistant", "content": "Here is a draft."},
    {"role": "user", "content": "Lead with the raw counts, no interpretation."},
]


MakeStore = Callable[..., MemoryBackend]


@pytest.fixture
def store(make_store: MakeStore) -> MemoryBackend:
    s = make_store()
    s.add_user("ana")
    s.add_user("ben")
    return s


def test_session_round_trip_in_time_order(store: MemoryBackend) -> None:
    late = store.add_session("ana", CHAT, timestamp=20.0, metadata={"topic": "update"}, external_id="s2")
    early = store.add_session("ana", [Message(role="user", content="hello there")], timestamp=10.0)
    sessions = store.sessions("ana")
    assert [s.id for s in sessions] == [early, late]  # by timestamp, not insertion
    assert sessions[1].metadata == {"topic": "update"}
    assert [t.role for t in sessions[1].turns] == ["user", "assistant", "user"]
    assert sessions[1].turns[2].content == CHAT[2]["content"]
    assert store.count_sessions("ana") == 2 and store.count_sessions("ben") == 0


@pytest.mark.parametrize(
    ("messages", "row", "field", "needle"),
    [
        ([], None, "messages", "empty session"),
        ([{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}], 1, "role", "unknown role"),
        ([{"role": "user", "content": "   "}], 0, "content", "non-empty"),
        ([{"role": "user", "content": "x" * 101}], 0, "content", "per-message limit"),
        ([{"role": "user", "content": "x"}] * 6, None, "messages", "exceed the limit"),
        ("just a string", None, "messages", "list of messages"),
    ],
)
def test_bad_sessions_name_row_and_field(
    make_store: MakeStore, messages: object, row: int | None, field: str, needle: str
) -> None:
    store = make_store(limits=Limits(max_turns=5, max_chars_per_turn=100))
    store.add_user("ana")
    with pytest.raises(DataError) as info:
        store.add_session("ana", messages, external_id="s9")  # type: ignore[arg-type]
    assert info.value.row == row and info.value.field == field and needle in str(info.value)
    assert "'s9'" in str(info.value)
    assert store.count_sessions("ana") == 0


def test_unknown_user_and_bad_user_id(store: MemoryBackend) -> None:
    with pytest.raises(UnknownUserError, match="'zoe'"):
        store.add_session("zoe", CHAT)
    with pytest.raises(UnknownUserError):
        store.sessions("zoe")
    with pytest.raises(UnknownUserError):
        store.memories("zoe")
    with pytest.raises(DataError, match="user_id"):
        store.add_user("  ")
    with pytest.raises(DataError, match="already stored"):
        store.add_session("ana", CHAT, external_id="same")
        store.add_session("ana", CHAT, external_id="same")


def test_reads_and_writes_are_scoped_by_user(store: MemoryBackend) -> None:
    sid = store.add_session("ana", CHAT)
    store.add_memory("ana", "Lead with counts.", context_factor="Professor Okafor", session_id=sid)
    store.add_memory("ben", "Use emojis.", category="markers")
    assert [m.content for m in store.memories("ben")] == ["Use emojis."]
    assert store.sessions("ben") == []
    # ben cannot attach a memory to ana's session, nor read ana's memory chain
    with pytest.raises(DataError, match="no session"):
        store.add_memory("ben", "x", session_id=sid)
    ana_memory = store.memories("ana")[0]
    with pytest.raises(DataError, match="no memory"):
        store.memory_chain("ben", ana_memory.id)
    # the same context factor for another user does not supersede ana's memory
    store.add_memory("ben", "Interpret the counts.", context_factor="Professor Okafor")
    assert store.memories("ana")[0].current


def test_newer_preference_supersedes_and_old_is_kept(store: MemoryBackend) -> None:
    old = store.add_memory("ana", "Lead with counts.", context_factor="Professor Ines Okafor", valid_from=1)
    other = store.add_memory("ana", "Three bullets per slide.", context_factor="journal club", valid_from=2)
    new = store.add_memory(
        "ana", "Lead with the interpretation.", context_factor="professor okafor ines", valid_from=3
    )
    current = {m.id for m in store.memories("ana")}
    assert current == {other.id, new.id}
    every = {m.id: m for m in store.memories("ana", include_superseded=True)}
    assert every[old.id].valid_to == 3 and every[old.id].superseded_by == new.id
    assert [m.id for m in store.memory_chain("ana", new.id)] == [old.id, new.id]
    events = [(h["memory_id"], h["event"]) for h in store.history("ana")]
    assert (old.id, "superseded") in events
    # an older memory arriving late is history on arrival
    late = store.add_memory("ana", "Counts as a table.", context_factor="Professor Ines Okafor", valid_from=2)
    every = {m.id: m for m in store.memories("ana", include_superseded=True)}
    assert every[late.id].valid_to == 3 and every[late.id].superseded_by == new.id
    assert every[new.id].current
    # facts never supersede each other
    store.add_memory("ana", "Works at a marine station.", kind="fact", context_factor="work")
    store.add_memory("ana", "Has two kids.", kind="fact", context_factor="work")
    assert len(store.memories("ana", kind="fact")) == 2


def test_factor_key_is_word_set() -> None:
    assert factor_key("Professor Ines Okafor") == factor_key("okafor, professor ines")
    assert factor_key("Brookfield Science Olympiad Team") != factor_key("Brookfield High PTA")


def test_a_failed_batch_writes_nothing(store: MemoryBackend) -> None:
    sid = store.add_session("ana", CHAT)
    revision = store.revision("ana")
    items = [
        {"content": "Lead with counts.", "context_factor": "Okafor", "evidence_turns": [2]},
        {"content": "Bad evidence.", "evidence_turns": [7]},
    ]
    with pytest.raises(DataError, match="evidence_turns"):
        store.add_memories("ana", items, session_id=sid, extractor="x")
    assert store.memories("ana", include_superseded=True) == []
    assert store.pending_extraction("ana", "x") == [sid]
    assert store.revision("ana") == revision
    with pytest.raises(DataError, match=r"row 0, field 'kind'"):
        store.add_memories("ana", [{"content": "x", "kind": "opinion"}])
    assert store.check() == []


def test_a_batch_of_sessions_is_all_or_nothing(make_store: MakeStore) -> None:
    from personalign.memory import MemoryEngine, NewSession

    engine = MemoryEngine(make_store(), embedder="hash")
    engine.add_user("ana")
    good = NewSession(CHAT, timestamp=1.0)
    bad = NewSession([{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}])
    with pytest.raises(DataError, match=r"session 1, row 1, field 'role'"):
        engine.add_sessions("ana", [good, bad])
    assert engine.store.count_sessions("ana") == 0
    ids = engine.add_sessions("ana", [good, NewSession(CHAT, timestamp=0.5, external_id="x")])
    assert [s.id for s in engine.sessions("ana")] == ids[::-1]  # ordered by time
    assert len(engine.store.vectors("ana", "s", "hash:512", ids)) == 2
