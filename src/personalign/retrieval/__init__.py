"""Retrieval building blocks shared by the benchmarks and the memory engine.

Lexical search (BM25 via ``bm25s``, or Okapi BM25 as ``rank_bm25`` scores it), dense search (exact
dot products over embeddings from an offline embedding model, or Contriever) and rank fusion.
Everything here works on plain lists of strings and returns positions into them, so callers keep
their own records.
"""

from personalign.retrieval.cache import CachedEmbedder, EmbeddingCache
from personalign.retrieval.dense import (
    DEFAULT_EMBEDDER,
    ContrieverEmbedder,
    DenseIndex,
    Embedder,
    HashingEmbedder,
    MiniLMOnnxEmbedder,
    MiniLMQ8Embedder,
    SentenceTransformerEmbedder,
    load_embedder,
)
from personalign.retrieval.fusion import reciprocal_rank_fusion
from personalign.retrieval.lexical import BM25Index, IncrementalBM25, tokenize
from personalign.retrieval.okapi import OkapiBM25Index, whitespace_tokenize
from personalign.retrieval.types import Hit, top_k

__all__ = [
    "DEFAULT_EMBEDDER",
    "BM25Index",
    "CachedEmbedder",
    "ContrieverEmbedder",
    "DenseIndex",
    "Embedder",
    "EmbeddingCache",
    "HashingEmbedder",
    "Hit",
    "IncrementalBM25",
    "MiniLMOnnxEmbedder",
    "MiniLMQ8Embedder",
    "OkapiBM25Index",
    "SentenceTransformerEmbedder",
    "load_embedder",
    "reciprocal_rank_fusion",
    "tokenize",
    "top_k",
    "whitespace_tokenize",
]
