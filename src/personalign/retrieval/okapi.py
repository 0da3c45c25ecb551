"""Okapi BM25 exactly as ``rank_bm25.BM25Okapi`` scores it, over whitespace tokens.

The HiCUPID paper's BM25 baseline indexes ``text.split()`` tokens (case kept, no stopwords) with
``rank_bm25.BM25Okapi`` (k1=1.5, b=0.75, epsilon=0.25: a term whose idf is negative gets
``epsilon * mean idf`` instead) and keeps the first k positions of a stable descending sort, so a
search always returns k hits (fewer only when the corpus is smaller) and ties go to the earlier unit.

This re-implementation keeps per-term postings so that a query touches only the units that contain
its terms, and performs the same float64 operations in the same order as ``rank_bm25``, so scores
are bit-identical (tests/retrieval/test_okapi.py checks it against ``rank_bm25`` itself).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from personalign.retrieval.types import Hit, top_k

K1 = 1.5
B = 0.75
EPSILON = 0.25


def whitespace_tokenize(text: str) -> list[str]:
    """``str.split()``: the official tokenization for both units and queries."""
    return text.split()


class OkapiBM25Index:
    """``rank_bm25.BM25Okapi`` over ``texts`` (tokenized with ``str.split``); positions into ``texts``."""

    def __init__(
        self, texts: Sequence[str], *, k1: float = K1, b: float = B, epsilon: float = EPSILON
    ) -> None:
        self.size = len(texts)
        self.k1, self.b, self.epsilon = k1, b, epsilon
        # Postings as one flat (term, unit, count) table sorted by term: a query term is a slice.
        term_ids: dict[str, int] = {}  # first-seen order, as rank_bm25 fills its idf dict
        terms: list[int] = []
        units: list[int] = []
        counts: list[int] = []
        doc_len = np.zeros(self.size, dtype=np.int64)
        total = 0
        for position, text in enumerate(texts):
            tokens = whitespace_tokenize(text)
            doc_len[position] = len(tokens)
            total += len(tokens)
            frequencies: dict[str, int] = {}
            for token in tokens:
                frequencies[token] = frequencies.get(token, 0) + 1
            for token, count in frequencies.items():
                terms.append(term_ids.setdefault(token, len(term_ids)))
                units.append(position)
                counts.append(count)
        term_array = np.asarray(terms, dtype=np.int64)
        order = np.argsort(term_array, kind="stable")
        self._units = np.asarray(units, dtype=np.int64)[order]
        self._counts = np.asarray(counts, dtype=np.int64)[order]
        doc_freq = np.bincount(term_array, minlength=len(term_ids))
        self._starts = np.concatenate(([0], np.cumsum(doc_freq)))
        self._term_ids = term_ids
        self.avgdl = total / self.size if self.size else 0.0
        self.idf = self._idf(dict(zip(term_ids, doc_freq.tolist(), strict=True)))
        # rank_bm25 recomputes this per query term as k1 * (1 - b + b * doc_len / avgdl); same operations.
        self._norm: npt.NDArray[np.float64] = np.zeros(self.size, dtype=np.float64)
        if self.avgdl > 0:
            self._norm = np.asarray(self.k1 * (1 - self.b + self.b * doc_len / self.avgdl), dtype=np.float64)

    def _idf(self, doc_freq: dict[str, int]) -> dict[str, float]:
        """log((N - n + 0.5) / (n + 0.5)) with rank_bm25's epsilon floor for negative values."""
        idf: dict[str, float] = {}
        idf_sum = 0.0
        negative = []
        for term, freq in doc_freq.items():
            value = math.log(self.size - freq + 0.5) - math.log(freq + 0.5)
            idf[term] = value
            idf_sum += value
            if value < 0:
                negative.append(term)
        if idf:
            eps = self.epsilon * (idf_sum / len(idf))
            for term in negative:
                idf[term] = eps
        return idf

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """The BM25 score of every unit for ``query`` (each occurrence of a query token counts)."""
        score = np.zeros(self.size, dtype=np.float64)
        if self.avgdl <= 0:  # every unit is empty: rank_bm25 divides by zero here; nothing can match
            return score
        for token in whitespace_tokenize(query):
            term = self._term_ids.get(token)
            weight = self.idf.get(token) or 0
            if term is None or not weight:
                continue  # rank_bm25 adds 0.0 to every unit
            lo, hi = self._starts[term], self._starts[term + 1]
            docs, tfs = self._units[lo:hi], self._counts[lo:hi]
            score[docs] += weight * (tfs * (self.k1 + 1) / (tfs + self._norm[docs]))
        return score

    def search(self, query: str, k: int) -> list[Hit]:
        """The first ``k`` units of a stable descending sort by score: always k (or every unit)."""
        return top_k(self.scores(query), k)
