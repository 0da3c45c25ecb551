"""The user's cache folder, which every on-disk cache of personalign lives under."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$PERSONALIGN_CACHE_DIR``, else ``$XDG_CACHE_HOME/personalign``, else ``~/.cache/personalign``
    (read on every call, so a changed environment applies at once)."""
    root = os.environ.get("PERSONALIGN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "personalign"
    )
    return Path(root)
