"""The installed package's version, in a module of its own so the core can read it without
importing the package's public API (`personalign/__init__.py` re-exports it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("personalign")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
