"""A persistent embedding cache: the same text under the same embedder is encoded once.

Dense retrieval re-encodes every history on each run (minutes per thousand users on CPU); with
this cache, the second and later runs (another K, another unit size shares the texts it can) read
the vectors back. Keys are sha256 of the text; rows are float32 bytes per embedder name.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from personalign.retrieval.dense import Embedder, Matrix


class EmbeddingCache:
    """SQLite store of (embedder name, text hash) -> float32 vector."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key TEXT NOT NULL,"
                " dim INTEGER NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, key))"
            )
            self._conn.commit()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vec FROM vectors WHERE model = ? AND key IN ({marks})",
                    [model, *chunk],
                ).fetchall()
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, model: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO vectors (model, key, dim, vec) VALUES (?, ?, ?, ?)",
                [(model, k, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes()) for k, v in items],
            )
            self._conn.commit()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class CachedEmbedder:
    """Wraps an `Embedder`: vectors come from the cache when present; only misses are encoded."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache) -> None:
        self.inner = embedder
        self.cache = cache
        self.name = embedder.name
        self.dim = embedder.dim
        self.hits = 0
        self.misses = 0

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        keys = [EmbeddingCache.key(t) for t in texts]
        found = self.cache.get_many(self.name, sorted(set(keys)))
        missing = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        for i, k in enumerate(keys):
            if k in found:
                out[i] = found[k]
        if missing:
            fresh = self.inner.encode([texts[i] for i in missing])
            out[missing] = fresh
            self.cache.put_many(self.name, [(keys[i], fresh[j]) for j, i in enumerate(missing)])
        return out
