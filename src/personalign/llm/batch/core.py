"""Provider-neutral batch machinery: requests, the result parser, the job journal and the runner.

A batch request is a direct call's request body under its cache key (``custom_id``). The
runner submits the requests that no job covers yet, polls the jobs with backoff, downloads
their result lines, and resubmits (only) the requests an expired, failed or cancelled job
left unanswered. Every step is written to a `BatchJournal` in a directory first, so a process
killed at any point resumes by polling the jobs it already submitted, never submitting twice.
Results map back to requests by ``custom_id`` alone, never by position.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.types import BackendResponse

log = logging.getLogger(__name__)

JobStatus = Literal["submitting", "running", "completed", "failed", "expired", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchRequest:
    """One call of a batch: the body a direct call would send, under its cache key."""

    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class BatchItem:
    """The result line of one request: an answer, or an error (resubmittable when `retryable`,
    e.g. the request expired with its job or hit a transient server error)."""

    custom_id: str
    response: BackendResponse | None = None
    error: str | None = None
    status_code: int | None = None
    retryable: bool = False

    @property
    def ok(self) -> bool:
        return self.response is not None


@dataclass(frozen=True)
class JobState:
    """A job as the provider reports it, in one vocabulary."""

    job_id: str
    status: JobStatus
    provider_status: str
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # e.g. output/error file ids, results URL
    error: str | None = None


class BatchProvider(Protocol):
    """One provider's batch API (`llm.batch.openai`, `llm.batch.anthropic`)."""

    name: str
    max_requests: int  # per job
    max_bytes: int  # per job (the serialized requests, approximately)

    async def submit(self, requests: Sequence[BatchRequest], tag: str) -> str:
        """Create a job for `requests`; `tag` marks it so `find` can recognise it later."""
        ...

    async def find(self, tag: str) -> str | None:
        """The id of a job created with `tag`, if the provider can tell (else None)."""
        ...

    async def poll(self, job_id: str) -> JobState: ...

    async def fetch(self, state: JobState) -> list[str]:
        """The job's result lines (answers and errors), as downloaded."""
        ...

    def parse_line(self, data: Any) -> BatchItem:
        """One result line (decoded JSON) as a `BatchItem`; raises KeyError/TypeError/ValueError
        when the line is malformed."""
        ...

    async def cancel(self, job_id: str) -> None: ...

    async def aclose(self) -> None: ...


# --- the result parser ------------------------------------------------------------------------


@dataclass
class ResultReport:
    """What a job's result lines said, matched to its requests by custom_id."""

    items: dict[str, BatchItem] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # asked for, no line
    unknown: list[str] = field(default_factory=list)  # lines for custom_ids not asked for
    duplicates: list[str] = field(default_factory=list)  # custom_ids with more than one line
    malformed: list[int] = field(default_factory=list)  # 1-based numbers of unreadable lines
    out_of_order: int = 0  # lines not in submission order (harmless: matched by custom_id)


def match_results(
    expected: Sequence[str], lines: Iterable[str], parse: Callable[[Any], BatchItem]
) -> ResultReport:
    """Map result lines back to `expected` custom_ids. A line never lands on another request:
    unknown ids, repeats and unreadable lines are reported, not used; of repeated lines an
    answer wins over an error."""
    report = ResultReport()
    position = {cid: i for i, cid in enumerate(expected)}
    last = -1
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = parse(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, ModelCallError):
            report.malformed.append(number)
            continue
        cid = item.custom_id
        if cid not in position:
            report.unknown.append(cid)
            continue
        if cid in report.items:
            report.duplicates.append(cid)
            if not report.items[cid].ok and item.ok:
                report.items[cid] = item
            continue
        if position[cid] < last:
            report.out_of_order += 1
        last = max(last, position[cid])
        report.items[cid] = item
    report.missing = [cid for cid in expected if cid not in report.items]
    return report


# --- the journal ------------------------------------------------------------------------------


@dataclass
class JobRecord:
    """One submission: written before the provider is asked, completed with its job id after."""

    tag: str
    custom_ids: list[str]
    status: JobStatus = "submitting"
    job_id: str | None = None
    collected: bool = False  # result lines downloaded to `<tag>.results.jsonl`
    submitted_at: float = 0.0
    provider_status: str | None = None
    error: str | None = None


