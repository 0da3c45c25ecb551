"""A static (lookup-table) embedder distilled from the local MiniLM with ``model2vec``.

Each WordPiece token of the bundled MiniLM tokenizer is run once through the int8 ONNX MiniLM (as
``[CLS] token [SEP]``, mean-pooled), the table is reduced with PCA and down-weighted for frequent
tokens (SIF over the Zipf rank, as model2vec does), and a query is then the normalised mean of its
tokens' rows: ~0.1 ms instead of ~7 ms of transformer per query, at some retrieval quality (docs/serve.md).
The table is distilled once (~1 min on one core) into the user cache dir and loaded from there after.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from personalign.errors import ConfigError
from personalign.retrieval.extras import import_extra
from personalign.userdirs import cache_root

Matrix = npt.NDArray[np.float32]

STATIC_DIMS = 256
SIF_COEFFICIENT = 1e-4
_BATCH = 512


def static_cache_dir() -> Path:
    """Where distilled tables live: ``static-embedders`` in the user cache dir (``cache_root()``)."""
    return cache_root() / "static-embedders"


def post_process(raw: Matrix, dims: int, sif_coefficient: float | None = SIF_COEFFICIENT) -> Matrix:
    """PCA of the token table to ``dims`` columns (sign fixed so the largest |score| is positive) and
    SIF weighting by token rank: pure numpy, deterministic."""
    table = np.asarray(raw, dtype=np.float64)
    n, width = table.shape
    dims = min(dims, width)
    if n > dims:
        centred = table - table.mean(axis=0)
        _, eigvecs = np.linalg.eigh(centred.T @ centred / max(n - 1, 1))
        components = eigvecs[:, ::-1][:, :dims]
        table = centred @ components
        peaks = np.argmax(np.abs(table), axis=0)
        table = table * np.sign(table[peaks, np.arange(dims)])
    if sif_coefficient is not None:
        inv_rank = 1.0 / np.arange(2, n + 2)
        proba = inv_rank / inv_rank.sum()
        table = table * (sif_coefficient / (sif_coefficient + proba))[:, None]
    return table.astype(np.float32)


def token_table(
    pool: Callable[[npt.NDArray[np.int64]], Matrix], vocab_size: int, cls: int, sep: int
) -> Matrix:
    """One pooled row per token id, from ``pool`` over ``[cls, id, sep]`` rows in batches."""
    rows: list[Matrix] = []
    for start in range(0, vocab_size, _BATCH):
        ids = np.arange(start, min(start + _BATCH, vocab_size), dtype=np.int64)
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        rows.append(np.asarray(pool(batch), dtype=np.float32))
    return np.nan_to_num(np.concatenate(rows, axis=0))


def _import_model2vec() -> Any:
    return import_extra("model2vec", embedder="static", extra="static")


class StaticEmbedder:
    """A model2vec ``StaticModel`` behind the ``Embedder`` protocol (rows L2-normalised)."""

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        self.name = name
        self.dim = int(model.dim)

    @classmethod
    def load_or_distill(
        cls,
        directory: Path | None = None,
        *,
        teacher: Callable[[], Any],
        teacher_name: str,
        dims: int = STATIC_DIMS,
    ) -> StaticEmbedder:
        """Load the table distilled from the teacher named ``teacher_name`` (a MiniLM-like embedder
        with ``tokenizer`` and ``pool_ids``, built by ``teacher()`` only when the table is absent)."""
        model2vec = _import_model2vec()
        tag = f"{teacher_name.replace('@', '-')}-d{dims}"
        path = (directory or static_cache_dir()) / tag
        if not (path / "model.safetensors").is_file():
            print(f"distilling the static embedder into {path} (once; ~1 min)", file=sys.stderr)
            distill(teacher(), dims=dims).save_pretrained(path)
        try:
            model = model2vec.StaticModel.from_pretrained(str(path), normalize=True)
        except Exception as exc:
            raise ConfigError(
                f"{path}: cannot load the static embedder ({exc}); delete the folder to redo it"
            ) from exc
        return cls(model, f"static:{tag}")

    def encode(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = self._model.encode(list(texts), show_progress_bar=False)
        return np.ascontiguousarray(rows, dtype=np.float32)


def distill(teacher: Any, *, dims: int = STATIC_DIMS) -> Any:
    """A model2vec ``StaticModel`` distilled from ``teacher`` (a ``MiniLMOnnxEmbedder``)."""
    model2vec = _import_model2vec()
    tokenizer = teacher.tokenizer
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise ConfigError("the MiniLM tokenizer has no [CLS]/[SEP] token; cannot distill")
    vocab_size = tokenizer.get_vocab_size()
    table = post_process(token_table(teacher.pool_ids, vocab_size, cls_id, sep_id), dims)
    config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": teacher.name,
        "apply_pca": dims,
        "sif_coefficient": SIF_COEFFICIENT,
        "hidden_dim": int(table.shape[1]),
        "seq_length": 1000000,
        "normalize": True,
        "pooling": "mean",
    }
    return model2vec.StaticModel(
        vectors=table, tokenizer=tokenizer, config=config, normalize=True, base_model_name=teacher.name
    )
