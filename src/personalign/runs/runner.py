"""Async execution of a benchmark over its instances, with resume and a clean budget stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from personalign.errors import ConfigError
from personalign.llm.usage import UsageTracker
from personalign.runs.manifest import identity_diff, now
from personalign.runs.records import InstanceRecord, RunOutcome, StepRecord
from personalign.runs.store import RunDir, ensure_directory

InstanceT = TypeVar("InstanceT")
InstanceT_contra = TypeVar("InstanceT_contra", contravariant=True)


class Evaluator(Protocol[InstanceT_contra]):
    """What the runner needs from a benchmark."""

    def instance_id(self, instance: InstanceT_contra) -> str: ...

    async def evaluate(
        self, instance: InstanceT_contra, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord: ...


class Deferred(BaseException):
    """Raised by a model call whose reply is not there yet (batch mode, runs/batching.py): the
    instance is not written this pass and is evaluated again once the reply has come. A
    BaseException, so no step or evaluator records it as a failure."""


def open_run(run_dir: RunDir, manifest: dict[str, Any], *, resume: bool = True) -> bool:
    """Create the run directory, or check that an existing one has the same identity.

    Returns True when resuming. The identity (benchmark, config, models, data, seed) must
    match; selection options such as --limit may differ.
    """
    if run_dir.exists():
        old = run_dir.read_manifest()
        if old.get("identity") != manifest["identity"]:
            diffs = identity_diff(old.get("identity", {}), manifest["identity"])
            raise ConfigError(
                f"{run_dir.path} holds a run with another configuration ({'; '.join(diffs[:5])}); "
                "pick another --run-dir"
            )
        if not resume:
            raise ConfigError(f"{run_dir.path} already holds this run; use --resume to continue it")
        merged = {**old, "updated": now(), "environment": manifest.get("environment", old.get("environment"))}
        run_dir.write_manifest(merged)
        run_dir.drop_partial_line()
        return True
    run_dir.write_manifest({**manifest, "created": now()})
    return False


@contextmanager
def locked_run(run_dir: RunDir, manifest: dict[str, Any], *, resume: bool = True) -> Iterator[bool]:
    """Lock the run directory for the block and open the run in it (`open_run`); yields whether resuming.

    A second process on the same directory is refused at once (`RunLockedError`). When the block
    fails before any instance was saved, whatever this call created (directories, manifest, lock
    file) is removed again, so a refused run leaves nothing behind.
    """
    created = ensure_directory(run_dir.path)
    had_manifest, had_lock = run_dir.manifest_path.exists(), run_dir.lock_path.exists()
    with run_dir.lock():
        try:
            yield open_run(run_dir, manifest, resume=resume)
        except BaseException:
            if not had_manifest and not run_dir.samples_path.exists():
                _discard(run_dir, created, keep_lock=had_lock)
            raise


def _discard(run_dir: RunDir, created: Sequence[Path], *, keep_lock: bool) -> None:
    """Remove what a refused run created: its manifest, its lock file and the directories it made."""
    paths = [run_dir.manifest_path, run_dir.summary_path] + ([] if keep_lock else [run_dir.lock_path])
    for path in paths:
        with suppress(OSError):
            path.unlink(missing_ok=True)
    for directory in created:  # innermost first; stops at the first that is not empty
        try:
            directory.rmdir()
        except OSError:
            break


class Runner(Generic[InstanceT]):
    def __init__(
        self,
        evaluator: Evaluator[InstanceT],
        run_dir: RunDir,
        tracker: UsageTracker,
        *,
        concurrency: int = 8,
        on_done: Callable[[InstanceRecord], None] | None = None,
        on_skipped: Callable[[int], None] | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.run_dir = run_dir
        self.tracker = tracker
        self.concurrency = max(1, concurrency)
        self.on_done = on_done
        self.on_skipped = on_skipped

    def pending(self, instances: Sequence[InstanceT]) -> tuple[list[InstanceT], dict[str, InstanceRecord]]:
        existing = self.run_dir.records()
        todo = [
            i
            for i in instances
            if existing.get(self.evaluator.instance_id(i)) is None
            or existing[self.evaluator.instance_id(i)].status != "ok"
        ]
        return todo, existing

    async def run(self, instances: Sequence[InstanceT], only: Collection[str] | None = None) -> RunOutcome:
        """Evaluate the unfinished `instances` (of them, only the ids in `only` when given) and
        report on all of them."""
        todo, existing = self.pending(instances)
        if only is not None:
            todo = [i for i in todo if self.evaluator.instance_id(i) in only]
        if self.on_skipped:
            self.on_skipped(len(instances) - len(todo))
        semaphore = asyncio.Semaphore(self.concurrency)
        stopped = asyncio.Event()
        evaluated = 0
        deferred: list[str] = []

        async def one(instance: InstanceT) -> None:
            nonlocal evaluated
            async with semaphore:
                if stopped.is_set():
                    return
                if (
                    self.tracker.max_cost_usd is not None
                    and self.tracker.cost_usd >= self.tracker.max_cost_usd
                ):
                    stopped.set()
                    return
                key = self.evaluator.instance_id(instance)
                previous = existing.get(key)
                try:
                    record = await self.evaluator.evaluate(instance, previous.steps if previous else None)
                except Deferred:
                    deferred.append(key)
                    return
                self.run_dir.append(record)
                existing[key] = record
                evaluated += 1
                if self.on_done:
                    self.on_done(record)

        tasks = [asyncio.ensure_future(one(i)) for i in todo]
        try:
            await asyncio.gather(*tasks)
        except (asyncio.CancelledError, KeyboardInterrupt):
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            selected = {self.evaluator.instance_id(i) for i in instances}
            return RunOutcome(
                "interrupted",
                evaluated,
                len(instances) - len(todo),
                {k: v for k, v in existing.items() if k in selected},
                deferred,
            )
        selected_ids = [self.evaluator.instance_id(i) for i in instances]
        records = {k: existing[k] for k in selected_ids if k in existing}
        if stopped.is_set():
            status = "stopped_budget"
        elif any(r.status != "ok" for r in records.values()):
            status = "complete_with_errors"
        else:
            status = "complete"
        return RunOutcome(status, evaluated, len(instances) - len(todo), records, deferred)