class BatchJournal:
    """The jobs of one batch run, persisted as JSON in `directory` (rewritten atomically on every
    change), plus each collected job's result lines as ``<tag>.results.jsonl``."""

    FILE = "batch_journal.json"
    VERSION = 1

    def __init__(self, directory: str | Path, provider: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / self.FILE
        self.provider = provider
        self.jobs: list[JobRecord] = []
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") != self.VERSION:
                raise ConfigError(f"{self.path}: journal version {data.get('version')!r}, expected 1")
            if data.get("provider") != self.provider:
                raise ConfigError(
                    f"{self.path}: journal of provider {data.get('provider')!r}, not {self.provider!r}"
                )
            self.jobs = [JobRecord(**job) for job in data["jobs"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{self.path}: unreadable batch journal ({exc})") from None

    def save(self) -> None:
        payload = {"version": self.VERSION, "provider": self.provider, "jobs": [asdict(j) for j in self.jobs]}
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".journal-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def add(self, custom_ids: list[str]) -> JobRecord:
        record = JobRecord(tag=f"pa-{uuid.uuid4().hex[:16]}", custom_ids=custom_ids, submitted_at=time.time())
        self.jobs.append(record)
        self.save()
        return record

    def results_path(self, record: JobRecord) -> Path:
        return self.directory / f"{record.tag}.results.jsonl"

    def store_results(self, record: JobRecord, lines: list[str]) -> None:
        path = self.results_path(record)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(line.rstrip("\n") + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, path)
        record.collected = True
        self.save()

    def read_results(self, record: JobRecord) -> list[str]:
        return self.results_path(record).read_text(encoding="utf-8").splitlines()


class BatchPending(ModelCallError):
    """Jobs were still running when the runner stopped waiting; a later run resumes them."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


# --- the runner -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PollPolicy:
    """Poll every `initial` seconds, growing by `factor` up to `maximum`."""

    initial: float = 5.0
    factor: float = 1.5
    maximum: float = 120.0
    max_wait: float | None = None  # give up waiting (BatchPending) after this long; None = never
    max_failures: int = 10  # consecutive transient polling/download failures tolerated


@dataclass
class BatchOutcome:
    """Every requested custom_id's result, and what went wrong on the way."""

    items: dict[str, BatchItem]
    missing: list[str]  # no answer and no final error, after every resubmission
    unknown: list[str]
    duplicates: list[str]
    malformed: int
    out_of_order: int
    jobs: int  # jobs in the journal
    submitted: int  # jobs this call submitted
    resubmitted: int  # requests this call submitted again after an earlier job left them unanswered

    @property
    def errors(self) -> dict[str, BatchItem]:
        return {cid: item for cid, item in self.items.items() if not item.ok}


class BatchRunner:
    """Submits, polls, collects and resubmits through one provider, journaled in one directory."""

    def __init__(
        self,
        provider: BatchProvider,
        journal: BatchJournal,
        *,
        poll: PollPolicy | None = None,
        max_attempts: int = 3,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.provider = provider
        self.journal = journal
        self.poll = poll or PollPolicy()
        self.max_attempts = max_attempts
        self._sleep = sleep

    async def run(self, requests: Sequence[BatchRequest]) -> BatchOutcome:
        wanted = {r.custom_id: r for r in requests}
        await self._recover()
        submitted = resubmitted = 0
        while True:
            todo = self._uncovered(wanted)
            if todo:
                before = {cid for job in self.journal.jobs for cid in job.custom_ids}
                resubmitted += sum(cid in before for cid in todo)
                submitted += await self._submit([wanted[cid] for cid in todo])
            if not any(j.status not in TERMINAL or not j.collected for j in self._relevant(wanted)):
                break  # nothing running and nothing left that may be submitted
            await self._wait(wanted)
        return self._outcome(wanted, submitted, resubmitted)

    def _relevant(self, wanted: dict[str, BatchRequest]) -> list[JobRecord]:
        return [j for j in self.journal.jobs if any(cid in wanted for cid in j.custom_ids)]

    async def _recover(self) -> None:
        """Settle records of submissions a killed process may or may not have completed."""
        for record in list(self.journal.jobs):
            if record.status != "submitting" or record.job_id is not None:
                continue
            found = await self.provider.find(record.tag)
            if found is not None:
                record.job_id, record.status = found, "running"
                log.info("batch: job %s of an interrupted submission found", found)
            else:
                self.journal.jobs.remove(record)  # never reached the provider: submit again
            self.journal.save()

    def _uncovered(self, wanted: dict[str, BatchRequest]) -> list[str]:
        """Requested ids no job answers or will answer, that may still be (re)submitted."""
        pending: set[str] = set()
        settled: set[str] = set()
        attempts: Counter[str] = Counter()
        for job in self.journal.jobs:
            attempts.update(job.custom_ids)
            if job.status not in TERMINAL or not job.collected:
                pending.update(job.custom_ids)
                continue
            report = self._report(job)
            settled.update(cid for cid, item in report.items.items() if not item.retryable)
        return [
            cid
            for cid in wanted
            if cid not in pending and cid not in settled and attempts[cid] < self.max_attempts
        ]

    def _chunks(self, requests: list[BatchRequest]) -> list[list[BatchRequest]]:
        """Requests split at the provider's per-job limits of count and size."""
        chunks: list[list[BatchRequest]] = [[]]
        size = 0
        for request in requests:
            weight = len(json.dumps(request.body)) + len(request.custom_id) + 64
            current = chunks[-1]
            if current and (
                len(current) >= self.provider.max_requests or size + weight > self.provider.max_bytes
            ):
                chunks.append([])
                size = 0
            chunks[-1].append(request)
            size += weight
        return [chunk for chunk in chunks if chunk]

    async def _submit(self, requests: list[BatchRequest]) -> int:
        jobs = 0
        for chunk in self._chunks(requests):
            record = self.journal.add([r.custom_id for r in chunk])  # intent first: see `_recover`
            try:
                job_id = await self.provider.submit(chunk, record.tag)
            except Exception:
                # The job may exist even though its answer was lost: look before forgetting it.
                found = await self.provider.find(record.tag)
                if found is None:
                    self.journal.jobs.remove(record)
                    self.journal.save()
                    raise
                job_id = found
            record.job_id, record.status = job_id, "running"
            self.journal.save()
            log.info("batch: submitted job %s (%d requests)", record.job_id, len(chunk))
            jobs += 1
        return jobs

    async def _wait(self, wanted: dict[str, BatchRequest]) -> None:
        """Poll the unfinished jobs until each has ended and its results are stored."""
        delay = self.poll.initial
        started = time.monotonic()
        failures = 0
        while True:
            open_jobs = [j for j in self._relevant(wanted) if j.status not in TERMINAL or not j.collected]
            if not open_jobs:
                return
            for record in open_jobs:
                assert record.job_id is not None
                try:
                    state = await self.provider.poll(record.job_id)
                    record.provider_status, record.error = state.provider_status, state.error
                    if state.status in TERMINAL:
                        lines = await self.provider.fetch(state)
                        record.status = state.status
                        self.journal.store_results(record, lines)
                        log.info("batch: job %s %s, %d result lines", record.job_id, state.status, len(lines))
                    else:
                        self.journal.save()
                    failures = 0
                except ModelCallError as exc:
                    failures += 1
                    if not exc.retryable or failures > self.poll.max_failures:
                        raise
                    log.warning("batch: polling job %s failed (%s); trying again", record.job_id, exc)
            if any(j.status not in TERMINAL or not j.collected for j in open_jobs):
                if self.poll.max_wait is not None and time.monotonic() - started > self.poll.max_wait:
                    raise BatchPending(
                        f"batch jobs still running after {self.poll.max_wait:g}s; run again to resume "
                        f"(journal: {self.journal.path})"
                    )
                await self._sleep(delay)
                delay = min(self.poll.maximum, delay * self.poll.factor)

    def _report(self, job: JobRecord) -> ResultReport:
        return match_results(job.custom_ids, self.journal.read_results(job), self.provider.parse_line)

    def _outcome(self, wanted: dict[str, BatchRequest], submitted: int, resubmitted: int) -> BatchOutcome:
        items: dict[str, BatchItem] = {}
        unknown: list[str] = []
        duplicates: list[str] = []
        malformed = out_of_order = 0
        for job in self.journal.jobs:  # in submission order: a later answer replaces an earlier error
            if not job.collected:
                continue
            report = self._report(job)
            unknown += report.unknown
            duplicates += report.duplicates
            malformed += len(report.malformed)
            out_of_order += report.out_of_order
            for cid, item in report.items.items():
                if cid in wanted and (cid not in items or not items[cid].ok):
                    items[cid] = item
        missing = [cid for cid in wanted if cid not in items]
        return BatchOutcome(
            items={cid: items[cid] for cid in wanted if cid in items},
            missing=missing,
            unknown=unknown,
            duplicates=duplicates,
            malformed=malformed,
            out_of_order=out_of_order,
            jobs=len(self.journal.jobs),
            submitted=submitted,
            resubmitted=resubmitted,
        )

    async def cancel_all(self) -> None:
        """Cancel every job still running (its answered requests stay collectable)."""
        for record in self.journal.jobs:
            if record.status == "running" and record.job_id is not None:
                await self.provider.cancel(record.job_id)
