"""The model layer: one async interface over every backend, with caching, retries and accounting.

Typical use::

    factory = ModelFactory(cache=CallCache(default_cache_path()))
    model = factory.get("openai-compat/qwen@http://localhost:8000/v1")
    completion = await model.complete(messages, GenerateConfig(max_tokens=256))

Names are imported on first use (module `__getattr__`, PEP 562): `personalign.llm.spec` is read
by every command (model labels, run directory names) and must not load the whole layer (sqlite3,
asyncio, the rate limiter) with it; a cached re-run of a finished run never builds a model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing only: the real imports happen lazily in __getattr__
    from personalign.llm.cache import CallCache, cache_key, default_cache_path
    from personalign.llm.factory import ModelFactory, build_backend
    from personalign.llm.model import Model, RetryPolicy
    from personalign.llm.pricing import PriceTable
    from personalign.llm.spec import EMBEDDED_DEFAULT, ModelSpec, parse_model_spec
    from personalign.llm.types import Completion, GenerateConfig, Usage
    from personalign.llm.usage import UsageTracker

# public name -> the module that defines it (imported on first access)
_LAZY: dict[str, str] = {
    "CallCache": "personalign.llm.cache",
    "cache_key": "personalign.llm.cache",
    "default_cache_path": "personalign.llm.cache",
    "ModelFactory": "personalign.llm.factory",
    "build_backend": "personalign.llm.factory",
    "Model": "personalign.llm.model",
    "RetryPolicy": "personalign.llm.model",
    "PriceTable": "personalign.llm.pricing",
    "EMBEDDED_DEFAULT": "personalign.llm.spec",
    "ModelSpec": "personalign.llm.spec",
    "parse_model_spec": "personalign.llm.spec",
    "Completion": "personalign.llm.types",
    "GenerateConfig": "personalign.llm.types",
    "Usage": "personalign.llm.types",
    "UsageTracker": "personalign.llm.usage",
}

__all__ = [
    "EMBEDDED_DEFAULT",
    "CallCache",
    "Completion",
    "GenerateConfig",
    "Model",
    "ModelFactory",
    "ModelSpec",
    "PriceTable",
    "RetryPolicy",
    "Usage",
    "UsageTracker",
    "build_backend",
    "cache_key",
    "default_cache_path",
    "parse_model_spec",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access and cache the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'personalign.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
