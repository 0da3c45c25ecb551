"""OkapiBM25Index against rank_bm25.BM25Okapi itself: same scores, same top-k order (ties included)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from personalign.retrieval.okapi import OkapiBM25Index, whitespace_tokenize

rank_bm25 = pytest.importorskip("rank_bm25")


def official_top_k(texts: list[str], query: str, k: int) -> tuple[np.ndarray, list[int]]:
    """What the official HiCUPID code does: BM25Okapi over split() tokens, stable descending sort."""
    bm25 = rank_bm25.BM25Okapi([t.split() for t in texts])
    scores = bm25.get_scores(query.split())
    return scores, sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[:k]


def random_corpus(rng: random.Random, n_docs: int, vocab: list[str]) -> list[str]:
    docs = []
    for _ in range(n_docs):
        length = rng.choice([0, 1, 2, 3, 5, 8, 13, 30])
        sep = rng.choice([" ", "  ", "\n", "\t "])
        docs.append(sep.join(rng.choice(vocab) for _ in range(length)))
    return docs


@pytest.mark.parametrize("seed", range(40))
def test_scores_and_ranking_match_rank_bm25(seed: int) -> None:
    rng = random.Random(seed)
    # A small vocabulary makes common terms (negative idf -> epsilon floor) and many exact ties.
    vocab = [f"w{i}" for i in range(rng.choice([3, 6, 20, 200]))] + ["Cat", "cat", "cat.", "I'm"]
    texts = random_corpus(rng, rng.choice([1, 2, 5, 17, 60]), vocab)
    if not any(t.split() for t in texts):
        texts.append("w0")
    index = OkapiBM25Index(texts)
    for _ in range(10):
        query = " ".join(rng.choice([*vocab, "unknown"]) for _ in range(rng.randint(0, 6)))
        k = rng.choice([1, 3, 5, 25, 1000])
        expected_scores, expected_top = official_top_k(texts, query, k)
        ours = index.scores(query)
        np.testing.assert_allclose(ours, expected_scores, rtol=1e-12, atol=0)
        assert ours.tolist() == expected_scores.tolist()  # bit-identical: same operations, same order
        hits = index.search(query, k)
        assert [h.index for h in hits] == expected_top
        assert len(hits) == min(k, len(texts))  # always k, even when nothing matches


def test_ties_go_to_the_earlier_unit_and_k_is_always_returned() -> None:
    texts = ["apple pie", "banana split", "apple pie", "cherry", "apple pie"]
    hits = OkapiBM25Index(texts).search("apple", 4)
    assert [h.index for h in hits] == [0, 2, 4, 1]
    assert hits[3].score == 0.0  # a non-matching unit still fills the k slots, as the official code does


def test_tokens_are_whitespace_split_case_and_punctuation_kept() -> None:
    assert whitespace_tokenize(" I'm  a\tCat.\n") == ["I'm", "a", "Cat."]
    index = OkapiBM25Index(["the Cat.", "the cat", "a dog"])
    assert index.scores("cat")[0] == 0.0
    assert index.scores("cat")[1] > 0.0


def test_repeated_query_tokens_count_each_time() -> None:
    index = OkapiBM25Index(["red fish", "blue fish", "one fish two fish", "none here"])
    once, twice = index.scores("red"), index.scores("red red")
    np.testing.assert_array_equal(twice, once * 2)


def test_empty_corpus_and_all_empty_units() -> None:
    assert OkapiBM25Index([]).search("anything", 3) == []
    index = OkapiBM25Index(["", "  "])
    assert [h.index for h in index.search("x", 5)] == [0, 1]
    assert index.scores("x").tolist() == [0.0, 0.0]
