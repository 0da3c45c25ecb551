from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from personalign.benchmarks.hicupid.context import ContextOptions, Retrieval
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.retrieval import CachedEmbedder, EmbeddingCache, HashingEmbedder
from personalign.retrieval.dense import Matrix


class Counting(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.encoded: list[str] = []

    def encode(self, texts: Sequence[str]) -> Matrix:
        self.encoded.extend(texts)
        return super().encode(texts)


def test_cached_embedder_encodes_each_text_once_and_persists(tmp_path: Path) -> None:
    inner = Counting()
    cached = CachedEmbedder(inner, EmbeddingCache(tmp_path / "e.sqlite"))
    first = cached.encode(["red apples", "green pears", "red apples"])
    assert inner.encoded == ["red apples", "green pears", "red apples"]  # all missed the empty cache
    second = cached.encode(["green pears", "blue plums", "red apples"])
    assert inner.encoded[3:] == ["blue plums"]  # only the new text
    assert np.array_equal(second[0], first[1]) and np.array_equal(second[2], first[0])
    assert np.array_equal(second, HashingEmbedder(64).encode(["green pears", "blue plums", "red apples"]))
    assert (cached.hits, cached.misses) == (2, 4)
    # A new process (new objects, same file) reads the vectors back.
    again = Counting()
    reopened = CachedEmbedder(again, EmbeddingCache(tmp_path / "e.sqlite"))
    assert np.array_equal(reopened.encode(["blue plums"]), second[1:2])
    assert again.encoded == []
    # Another embedder never reads this one's vectors.
    other = CachedEmbedder(HashingEmbedder(32), EmbeddingCache(tmp_path / "e.sqlite"))
    assert other.encode(["blue plums"]).shape == (1, 32) and other.misses == 1
    assert cached.encode([]).shape == (0, 64)


def test_dense_retrieval_uses_the_cache_and_bounds_the_indexes_in_memory(tmp_path: Path) -> None:
    data = load_hicupid()
    options = ContextOptions(embedder="hash", embedding_cache=tmp_path / "e.sqlite", max_cached_users=2)
    retrieval = Retrieval("dense", "dialogue", 3, options)
    for user in (0, 1, 2, 1):
        retrieval.rank(data.history(user), "What should I cook tonight?", 3)
    assert list(retrieval._indexes) == [2, 1]  # user 0 evicted, user 1 most recent
    embedder = retrieval.embedder()
    assert isinstance(embedder, CachedEmbedder)
    # 3 users x 12 dialogues encoded once, plus the query once (then read back 3 times)
    assert (embedder.misses, embedder.hits) == (36 + 1, 3)
    fresh = Retrieval("dense", "dialogue", 3, options)
    ranked = fresh.rank(data.history(0), "What should I cook tonight?", 3)
    assert fresh.embedder().hits == 12 + 1  # type: ignore[attr-defined]
    assert ranked == Retrieval("dense", "dialogue", 3, ContextOptions(embedder="hash")).rank(
        data.history(0), "What should I cook tonight?", 3
    )
