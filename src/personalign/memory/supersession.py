"""Supersession rules, pure: which preferences share a context, and which of two is current.

The store applies them inside its write transaction; keeping them here lets them be tested (and
mutation-tested) without SQLite.
"""

from __future__ import annotations

from personalign.retrieval.lexical import tokenize


def factor_key(factor: str) -> str:
    """The normalised form under which context factors compare: content words, sorted, deduplicated.

    "Professor Ines Okafor" and "professor okafor ines" share a key; "Brookfield Science Olympiad
    Team" and "Brookfield High PTA" do not.
    """
    return " ".join(sorted(set(tokenize(factor))))


def same_context(key_a: str, category_a: str, key_b: str, category_b: str) -> bool:
    """Two preferences share a context when their factor keys match; with no factor, their categories."""
    return key_a == key_b and (bool(key_a) or category_a == category_b)


def supersession(new_id: int, new_from: float, rival_id: int, rival_from: float) -> tuple[int, int, float]:
    """(superseded id, superseding id, end of the superseded one's validity) for two same-context
    preferences: the later ``valid_from`` stays current; on a tie the newly stored memory does."""
    if rival_from <= new_from:
        return rival_id, new_id, new_from
    return new_id, rival_id, rival_from
