"""Build a `Model` over an injected scripted backend, with fast retries, for unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from personalign.llm import CallCache, Model, ModelFactory, RetryPolicy, UsageTracker, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend

T = TypeVar("T")


def scripted_model(
    tmp_path: Path,
    backend: ScriptedBackend,
    *,
    tracker: UsageTracker | None = None,
    spec: str = "scripted/x",
) -> tuple[ModelFactory, Model]:
    # the factory looks injected backends up by the spec's canonical string (no options)
    backends: dict[str, Backend] = {str(parse_model_spec(spec)): backend}
    factory = ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), tracker=tracker, backends=backends)
    model = factory.get(spec)
    assert model.backend is backend
    model.retry = RetryPolicy(max_retries=model.spec.max_retries, base_delay=0.001, max_delay=0.002)
    return factory, model


def run(factory: ModelFactory, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro`, then close the factory's cache."""
    try:
        return asyncio.run(coro)
    finally:
        assert factory.cache is not None
        factory.cache.close()


def bundled_model_or_skip() -> Path:
    """The bundled SmolLM2 GGUF's path; the test is skipped where llama-cpp-python or the model
    package (the optional `local` install) is missing."""
    import pytest

    from personalign.llm.backends import llama_local

    pytest.importorskip("llama_cpp")
    try:
        return llama_local.resolve_model_path("smollm2")
    except Exception as exc:  # the bundled model is an optional install
        pytest.skip(f"bundled model unavailable: {exc}")
