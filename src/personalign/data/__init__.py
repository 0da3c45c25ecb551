"""Dataset loaders: one module per benchmark, reading the hub (online) or local files."""

from personalign.data.cupid import load_cupid

__all__ = ["load_cupid"]
