"""`Selection.first`: the limit every benchmark's `select` applies after its own filters."""

from __future__ import annotations

from personalign.runs.spec import Selection


def test_first_takes_the_limit_or_everything() -> None:
    items = ("a", "b", "c")
    assert Selection(limit=2).first(items) == ["a", "b"]
    assert Selection(limit=0).first(items) == []
    assert Selection().first(items) == ["a", "b", "c"]
    assert Selection(limit=9).first(items) == ["a", "b", "c"]


def test_first_returns_a_new_list() -> None:
    items = ["a"]
    taken = Selection().first(items)
    taken.append("b")
    assert items == ["a"]
