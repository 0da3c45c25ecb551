"""BM25 over short texts with ``bm25s`` (sparse, numpy backend)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from personalign.retrieval.types import Hit, top_k

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# A small English stopword list: enough to keep "the"/"my"/"is" from dominating short utterances.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    i'm i've i'd i'll it's that's what's don't doesn't didn't can't won't isn't"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Lower-cased word tokens without stopwords; the same function indexes and queries."""
    return [t for t in _WORD.findall(text.lower()) if t not in stopwords]


class BM25Index:
    """A BM25 index over ``texts``; :meth:`search` returns positions into that list.

    Parameters are the usual Okapi ones (``k1``, ``b``). Units that share no term with the query score
    0 and are never returned, so a search may return fewer than ``k`` hits.
    """

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        self.size = len(texts)
        self._retriever: bm25s.BM25 | None = None
        if self.size:
            corpus = [tokenize(t) or [""] for t in texts]
            self._retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
            self._retriever.index(corpus, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every indexed unit for ``query`` (zeros when nothing matches)."""
        terms = self._known_terms(query)
        if not terms:
            return np.zeros(self.size, dtype=np.float32)
        assert self._retriever is not None
        return np.asarray(self._retriever.get_scores(terms), dtype=np.float32)

    def _known_terms(self, query: str) -> list[str]:
        if self._retriever is None:
            return []
        return [t for t in tokenize(query) if t in self._retriever.vocab_dict]

    def search(self, query: str, k: int) -> list[Hit]:
        """The ``k`` best-scoring units for ``query``, best first."""
        if not self._known_terms(query):  # nothing can score above 0: skip scoring every unit
            return []
        return top_k(self.scores(query), k, min_score=0.0)


class IncrementalBM25:
    """BM25 that takes new documents without a rebuild: the same scores as :class:`BM25Index`.

    It keeps term statistics (postings with term counts, document lengths) instead of a precomputed
    score matrix and scores each query from them, so adding a document costs only its own tokens
    and a query costs the postings of its terms. The arithmetic follows ``bm25s``'s Lucene variant
    step by step (float32 idf and accumulation), so scores equal a fresh :class:`BM25Index` over the
    same texts, bit for bit, and rankings (ties included) agree.
    """

    def __init__(self, texts: Sequence[str] = (), *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.size = 0
        self._total = 0  # sum of document lengths (tokens)
        self._lengths: list[int] = []
        self._postings: dict[str, tuple[list[int], list[int]]] = {}  # term -> (documents, counts)
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        self._length_array: npt.NDArray[np.int64] | None = None
        self.add(texts)

    def add(self, texts: Iterable[str]) -> None:
        """Append documents (their positions follow the existing ones)."""
        for text in texts:
            tokens = tokenize(text) or [""]  # as BM25Index: an empty unit still counts one token
            for term, count in Counter(tokens).items():
                docs, counts = self._postings.setdefault(term, ([], []))
                docs.append(self.size)
                counts.append(count)
                self._arrays.pop(term, None)
            self._lengths.append(len(tokens))
            self._total += len(tokens)
            self.size += 1
            self._length_array = None

    def _postings_of(self, term: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        cached = self._arrays.get(term)
        if cached is None:
            docs, counts = self._postings[term]
            cached = self._arrays[term] = (
                np.array(docs, dtype=np.int64),
                np.array(counts, dtype=np.float32),
            )
        return cached

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """BM25 score of every indexed unit for ``query`` (zeros when nothing matches)."""
        out = np.zeros(self.size, dtype=np.float32)
        terms = [t for t in tokenize(query) if t in self._postings]
        if not terms:
            return out
        if self._length_array is None:
            self._length_array = np.array(self._lengths, dtype=np.int64)
        n = self.size
        average = np.float64(self._total) / n  # == the mean of the lengths (an exact integer sum)
        k1, b = self.k1, self.b
        for term in terms:  # query order, repeats included, as bm25s accumulates
            docs, counts = self._postings_of(term)
            df = len(docs)
            idf = np.float32(math.log(1 + (n - df + 0.5) / (df + 0.5)))
            tfc = counts / (k1 * ((1 - b) + b * self._length_array[docs] / average) + counts)
            out[docs] += (idf * tfc).astype(np.float32)
        return out

    def search(self, query: str, k: int) -> list[Hit]:
        """The ``k`` best-scoring units for ``query``, best first (ties by position)."""
        if not any(t in self._postings for t in tokenize(query)):
            return []
        return top_k(self.scores(query), k, min_score=0.0)
