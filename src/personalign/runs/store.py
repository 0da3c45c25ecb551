"""The run directory: `manifest.json`, `samples.jsonl` (append-only) and `summary.json`.

`samples.jsonl` gets one line per finished instance, flushed as it finishes; a later line for
the same instance id supersedes an earlier one (resume, retry of errors). A line cut short by
a killed process is ignored when reading.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.redact import redact_text
from personalign.runs.records import InstanceRecord
from personalign.runs.schema import NewerSchemaError, RunManifest, RunSummary, validate_file

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SUMMARY = "summary.json"
LOCK = "run.lock"


class RunLockedError(ConfigError):
    """Another live process holds the run directory's lock."""


def io_error(path: Path, action: str, exc: OSError) -> ConfigError:
    """A clear error for a failed read or write of a run file: the path, the reason and what to do."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        hint = "free some disk space and re-run the same command to resume"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "pick a writable --run-dir"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        hint = "a file stands where a directory is needed; pick another --run-dir"
    else:
        hint = "check the path, or pick another --run-dir"
    return ConfigError(f"cannot {action} {path}: {reason}; {hint}")


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (write a temp file, then rename), credentials in any URL or spec redacted.

    A failed write (full disk, no permission) is a clear `ConfigError`.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = redact_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise io_error(path, "write", exc) from None


def read_json(path: Path, what: str) -> Any:
    """Parse a run file; undecodable or malformed JSON is a `ConfigError` naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise io_error(path, "read", exc) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: the {what} is corrupt ({exc})") from None


def ensure_directory(path: Path) -> list[Path]:
    """Create `path` (and missing parents) as a run directory; returns the directories it created.

    A file in the way, an unwritable or impossible place are `ConfigError`s naming the path.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} is a file, not a run directory; pick another --run-dir")
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise io_error(path, "create the run directory", exc) from None
    return missing


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

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def read_manifest(self) -> dict[str, Any]:
        """The manifest, checked against its `schema_version` (runs/schema.py); a missing, corrupt,
        malformed or too new one is a `ConfigError` (it identifies the run)."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"{self.path} is a file, not a run directory")
        if not self.exists():
            raise ConfigError(f"{self.path} is not a run directory (no {MANIFEST})")
        data = read_json(self.manifest_path, "run manifest")
        validate_file(RunManifest, data, self.manifest_path, "run manifest")
        return data  # type: ignore[no-any-return]  # a dict: validate_file checked it

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        ensure_directory(self.path)
        write_json(self.manifest_path, manifest)

    def read_summary(self) -> dict[str, Any] | None:
        """The stored summary; None when absent, corrupt or malformed (it is recomputed from the
        samples). A summary of a newer `schema_version` than this code reads is a `ConfigError`."""
        if not self.summary_path.exists():
            return None
        try:
            data = read_json(self.summary_path, "summary")
        except ConfigError as exc:
            warnings.warn(f"{exc}; ignoring it (it is recomputed from samples.jsonl)", stacklevel=2)
            return None
        if not isinstance(data, dict):
            warnings.warn(f"{self.summary_path}: not a JSON object; ignoring it", stacklevel=2)
            return None
        try:
            validate_file(RunSummary, data, self.summary_path, "summary")
        except NewerSchemaError:
            raise  # recomputing would overwrite it in an older format
        except ConfigError as exc:
            warnings.warn(f"{exc}; ignoring it (it is recomputed from samples.jsonl)", stacklevel=2)
            return None
        return data

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory's exclusive lock (`run.lock`, holding our pid) for the block.

        `flock` dies with its process, so a lock left by a killed process never blocks a resume.
        A second process is refused at once with a `RunLockedError` naming the holder's pid.
        """
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise io_error(self.lock_path, "create the lock file", exc) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                raise RunLockedError(
                    f"{self.path} is in use by another personalign process (pid {holder}); wait for it "
                    "to finish or stop it, or pick another --run-dir"
                ) from None
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as exc:
                raise io_error(self.lock_path, "write", exc) from None
            yield
        finally:
            os.close(fd)  # releases the flock

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.summary_path, summary)

    def drop_partial_line(self) -> bool:
        """Cut a last line left unfinished by a killed process; returns whether one was cut."""
        if not self.samples_path.exists():
            return False
        try:
            data = self.samples_path.read_bytes()
            if not data or data.endswith(b"\n"):
                return False
            keep = data.rfind(b"\n") + 1
            with self.samples_path.open("r+b") as handle:
                handle.truncate(keep)
        except OSError as exc:
            raise io_error(self.samples_path, "repair", exc) from None
        return True

    def append(self, record: InstanceRecord) -> None:
        line = redact_text(record.model_dump_json()) + "\n"
        try:
            with self.samples_path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()  # on disk for any later reader, even if this process is killed next
        except OSError as exc:
            raise io_error(self.samples_path, "append to", exc) from None

    def records(self) -> dict[str, InstanceRecord]:
        """Latest record per instance id, in first-seen order."""
        latest: dict[str, InstanceRecord] = {}
        if not self.samples_path.exists():
            return latest
        try:
            data = self.samples_path.read_bytes()
        except OSError as exc:
            raise io_error(self.samples_path, "read", exc) from None
        lines = data.split(b"\n")  # bytes: a line that is not UTF-8 is named, not a UnicodeDecodeError
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = InstanceRecord.model_validate_json(line)
            except ValueError:
                if number == len(lines):  # no newline after it: cut short by a killed process
                    warnings.warn(f"{self.samples_path}: ignoring a truncated last line", stacklevel=2)
                    continue
                raise ConfigError(
                    f"{self.samples_path}, line {number}: not a valid instance record (corrupt or not "
                    "UTF-8); remove that line to re-run its instance, or pick another --run-dir"
                ) from None
            latest[record.instance_id] = record
        return latest


def run_seed(manifest: Mapping[str, Any]) -> int:
    """The seed a run's manifest records (0 when absent): its bootstrap CIs are recomputed with it."""
    return int(manifest.get("seed", 0))


def load_run_summary(
    path: Path,
    benchmark: str,
    label: str,
    summarize: Callable[[dict[str, Any], Iterable[InstanceRecord]], dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A finished or interrupted run's manifest and summary, for a benchmark's report.

    `summarize(manifest, records)` computes the summary of an interrupted run (no summary.json yet)
    from the records it saved; that summary gets status "interrupted". A run of another benchmark
    is a ConfigError naming the path and `label`.
    """
    run = RunDir(path)
    manifest = run.read_manifest()
    if manifest.get("benchmark") != benchmark:
        raise ConfigError(f"{path}: not a {label} run")
    summary = run.read_summary()
    if summary is None:  # an interrupted run: compute from what was saved
        summary = summarize(manifest, run.records().values())
        summary["status"] = "interrupted"
    return manifest, summary
