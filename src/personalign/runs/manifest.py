"""Run manifests: what was run, with which models, prompts, data, code and seed."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PACKAGES = ("pydantic", "httpx", "numpy", "pyarrow", "typer", "rich", "llama-cpp-python", "datasets")


def versions_of(names: Iterable[str]) -> dict[str, str | None]:
    """Each installed distribution's version (None when it is not installed)."""
    # importlib.metadata (~15 ms) is imported when a manifest is written: the finished-run check of a
    # re-run only hashes the identity (start-up speed)
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def package_versions() -> dict[str, str | None]:
    from personalign._version import __version__  # reads the installed metadata: only when written

    return {"personalign": __version__, "python": platform.python_version(), **versions_of(PACKAGES)}


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    revision = out.stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=here,
        capture_output=True,
        text=True,
        check=False,
    )
    return revision + ("-dirty" if dirty.stdout.strip() else "")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def identity_hash(identity: dict[str, Any]) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def identity_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable list of fields that differ between two identities."""
    diffs: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs.extend(identity_diff(a, b, f"{prefix}{key}."))
        elif a != b:
            diffs.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return diffs


def environment() -> dict[str, Any]:
    return {
        "packages": package_versions(),
        "git_revision": git_revision(),
        "platform": platform.platform(),
    }
