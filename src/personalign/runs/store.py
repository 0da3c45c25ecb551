"""The run directory: `manifest.json`, `samples.jsonl` (append-only) and `summary.json`.

`samples.jsonl` gets one line per finished instance, flushed as it finishes; a later line for
the same instance id supersedes an earlier one (resume, retry of errors). A line cut short by
a killed process is ignored when reading.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.runs.records import InstanceRecord

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SUMMARY = "summary.json"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (write a temp file, then rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def samples_path(self) -> Path:
        return self.path / SAMPLES

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def read_manifest(self) -> dict[str, Any]:
        if not self.exists():
            raise ConfigError(f"{self.path} is not a run directory (no {MANIFEST})")
        data: dict[str, Any] = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.manifest_path, manifest)

    def read_summary(self) -> dict[str, Any] | None:
        if not self.summary_path.exists():
            return None
        data: dict[str, Any] = json.loads(self.summary_path.read_text(encoding="utf-8"))
        return data

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.summary_path, summary)

    def drop_partial_line(self) -> bool:
        """Cut a last line left unfinished by a killed process; returns whether one was cut."""
        if not self.samples_path.exists():
            return False
        data = self.samples_path.read_bytes()
        if not data or data.endswith(b"\n"):
            return False
        keep = data.rfind(b"\n") + 1
        with self.samples_path.open("r+b") as handle:
            handle.truncate(keep)
        return True

    def append(self, record: InstanceRecord) -> None:
        line = record.model_dump_json() + "\n"
        with self.samples_path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()  # on disk for any later reader, even if this process is killed next

    def records(self) -> dict[str, InstanceRecord]:
        """Latest record per instance id, in first-seen order."""
        latest: dict[str, InstanceRecord] = {}
        if not self.samples_path.exists():
            return latest
        with self.samples_path.open(encoding="utf-8") as handle:
            lines = handle.readlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = InstanceRecord.model_validate_json(line)
            except ValueError:
                if number == len(lines) and not line.endswith("\n"):
                    warnings.warn(f"{self.samples_path}: ignoring a truncated last line", stacklevel=2)
                    continue
                raise ConfigError(
                    f"{self.samples_path}, line {number}: not a valid instance record"
                ) from None
            latest[record.instance_id] = record
        return latest
