"""personalign: measure and improve how LLM assistants personalize from what users reveal over time."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("personalign")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
