"""Importing the optional package an embedder needs, or a clear error naming the extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from personalign.errors import ConfigError


def import_extra(module: str, *, embedder: str, extra: str) -> Any:
    """``module``, imported; when it is missing, a ConfigError with the exact pip command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"embedder {embedder!r} needs {module}: pip install 'personalign[{extra}]' "
            "(or use --embedder minilm, the default)"
        ) from exc
