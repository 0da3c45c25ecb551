"""personalign: measure and improve how LLM assistants personalize from what users reveal over time."""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """`__version__` is read from the installed metadata on first use (importlib.metadata costs
    ~40 ms, which every CLI start would pay)."""
    if name != "__version__":
        raise AttributeError(f"module 'personalign' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("personalign")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0.0.0+unknown"
