"""Fault campaign: no wrong number survives faults, kills and re-runs.

    .venv/bin/python benchmarks/fault_campaign.py [--instances 300] [--fault-rate 0.2] [--kills 5]
        [--benchmark cupid --benchmark hicupid --benchmark benchpres] [--keep DIR]

For each benchmark, on `--instances` synthetic instances (the fixtures replicated with new ids):

1. a fault-free reference run: `python -m personalign run ...` against a loopback stub server (its
   own process) that answers every request with the scripted model's deterministic reply;
2. the same run against a stub that injects faults at `--fault-rate`, in equal shares: 429 (with
   Retry-After), 500, 503, connection resets, hangs past the client's timeout, non-JSON bodies,
   bodies without choices, and replies that are garbled, cut off (finish_reason length) or empty;
   the personalign process is SIGKILLed `--kills` times at random moments and started again, and
   re-run until its summary says `complete` (a re-run retries exactly the failed steps) or
   `--max-reruns` is reached.

The servers keep a ledger of every request (sha256 of its body, outcome, arrival and answer times).
Printed per benchmark: instances, requests, faults by kind, kills, final status, errors left,
re-runs, whether the final summary's metrics equal the fault-free run's exactly (usage, timing and
health keys aside; every difference is printed), duplicate ok records in samples.jsonl,
double-paid calls (identical content answered validly twice: those in flight at a kill apart from
any other), and whether every retried step kept its earlier failures. Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.fault_campaign import BENCHMARKS, campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=300)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument(
        "--benchmark", action="append", choices=BENCHMARKS, help="repeatable; default all three"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.02, help="stub latency per request (s)")
    parser.add_argument(
        "--timeout", type=float, default=2.0, help="client timeout per call (s); hangs last 3x"
    )
    parser.add_argument("--retries", type=int, default=8, help="max_retries of the model spec")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-reruns", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="keep run dirs, caches, logs and ledgers here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        passed = True
        start = time.perf_counter()
        for benchmark in args.benchmark or BENCHMARKS:
            report = campaign(
                benchmark,
                root / benchmark,
                instances=args.instances,
                fault_rate=args.fault_rate,
                kills=args.kills,
                seed=args.seed,
                latency=args.latency,
                timeout=args.timeout,
                retries=args.retries,
                max_reruns=args.max_reruns,
                concurrency=args.concurrency,
                log=lambda text: print(f"  . {text}", flush=True),
            )
            print("\n".join(report.lines()), flush=True)
            passed &= report.passed
        print(
            f"fault rate {args.fault_rate}, kills {args.kills}: {'all PASS' if passed else 'FAIL'} "
            f"in {time.perf_counter() - start:.0f} s (load average {os.getloadavg()[0]:.1f})"
        )
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
