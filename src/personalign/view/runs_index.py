"""Run directories as the viewer reads them: found under a root, read incrementally while written.

`samples.jsonl` is append-only, so a `RunIndex` keeps the byte offset it has parsed up to and only
reads what was appended since (a running evaluation shows its progress at every request); an
unfinished last line is left for the next read. Records stay plain dicts (validated only when one
instance is shown), so pages of thousands of instances stay fast.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.runs.schema import benchmark_of
from personalign.runs.store import MANIFEST, SAMPLES, SUMMARY

TYPE_KEYS = ("instance_type", "type", "domain")


def instance_type(record: dict[str, Any]) -> str:
    """The record's instance type (CUPID instance_type, HiCUPID type, BenchPreS domain), or ''."""
    meta = record.get("meta") or {}
    for key in TYPE_KEYS:
        if meta.get(key) is not None:
            return str(meta[key])
    return ""


def scores(record: dict[str, Any]) -> dict[str, float]:
    """The record's numeric scores as `task.score` -> value (booleans and text left out)."""
    out: dict[str, float] = {}
    for task, result in (record.get("results") or {}).items():
        for key, value in ((result or {}).get("scores") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{task}.{key}"] = float(value)
    return out


def record_status(record: dict[str, Any]) -> str:
    """`error` when any task result or step failed, else `ok`."""
    results = (record.get("results") or {}).values()
    steps = (record.get("steps") or {}).values()
    failed = any((r or {}).get("status") == "error" for r in [*results, *steps])
    return "error" if failed else "ok"


def disagree(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Two runs' records of one instance differ: in status or in any score both have."""
    if a is None or b is None:
        return a is not b
    if record_status(a) != record_status(b):
        return True
    sa, sb = scores(a), scores(b)
    return any(abs(sa[k] - sb[k]) > 1e-9 for k in sa.keys() & sb.keys())


@dataclass
class RunIndex:
    """One run directory: manifest, summary and the latest record per instance, kept up to date."""

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    _offset: int = 0
    _stamp: tuple[int, int] = (0, 0)
    _summary_stamp: tuple[int, int] = (0, 0)
    bad_lines: int = 0

    def refresh(self) -> RunIndex:
        """Read the manifest once, the summary when it changed, and the samples appended since."""
        if not self.manifest:
            self.manifest = _read_json(self.path / MANIFEST)
        summary_path = self.path / SUMMARY
        stamp = _stamp(summary_path)
        if stamp != self._summary_stamp:
            self._summary_stamp = stamp
            try:
                self.summary = _read_json(summary_path) if stamp != (0, 0) else None
            except ConfigError:
                self.summary = None  # being rewritten, or damaged: shown as "no summary"
        samples = self.path / SAMPLES
        stamp = _stamp(samples)
        if stamp == self._stamp:
            return self
        if stamp[0] < self._offset:  # truncated (a resume cut an unfinished line): read again
            self._offset, self.records = 0, {}
        self._stamp = stamp
        with samples.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                self.records[str(record["instance_id"])] = record
            except (ValueError, KeyError, TypeError):
                self.bad_lines += 1
        self._offset += end
        return self

    @property
    def benchmark(self) -> str:
        return benchmark_of(self.manifest)

    @property
    def expected(self) -> int | None:
        """Instances the data source holds (the run may select fewer)."""
        data = self.manifest.get("data") or {}
        n = data.get("n_instances")
        return int(n) if isinstance(n, int) else None

    @property
    def status(self) -> str:
        return str((self.summary or {}).get("status") or "running or interrupted")

    @property
    def n_errors(self) -> int:
        """Instances whose latest record has a failed step or task."""
        return sum(record_status(r) == "error" for r in self.records.values())

    def types(self) -> list[str]:
        return sorted({instance_type(r) for r in self.records.values()} - {""})


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


class RunsRoot:
    """Every run directory under `root` (any depth up to 4), each a cached `RunIndex` by its
    path relative to the root, which is its id in URLs."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._runs: dict[str, RunIndex] = {}

    def scan(self) -> dict[str, RunIndex]:
        """Find run directories (new ones appear while the viewer runs) and refresh them."""
        found: list[Path] = []
        if (self.root / MANIFEST).is_file():
            found.append(self.root)
        for depth in ("*", "*/*", "*/*/*", "*/*/*/*"):
            found.extend(p.parent for p in self.root.glob(f"{depth}/{MANIFEST}"))
        for path in sorted(set(found)):
            run_id = path.relative_to(self.root).as_posix() if path != self.root else "."
            if run_id not in self._runs:
                self._runs[run_id] = RunIndex(path)
        for run_id, run in list(self._runs.items()):
            try:
                run.refresh()
            except (ConfigError, OSError):
                del self._runs[run_id]  # removed or unreadable: drop it from the list
        return dict(sorted(self._runs.items()))

    def get(self, run_id: str) -> RunIndex | None:
        """The run `run_id` refreshed, or None when no such run directory is under the root."""
        run = self._runs.get(run_id)
        if run is None:
            self.scan()
            run = self._runs.get(run_id)
        if run is None:
            return None
        try:
            return run.refresh()
        except (ConfigError, OSError):
            return None
