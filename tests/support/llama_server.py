"""Start the real OpenAI-compatible llama.cpp server with the bundled SmolLM2 model on a loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from personalign.llm.backends.llama_local import resolve_model_path

ALIAS = "smollm2"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def llama_server(n_ctx: int = 8192, timeout: float = 60.0) -> Iterator[str]:
    """Yield the server's base URL (``http://127.0.0.1:PORT/v1``); stop it by PID afterwards."""
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(resolve_model_path("smollm2")),
        "--model_alias", ALIAS,
        "--n_threads", "2", "--n_threads_batch", "2", "--n_ctx", str(n_ctx), "--flash_attn", "true",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    # The server logs a lot; a file (not a pipe nobody reads) keeps it from blocking.
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                err = Path(log.name).read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode}: {err}")
            try:
                if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not become ready")
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        os.unlink(log.name)


def spec_for(base_url: str, **options: str) -> str:
    """A model spec for the server; llama-cpp-python's server takes schemas as json_object."""
    query = "&".join(
        f"{k}={v}" for k, v in {"schema_mode": "json_object", "timeout": "600", **options}.items()
    )
    return f"openai-compat/{ALIAS}@{base_url}?{query}"
