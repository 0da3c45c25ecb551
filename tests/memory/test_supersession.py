"""Supersession rules: the pure rules, and the store applying them (ties, factor-less memories)."""

from __future__ import annotations

from pathlib import Path

import pytest

from personalign.memory import MemoryStore
from personalign.memory.supersession import factor_key, same_context, supersession


def test_factor_keys_compare_content_words_as_a_set() -> None:
    assert factor_key("Professor Ines Okafor") == "ines okafor professor"
    assert factor_key("okafor, Okafor professor INES") == "ines okafor professor"
    assert factor_key("") == ""


def test_same_context_by_factor_key_or_without_one_by_category() -> None:
    assert same_context("okafor", "style", "okafor", "tone")  # a factor: the category does not matter
    assert not same_context("okafor", "style", "lin", "style")
    assert same_context("", "tone", "", "tone")
    assert not same_context("", "tone", "", "style")  # factor-less: grouped by category
    assert not same_context("okafor", "tone", "", "tone")
    assert not same_context("", "tone", "okafor", "tone")


def test_the_later_valid_from_stays_current_and_a_tie_goes_to_the_new_memory() -> None:
    assert supersession(new_id=7, new_from=5.0, rival_id=3, rival_from=2.0) == (3, 7, 5.0)
    assert supersession(new_id=7, new_from=2.0, rival_id=3, rival_from=5.0) == (7, 3, 5.0)
    assert supersession(new_id=7, new_from=4.0, rival_id=3, rival_from=4.0) == (3, 7, 4.0)


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    s = MemoryStore(tmp_path / "m.sqlite")
    s.add_user("ana")
    return s


def test_store_a_tie_in_valid_from_goes_to_the_newer_memory(store: MemoryStore) -> None:
    first = store.add_memory("ana", "Lead with counts.", context_factor="Professor Okafor", valid_from=4)
    second = store.add_memory(
        "ana", "Lead with the summary.", context_factor="okafor professor", valid_from=4
    )
    assert [m.id for m in store.memories("ana")] == [second.id]
    every = {m.id: m for m in store.memories("ana", include_superseded=True)}
    assert every[first.id].superseded_by == second.id and every[first.id].valid_to == 4


def test_store_factor_less_memories_supersede_only_within_their_category(store: MemoryStore) -> None:
    tone = store.add_memory("ana", "Keep it light.", category="tone", valid_from=1)
    style = store.add_memory("ana", "Use bullet points.", category="style", valid_from=2)
    assert {m.id for m in store.memories("ana")} == {tone.id, style.id}
    tone2 = store.add_memory("ana", "Keep it formal.", category="Tone", valid_from=3)
    assert {m.id for m in store.memories("ana")} == {style.id, tone2.id}
    # a factor-less memory and one with a factor never share a context, even in one category
    factor = store.add_memory(
        "ana", "Be brief with Lin.", category="tone", context_factor="Dr Lin", valid_from=4
    )
    assert {m.id for m in store.memories("ana")} == {style.id, tone2.id, factor.id}
    assert [m.id for m in store.memory_chain("ana", tone2.id)] == [tone.id, tone2.id]
    assert [m.id for m in store.memory_chain("ana", style.id)] == [style.id]
