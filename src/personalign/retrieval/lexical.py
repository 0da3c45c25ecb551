"""BM25 over short texts with ``bm25s`` (sparse, numpy backend)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

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
