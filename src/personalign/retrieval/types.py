"""A search hit and the one top-k rule every index uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Hit:
    """Position of a retrieved unit in the indexed list, and its score (higher is better)."""

    index: int
    score: float


def top_k(scores: npt.NDArray[np.floating], k: int, *, min_score: float | None = None) -> list[Hit]:
    """The ``k`` best positions, best first; equal scores keep corpus order (earlier first).

    ``min_score`` drops hits scoring at or below it (BM25 uses 0.0: a unit sharing no query term
    is not a hit).
    """
    if k <= 0 or scores.size == 0:
        return []
    k = min(k, scores.size)
    if k < scores.size:
        # Partition on the k-th best score, then keep everything tied with it so ties resolve by position.
        kth = np.partition(scores, scores.size - k)[scores.size - k]  # the k-th best score
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(scores.size)
    order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    hits = [Hit(int(i), float(scores[i])) for i in order]
    if min_score is not None:
        hits = [h for h in hits if h.score > min_score]
    return hits
