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
                digest.update(_file_sha256(file).encode())
    return digest.hexdigest()[:16]


_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    """sha256 of a file, read in chunks and remembered per (path, size, mtime) for the process:
    a full-rank adapter of an 8B model is over a gigabyte and specs are parsed more than once."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]
