"""The latency shortcuts keep the results of the straightforward rules they replace."""

from __future__ import annotations

import random

import numpy as np

from personalign.memory.entities import EntityIndex
from personalign.retrieval.types import top_k


def test_top_k_matches_a_full_stable_sort_with_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = rng.integers(0, 6, size=int(rng.integers(1, 40))).astype(np.float32)
        k = int(rng.integers(1, scores.size + 2))
        naive = sorted(range(scores.size), key=lambda i: (-scores[i], i))[:k]
        assert [h.index for h in top_k(scores, k)] == naive


def test_exact_order_is_first_named_name_then_newest_first() -> None:
    from personalign.memory.index import UserIndex

    rng = random.Random(0)
    index = UserIndex.__new__(UserIndex)
    n = 300
    times = [float(rng.randrange(50)) for _ in range(n)]
    seqs = list(range(n))
    rng.shuffle(seqs)
    index._times, index._seqs = np.array(times), np.array(seqs, dtype=np.int64)
    matched = {i: rng.randrange(3) for i in rng.sample(range(n), 120)}
    naive = sorted(matched, key=lambda i: (-matched[i], times[i], seqs[i]), reverse=True)
    assert index._exact_order(matched) == naive


def test_single_word_names_match_every_unit_holding_the_word() -> None:
    index = EntityIndex()
    index.add([[frozenset({"ines", "okafor"})], [frozenset({"okafor"})], [frozenset({"ines"})], []])
    assert index.matches([frozenset({"okafor"})]) == {0: 0, 1: 0}
    assert index.matches([frozenset({"ines", "okafor"}), frozenset({"ines"})]) == {0: 0, 2: 1}
