"""Retrieval over a store: channels, newest-first per context, factor filtering, user isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from personalign.errors import ConfigError
from personalign.memory import MemoryEngine, RetrievalConfig, UnknownUserError


def chat(*user_turns: str) -> list[dict[str, str]]:
    out = []
    for text in user_turns:
        out += [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted, here you go."}]
    return out


@pytest.fixture
def engine(tmp_path: Path) -> MemoryEngine:
    e = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
    e.add_user("ana")
    e.add_session(
        "ana",
        chat("Plan slides for the Ridgeback journal club talk.", "Three bullets per slide."),
        timestamp=1,
    )
    e.add_session(
        "ana", chat("Write the update for Professor Ines Okafor.", "Raw counts first please."), timestamp=2
    )
    e.add_session("ana", chat("Log the Cedar Cove tide pool survey.", "Use a table."), timestamp=3)
    e.add_session(
        "ana", chat("Another update for Professor Ines Okafor.", "Now lead with interpretation."), timestamp=4
    )
    return e


def test_exact_name_matches_newest_first(engine: MemoryEngine) -> None:
    found = engine.retrieve("ana", "Professor Ines Okafor wants the August update", k_sessions=2)
    assert [int(s.session.timestamp) for s in found.sessions if s.session] == [4, 2]
    assert found.sessions[0].ranks["exact"] == 1 and found.sessions[1].ranks["exact"] == 2


def test_single_channels_and_bad_config(engine: MemoryEngine) -> None:
    engine.config = RetrievalConfig(channels=("bm25",))
    found = engine.retrieve("ana", "tide pool survey at Cedar Cove", k_sessions=1)
    assert int(found.sessions[0].session.timestamp) == 3  # type: ignore[union-attr]
    assert set(found.sessions[0].ranks) == {"bm25"}
    with pytest.raises(ConfigError, match="unknown retrieval channels"):
        RetrievalConfig(channels=("bm25", "magic"))


def test_index_follows_a_growing_store(engine: MemoryEngine) -> None:
    engine.retrieve("ana", "anything")
    engine.add_session("ana", chat("Book the Monterey kayak rental for Saturday."), timestamp=5)
    found = engine.retrieve("ana", "kayak rental in Monterey", k_sessions=1)
    assert int(found.sessions[0].session.timestamp) == 5  # type: ignore[union-attr]


def test_memories_newest_per_context_and_other_factors_excluded(engine: MemoryEngine) -> None:
    engine.add_memory(
        "ana",
        "Lead with raw counts, no interpretation.",
        context_factor="Professor Ines Okafor",
        valid_from=2,
    )
    engine.add_memory(
        "ana",
        "Lead with the interpretation, counts in an appendix.",
        context_factor="Professor Ines Okafor",
        valid_from=4,
    )
    engine.add_memory(
        "ana",
        "Updates for Professor Ines Marsh use bullet points.",
        context_factor="Professor Ines Marsh",
        valid_from=3,
    )
    engine.add_memory("ana", "Keep answers short.", category="length", valid_from=1)
    found = engine.retrieve("ana", "Professor Ines Okafor wants the August update", include_history=True)
    contents = [m.memory.content for m in found.memories if m.memory]
    assert found.matched_factor
    assert contents[0] == "Lead with the interpretation, counts in an appendix."
    assert "Lead with raw counts, no interpretation." not in contents  # superseded
    assert not any("Marsh" in c for c in contents)  # a very similar but different factor
    assert "Keep answers short." in contents  # general preferences stay eligible
    assert [m.content for m in found.memories[0].history] == ["Lead with raw counts, no interpretation."]
    everything = engine.retrieve("ana", "Professor Ines Okafor update", include_superseded=True)
    assert any(m.memory and not m.memory.current for m in everything.memories)


def test_one_users_history_never_reaches_another(engine: MemoryEngine) -> None:
    engine.add_user("ben")
    engine.add_memory(
        "ana", "Updates for Professor Ines Okafor lead with counts.", context_factor="Professor Ines Okafor"
    )
    engine.add_session("ben", chat("Help me plan a birthday party."))
    for query in ("Professor Ines Okafor update", "birthday party", "journal club slides"):
        found = engine.retrieve("ben", query, k_sessions=10, k_memories=10)
        assert all(s.session and s.session.user_id == "ben" for s in found.sessions)
        assert found.memories == []
        assert len(found.sessions) <= 1
    with pytest.raises(UnknownUserError):
        engine.retrieve("zoe", "anything")


def test_without_embedder_and_empty_user(tmp_path: Path) -> None:
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder=None)
    engine.add_user("ana")
    assert engine.retrieve("ana", "anything").sessions == []
    engine.add_session("ana", chat("Plan the Ridgeback journal club talk."))
    found = engine.retrieve("ana", "journal club")
    assert len(found.sessions) == 1 and "dense" not in found.sessions[0].ranks


def test_engine_ingestion_errors_before_any_embedding(engine: MemoryEngine) -> None:
    from personalign.errors import DataError

    with pytest.raises(UnknownUserError, match="'zoe'"):
        engine.add_session("zoe", chat("hello"))
    with pytest.raises(DataError, match=r"^user 'ana' session, row 1, field 'role'"):
        engine.add_session("ana", [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}])
    with pytest.raises(DataError, match=r"session 'b7', field 'messages': empty session"):
        engine.add_session("ana", [], session_id="b7")
