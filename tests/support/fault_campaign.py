"""A fault campaign: drive the real CLI against a faulty server, SIGKILL it at random moments, re-run
until complete, and check that no wrong number, duplicate record or double-paid call survives.

Used by `benchmarks/fault_campaign.py` (the full campaign) and `tests/runs/test_fault_campaign.py`
(a tiny one). Pieces:

- `LedgerServer`: the stub server, with a ledger of every request (sha256 of its body, its outcome,
  when it arrived and when it was answered) appended to a JSONL file; `serve` runs one in its own
  process, so that killing personalign never touches it.
- `write_cupid` / `write_hicupid` / `write_benchpres`: many distinct instances from the fixtures.
- `campaign`: a fault-free reference run, then the faulty run with kills and re-runs, checked by
  `metric_differences`, `check_samples` and `double_paid`; a `Report` holds what they found.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from personalign.fixtures import fixture_path
from tests.support.stub_server import FaultPlan, StubServer

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("cupid", "hicupid", "benchpres")
# The faults mixed in, in equal shares of the fault rate: transport faults (retried inside a call)
# and content faults (the step fails or re-asks; a re-run retries it).
TRANSPORT_FAULTS = ("429", "500", "503", "reset", "timeout", "garbage", "bad_json")
CONTENT_FAULTS = ("garbage_content", "truncated", "empty")
FAULTS = TRANSPORT_FAULTS + CONTENT_FAULTS
# Summary keys that are not metrics: usage, timing and health differ between a faulty and a clean run.
NON_METRIC_KEYS = frozenset({"usage", "steps", "finished", "status"})
# Flag counts that record how replies were obtained (a re-ask, a refreshed cache entry, a rejected
# truncated or empty reply), not what was measured; any other flag count must match.
HEALTH_FLAGS = frozenset({"reask", "refreshed", "truncated", "empty"})
BENCHPRES_SAMPLES = 3  # responses per BenchPreS row (the CLI's default for a non-embedded subject)


# --- the server --------------------------------------------------------------------------------


class LedgerServer(StubServer):
    """The stub server writing one line per request event to `ledger`: ``{"id", "hash", "outcome",
    "start"}`` when a request arrives and ``{"id", "end"}`` once its answer (or fault) is sent."""

    def __init__(self, ledger: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ledger = ledger.open("a", encoding="utf-8")
        self._ledger_lock = threading.Lock()
        self._ids = iter(range(1 << 62))

    def _log(self, entry: dict[str, Any]) -> None:
        with self._ledger_lock:
            self._ledger.write(json.dumps(entry) + "\n")
            self._ledger.flush()

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with self._lock:
            self.stats.requests += 1
            self.stats.last_body = body
            ident = next(self._ids)
        outcome = self._pick()
        if outcome == "garbage_content" and not (isinstance(body, dict) and body.get("response_format")):
            # Garbled free text that ends normally is an answer, however bad: CUPID's inference
            # parser scores it (flagged missing_section, as the paper's code does), and a judge
            # grades a garbled HiCUPID or BenchPreS answer. No client can tell it from the model's
            # own words, so it is garbled only where the reply has a schema to fail.
            outcome = "truncated"
        self._log(
            {"id": ident, "hash": hashlib.sha256(raw).hexdigest(), "outcome": outcome, "start": time.time()}
        )
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            return await self._respond(request, outcome, body)
        finally:
            self._log({"id": ident, "end": time.time()})

    def stop(self) -> None:
        super().stop()
        self._ledger.close()


def fault_plan(rate: float, seed: int, hang: float) -> FaultPlan:
    """`rate` split evenly over `FAULTS`; 429s carry ``Retry-After: 1``; hangs last `hang` seconds."""
    share = rate / len(FAULTS)
    return FaultPlan(
        rates={f: share for f in FAULTS} if rate else {}, seed=seed, retry_after="1", hang_seconds=hang
    )


def serve(argv: list[str] | None = None) -> None:
    """``python -m tests.support.fault_campaign --ledger L --fault-rate R``: serve until killed,
    printing the base URL."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--hang", type=float, default=6.0)
    args = parser.parse_args(argv)
    server = LedgerServer(
        args.ledger, latency=args.latency, faults=fault_plan(args.fault_rate, args.seed, args.hang)
    ).start()
    print(server.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()


@contextmanager
def server_process(ledger: Path, fault_rate: float, seed: int, latency: float, hang: float) -> Iterator[str]:
    """A `LedgerServer` in its own process; yields its base URL and stops it (ledger closed) after."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fault_campaign",
            "--ledger",
            str(ledger),
            "--fault-rate",
            str(fault_rate),
            "--seed",
            str(seed),
            "--latency",
            str(latency),
            "--hang",
            str(hang),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url:
            raise RuntimeError("the fault server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


# --- data ----------------------------------------------------------------------------------------


def _fixture(name: str) -> list[dict[str, Any]]:
    path = fixture_path(name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_cupid(n: int, directory: Path) -> tuple[str, list[str]]:
    """`n` distinct CUPID instances (the fixture's, re-labelled per copy); returns (--data, extra args)."""
    base = _fixture("cupid_sample.jsonl")
    path = directory / "cupid.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            row = dict(base[i % len(base)])
            copy = i // len(base)
            number, _, rest = row["persona_id"].partition("+")
            row["persona_id"] = f"{1000 * copy + int(number)}+{rest}"
            row["current_request"] = f"(ticket {row['persona_id']}) {row['current_request']}"
            handle.write(json.dumps(row) + "\n")
    return str(path), []


def write_hicupid(n: int, directory: Path) -> tuple[str, list[str]]:
    """Copies of the fixture's users (new user, dialogue and question ids; each question tagged),
    enough for `n` test questions; `--limit n` selects exactly `n`."""
    dialogues, questions = _fixture("hicupid_dialogue.jsonl"), _fixture("hicupid_qa.jsonl")
    per_copy = sum(1 for q in questions if q["split"] != "train")
    root = directory / "hicupid"
    root.mkdir(parents=True, exist_ok=True)
    with (
        (root / "dialogue.jsonl").open("w", encoding="utf-8") as d,
        (root / "qa.jsonl").open("w", encoding="utf-8") as q,
    ):
        for copy in range(math.ceil(n / per_copy)):
            for row in dialogues:
                d.write(
                    json.dumps(
                        {
                            **row,
                            "user_id": row["user_id"] + 100 * copy,
                            "dialogue_id": row["dialogue_id"] + 10_000 * copy,
                        }
                    )
                    + "\n"
                )
            for row in questions:
                if row["split"] == "train" and copy:
                    continue  # one train split is enough
                q.write(
                    json.dumps(
                        {
                            **row,
                            "user_id": row["user_id"] + 100 * copy,
                            "question_id": row["question_id"] + 10_000 * copy,
                            "dialogue_id": [i + 10_000 * copy for i in row["dialogue_id"]],
                            "question": f"(ticket {copy}) {row['question']}",
                        }
                    )
                    + "\n"
                )
    return str(root), ["--limit", str(n)]


def write_benchpres(n: int, directory: Path) -> tuple[str, list[str]]:
    """ceil(n / 3) distinct BenchPreS rows (3 responses each: `n` instances, rounded up)."""
    base = _fixture("benchpres_sample.jsonl")
    path = directory / "benchpres.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(math.ceil(n / BENCHPRES_SAMPLES)):
            row = dict(base[i % len(base)])
            copy = i // len(base)
            if copy:
                row["name"] = f"{row['name']} {copy}"
                row["prompt"] = f"(ticket {copy})\n{row['prompt']}"
            handle.write(json.dumps(row) + "\n")
    return str(path), ["--samples", str(BENCHPRES_SAMPLES)]


WRITERS = {"cupid": write_cupid, "hicupid": write_hicupid, "benchpres": write_benchpres}


# --- running the CLI -----------------------------------------------------------------------------


@dataclass
class Attempt:
    """One start of the CLI: how it ended (killed, or its exit code and the summary's status)."""

    started: float
    ended: float
    killed_at: float | None
    exit_code: int | None
    status: str | None


@dataclass
class Campaign:
    """Where one benchmark's run lives and how the CLI is started for it."""

    benchmark: str
    data: str
    extra: list[str]
    directory: Path
    concurrency: int = 16

    def command(self, base_url: str, name: str, retries: int, timeout: float) -> list[str]:
        options = f"max_retries={retries}&timeout={timeout:g}&concurrency={self.concurrency}"
        spec = f"openai-compat/stub@{base_url}?{options}"
        return [
            sys.executable,
            "-m",
            "personalign",
            "run",
            self.benchmark,
            "--model",
            spec,
            "--judge",
            spec,
            "--data",
            self.data,
            *self.extra,
            "--concurrency",
            str(self.concurrency),
            "--cache",
            str(self.directory / f"{name}.sqlite"),
            "--run-dir",
            str(self.directory / name),
            "--no-progress",
        ]

    def start(self, command: list[str], name: str) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("ab")
        return subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "120"},
        )

    def attempt(self, command: list[str], name: str, kill_after: float | None) -> Attempt:
        """Run the CLI once; SIGKILL it after `kill_after` seconds if it is still running then."""
        summary = self.directory / name / "summary.json"
        before = summary.stat().st_mtime_ns if summary.exists() else None
        started = time.time()
        process = self.start(command, name)
        try:
            code: int | None = process.wait(timeout=kill_after)
            killed = None
        except subprocess.TimeoutExpired:
            killed = time.time()
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        status = None
        if killed is None and summary.exists() and summary.stat().st_mtime_ns != before:
            status = json.loads(summary.read_text(encoding="utf-8"))["status"]
        return Attempt(started, time.time(), killed, code, status)


