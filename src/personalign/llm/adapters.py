"""PEFT adapter directories as the hf/ backend reads them: the chain of adapters to merge, and the
hash of their weights that goes into the model identity (so a cache never mixes two trainings)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from personalign.errors import ConfigError

CHAIN_FILE = "personalign_chain.json"


def adapter_chain(adapter: str | Path) -> list[Path]:
    """The adapters to apply, outermost last: parents named in ``personalign_chain.json`` first."""
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ConfigError(f"{path}: not a PEFT adapter directory (no adapter_config.json)")
    chain_file = path / CHAIN_FILE
    parents: list[Path] = []
    if chain_file.is_file():
        try:
            data = json.loads(chain_file.read_text(encoding="utf-8"))
            parents = [Path(p) for p in data["merged_before"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{chain_file}: unreadable adapter chain ({exc})") from None
    return [*parents, path]


def adapter_digest(adapter: str | Path) -> str:
    """A short hash of the adapter chain's weights: part of the model identity, so cached replies of
    one training run are never served for another written to the same directory."""
    digest = hashlib.sha256()
    for part in adapter_chain(adapter):
        for name in ("adapter_model.safetensors", "adapter_model.bin", "adapter_config.json"):
            file = part / name
            if file.is_file():
                digest.update(name.encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
