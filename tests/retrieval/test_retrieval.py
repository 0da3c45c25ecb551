import math

import numpy as np
import pytest

from personalign.errors import ConfigError
from personalign.retrieval import (
    BM25Index,
    DenseIndex,
    HashingEmbedder,
    Hit,
    load_embedder,
    reciprocal_rank_fusion,
    tokenize,
    top_k,
)


def test_top_k_orders_by_score_and_breaks_ties_by_position() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9], dtype=np.float32)
    assert [h.index for h in top_k(scores, 3)] == [1, 4, 0]
    assert [h.index for h in top_k(scores, 10)] == [1, 4, 0, 2, 3]
    assert top_k(scores, 0) == []
    assert [h.index for h in top_k(np.array([0.0, 2.0, 0.0]), 3, min_score=0.0)] == [1]


def test_tokenize_lowercases_and_drops_stopwords() -> None:
    assert tokenize("I don't like the Spicy food, my friend!") == ["like", "spicy", "food", "friend"]


def test_bm25_matches_the_lucene_formula_on_a_tiny_corpus() -> None:
    docs = ["apple banana", "apple apple cherry", "durian"]
    index = BM25Index(docs, k1=1.5, b=0.75)
    got = index.scores("apple")
    n, avgdl = 3, (2 + 3 + 1) / 3
    idf = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))

    def term(tf: int, dl: int) -> float:
        return idf * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))

    assert got == pytest.approx([term(1, 2), term(2, 3), 0.0], rel=1e-5)
    assert [h.index for h in index.search("apple", 5)] == [1, 0]  # durian shares no term: not a hit


def test_bm25_unknown_terms_and_empty_corpus_return_no_hits() -> None:
    assert BM25Index(["alpha beta"]).search("gamma", 3) == []
    assert BM25Index([]).search("anything", 3) == []
    assert BM25Index(["the a of"]).search("the", 1) == []  # only stopwords on both sides


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "a"], ["b"]], k=60)
    assert [item for item, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61 + 1 / 61)


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    emb = HashingEmbedder(256)
    a, b, c = emb.encode(["red wine with dinner", "red wine with dinner", "tax forms"])
    assert np.allclose(a, b)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert float(a @ c) < 0.5
    assert emb.encode([]).shape == (0, 256)


def test_dense_index_searches_by_text_or_vector() -> None:
    emb = HashingEmbedder(512)
    index = DenseIndex(emb, ["budget travel tips", "vegan dinner recipes", "vegan dessert recipes"])
    hits = index.search("vegan recipes", 2)
    assert {h.index for h in hits} == {1, 2}
    assert index.search(emb.encode(["budget travel tips"])[0], 1) == [Hit(0, pytest.approx(1.0, abs=1e-5))]
    assert DenseIndex(emb, []).search("x", 3) == []


def test_default_embedder_ranks_a_paraphrase_above_an_unrelated_text() -> None:
    emb = load_embedder()
    assert emb.dim == 384 and emb.name.startswith("minilm-onnx-int8@")
    vectors = emb.encode(
        ["I love hiking in the mountains", "My favourite pastime is trekking outdoors", "Taxes are due"]
    )
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1, 1, 1], abs=1e-4)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.3
    # Encoding is independent of batch composition (padding must not leak into the mean).
    alone = emb.encode(["I love hiking in the mountains"])[0]
    assert np.allclose(alone, vectors[0], atol=1e-4)


def test_bad_embedder_specs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="hash:<dimension>"):
        load_embedder("hash:many")
    with pytest.raises(ConfigError, match="empty"):
        load_embedder("  ")