# --- the campaign --------------------------------------------------------------------------------


@dataclass
class Report:
    """What one benchmark's campaign found."""

    benchmark: str
    instances: int = 0
    calls: int = 0
    valid_replies: int = 0
    reference_calls: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    crashes: int = 0  # starts that ended without a kill and without writing a summary
    attempts: int = 0
    status: str | None = None
    errors_left: int = 0
    reruns: int = 0
    metric_differences: list[str] = field(default_factory=list)
    duplicate_ok: int = 0
    double_paid_at_kill: int = 0
    double_paid_other: int = 0
    double_paid_examples: list[str] = field(default_factory=list)
    history_lost: int = 0
    history_examples: list[str] = field(default_factory=list)
    steps_retried: int = 0
    wall_s: float = 0.0
    reference_wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return (
            self.status == "complete"
            and self.crashes == 0
            and not self.metric_differences
            and self.duplicate_ok == 0
            and self.double_paid_other == 0
            and self.history_lost == 0
        )

    def lines(self) -> list[str]:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        equal = "yes" if not self.metric_differences else f"NO ({len(self.metric_differences)} differences)"
        out = [
            f"== {self.benchmark}: {'PASS' if self.passed else 'FAIL'}",
            f"instances {self.instances}; requests {self.calls} ({self.valid_replies} valid replies; "
            f"the fault-free run needed {self.reference_calls})",
            f"faults injected {sum(self.faults.values())}: {faults}",
            f"kills {self.kills}; crashes {self.crashes}; CLI starts {self.attempts}; "
            f"re-runs after the first {self.reruns}",
            f"final status {self.status}; errors left {self.errors_left}; steps that failed and were "
            f"retried {self.steps_retried}",
            f"metrics equal to the fault-free run: {equal}",
            *(f"  diff {d}" for d in self.metric_differences[:20]),
            f"duplicate ok records in samples.jsonl: {self.duplicate_ok}",
            f"double-paid calls: {self.double_paid_at_kill} in flight at a kill, "
            f"{self.double_paid_other} other",
            *(f"  {e}" for e in self.double_paid_examples[:5]),
            f"error history kept: {'yes' if not self.history_lost else f'NO ({self.history_lost} steps)'}",
            *(f"  {e}" for e in self.history_examples[:5]),
            f"wall {self.wall_s:.1f} s (fault-free run {self.reference_wall_s:.1f} s)",
        ]
        return out


