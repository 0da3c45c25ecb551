"""Rank fusion: combine several ranked lists without calibrating their scores."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[K]], *, k: int = 60) -> list[tuple[K, float]]:
    """Reciprocal rank fusion (Cormack et al., 2009): ``score(d) = sum 1 / (k + rank)``, rank from 1.

    Returns ``(item, score)`` best first; ties keep the order in which items were first seen.
    """
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    first_seen = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))