def metric_section(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without its usage, timing and health keys (`NON_METRIC_KEYS`, `HEALTH_FLAGS`)."""

    def strip(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if key == "flags" and isinstance(item, dict):
                item = {k: v for k, v in item.items() if k not in HEALTH_FLAGS}
            out[key] = strip(item)
        return out

    return strip({k: v for k, v in summary.items() if k not in NON_METRIC_KEYS})


def metric_differences(reference: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Every place where two summaries' metric sections differ (exact comparison)."""
    return _differences(metric_section(reference), metric_section(actual), "")


def _differences(reference: Any, actual: Any, path: str) -> list[str]:
    if isinstance(reference, dict) and isinstance(actual, dict):
        out: list[str] = []
        for key in sorted(set(reference) | set(actual)):
            where = f"{path}.{key}" if path else key
            if key not in actual:
                out.append(f"{where}: missing (reference {reference[key]!r})")
            elif key not in reference:
                out.append(f"{where}: unexpected {actual[key]!r}")
            else:
                out.extend(_differences(reference[key], actual[key], where))
        return out
    if isinstance(reference, list) and isinstance(actual, list) and len(reference) == len(actual):
        pairs = enumerate(zip(reference, actual, strict=True))
        return [d for i, (r, a) in pairs for d in _differences(r, a, f"{path}[{i}]")]
    return [] if reference == actual else [f"{path}: {actual!r} (reference {reference!r})"]


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """One entry per request: id, hash, outcome, start and (when it was answered) end."""
    requests: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        requests.setdefault(entry["id"], {}).update(entry)
    return list(requests.values())


def double_paid(
    ledger: list[dict[str, Any]], reference: list[dict[str, Any]], kills: list[float], grace: float
) -> tuple[int, int, list[str]]:
    """Valid answers beyond what the fault-free run needed (at least one), per request content:
    (excused, other, examples).

    Identical bodies can be distinct calls (BenchPreS's samples differ only in the cache key's
    `sample_index`), so a content's valid answers are counted against the fault-free run's. Each
    extra is excused ("in flight at a kill") by one earlier valid answer of that content during
    which a kill fell, widened by `grace` seconds on both sides: a loaded server handles a request
    some time after the client sent it, and the client reads and stores an answer some time after
    it was sent. Any other extra is a call paid twice.
    """
    needed = Counter(r["hash"] for r in reference if r["outcome"] == "ok")
    valid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in sorted(ledger, key=lambda r: r["start"]):
        if request["outcome"] == "ok":
            valid[request["hash"]].append(request)
    excused = other = 0
    examples: list[str] = []
    for digest, answers in valid.items():
        # A request the fault-free run never made (a re-ask quoting a garbled reply) is paid once.
        extra = len(answers) - max(needed[digest], 1)
        if extra <= 0:
            continue
        lost = sum(
            1
            for a in answers[:-1]
            if any(a["start"] - grace <= k <= a.get("end", math.inf) + grace for k in kills)
        )
        excused += min(extra, lost)
        if extra > lost:
            other += extra - lost
            times = ", ".join(f"{a['start']:.2f}-{a.get('end', math.inf):.2f}" for a in answers)
            examples.append(f"{digest[:12]}: {len(answers)} valid answers ({times}), {needed[digest]} needed")
    return excused, other, examples


def check_samples(path: Path) -> tuple[int, int, int, list[str], dict[str, dict[str, Any]]]:
    """(duplicate ok lines, steps retried, steps whose earlier failures are lost, examples, final
    records). An instance may have error lines followed by one ok line, never a line after an ok one;
    a step that failed in an earlier line and succeeded later must list that failure in `errors`."""
    lines: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            lines[record["instance_id"]].append(record)
    duplicates = retried = lost = 0
    examples: list[str] = []
    for instance, records in lines.items():
        ok = [i for i, r in enumerate(records) if _ok(r)]
        if ok and (len(ok) > 1 or ok[0] != len(records) - 1):
            duplicates += len(records) - ok[0] - 1
        final = records[-1]
        for earlier in records[:-1]:
            for name, step in earlier.get("steps", {}).items():
                if step["status"] != "error":
                    continue
                later = final["steps"].get(name)
                if later is None or later["status"] != "ok":
                    continue
                retried += 1
                if step["error"] not in later["errors"] or not set(step["errors"]) <= set(later["errors"]):
                    lost += 1
                    examples.append(
                        f"{instance} step {name}: earlier failure {step['error'][:80]!r} not kept"
                    )
    return duplicates, retried, lost, examples, {k: v[-1] for k, v in lines.items()}


def _ok(record: dict[str, Any]) -> bool:
    results = record.get("results") or {}
    return bool(results) and all(r["status"] == "ok" for r in results.values())


def campaign(
    benchmark: str,
    directory: Path,
    *,
    instances: int,
    fault_rate: float,
    kills: int,
    seed: int = 0,
    latency: float = 0.02,
    timeout: float = 2.0,
    retries: int = 8,
    max_reruns: int = 30,
    concurrency: int = 16,
    log: Any = None,
) -> Report:
    """The reference run, then the faulty run with `kills` SIGKILLs at random moments and re-runs."""
    directory.mkdir(parents=True, exist_ok=True)
    data, extra = WRITERS[benchmark](instances, directory)
    run = Campaign(benchmark, data, extra, directory, concurrency)
    report = Report(benchmark)
    seed += BENCHMARKS.index(benchmark)  # each benchmark its own fault sequence and kill moments
    rng = random.Random(seed)
    say = log or (lambda _text: None)

    ref_ledger = directory / "reference-ledger.jsonl"
    with server_process(ref_ledger, 0.0, seed, latency, 3 * timeout) as url:
        first = run.attempt(run.command(url, "reference", retries, timeout), "reference", None)
    report.reference_wall_s = first.ended - first.started
    if first.status != "complete":
        raise RuntimeError(
            f"the fault-free {benchmark} run ended {first.status} (see {directory}/reference.log)"
        )
    reference_requests = read_ledger(ref_ledger)
    report.reference_calls = len(reference_requests)
    # Kill while calls are being made: after the CLI's start-up (up to its first request), somewhere
    # in the first half of the work the fault-free run needed.
    startup = min(r["start"] for r in reference_requests) - first.started
    work = report.reference_wall_s - startup
    say(f"{benchmark}: fault-free run {report.reference_wall_s:.1f} s, {report.reference_calls} requests")

    ledger = directory / "ledger.jsonl"
    kill_times: list[float] = []
    attempts: list[Attempt] = []
    started = time.time()
    with server_process(ledger, fault_rate, seed, latency, 3 * timeout) as url:
        command = run.command(url, "faulty", retries, timeout)
        while len(attempts) <= max_reruns:
            kill_after = None
            if len(kill_times) < kills:
                # Each re-run has less left to do: kill it earlier, so every kill lands mid-run.
                kill_after = startup + rng.uniform(0.05, 0.5) * work * 0.75 ** len(kill_times)
            attempt = run.attempt(command, "faulty", kill_after)
            attempts.append(attempt)
            if attempt.killed_at is not None:
                kill_times.append(attempt.killed_at)
            say(
                f"{benchmark}: start {len(attempts)}: "
                + (
                    f"killed after {attempt.killed_at - attempt.started:.1f} s"
                    if attempt.killed_at
                    else f"{attempt.status} (exit {attempt.exit_code})"
                )
            )
            if attempt.status == "complete":
                break
    report.wall_s = time.time() - started
    report.attempts, report.kills = len(attempts), len(kill_times)
    report.crashes = sum(1 for a in attempts if a.killed_at is None and a.status is None)
    report.reruns = len(attempts) - 1
    report.status = attempts[-1].status

    requests = read_ledger(ledger)
    report.calls = len(requests)
    report.valid_replies = sum(1 for r in requests if r["outcome"] == "ok")
    report.faults = Counter(r["outcome"] for r in requests if r["outcome"] != "ok")
    report.double_paid_at_kill, report.double_paid_other, report.double_paid_examples = double_paid(
        requests, reference_requests, kill_times, grace=1.0
    )
    samples = directory / "faulty" / "samples.jsonl"
    report.duplicate_ok, report.steps_retried, report.history_lost, report.history_examples, final = (
        check_samples(samples)
    )
    report.instances = len(final)
    report.errors_left = sum(1 for r in final.values() if not _ok(r))
    reference = json.loads((directory / "reference" / "summary.json").read_text(encoding="utf-8"))
    actual = json.loads((directory / "faulty" / "summary.json").read_text(encoding="utf-8"))
    report.metric_differences = metric_differences(reference, actual)
    return report


if __name__ == "__main__":
    serve()
