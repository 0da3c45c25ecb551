"""A 756-instance CUPID inference run through the fake batch endpoint (``--batch``) against the
direct run on the same stub replies.

    .venv/bin/python benchmarks/batch_run.py [--instances 756] [--delay 2] [--poll 0.5]

The instances are the fixture's, made unique as benchmarks/cupid_throughput.py does. The direct
run calls the loopback OpenAI-compatible stub (`tests/support/stub_server.py`, default responder,
no latency); the batch run goes through `tests/support/batch_server.py` answering with the same
responder, each job `--delay` seconds in progress, polled from `--poll` seconds (x1.5 per poll).
Both use gpt-4o-like prices. Prints whether the two summaries' metrics are equal (and the two
runs' records), the batch jobs and rounds, the accounted cost of each and their ratio, and the
wall and CPU times, the batch run's split into time waiting for jobs and the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cupid_throughput import generate_instances  # noqa: E402
from tests.support.batch_server import BatchServer  # noqa: E402
from tests.support.stub_server import StubServer  # noqa: E402

from personalign.benchmarks.cupid.run import RunSettings, run_cupid  # noqa: E402
from personalign.benchmarks.cupid.steps import CupidConfig  # noqa: E402
from personalign.llm.backends.scripted import default_responder  # noqa: E402
from personalign.runs.store import RunDir  # noqa: E402


def metrics(run_dir: Path) -> dict[str, Any]:
    summary = RunDir(run_dir).read_summary() or {}
    return {k: v for k, v in summary.items() if k not in ("usage", "finished", "batch")}


def scored(run_dir: Path) -> dict[str, Any]:
    """Each record as scored: status, results, and per step its replies, parsed value and error."""
    return {
        iid: (
            r.status,
            {k: v.model_dump() for k, v in r.results.items()},
            {n: (s.status, s.raw, s.parsed, s.error) for n, s in r.steps.items()},
        )
        for iid, r in RunDir(run_dir).records().items()
    }


def run(
    spec: str, data: Path, tmp: Path, tag: str, prices: Path, **settings: Any
) -> tuple[Any, float, float]:
    config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec, task="inference")
    run_settings = RunSettings(
        run_dir=tmp / tag,
        concurrency=256,
        cache_path=tmp / f"{tag}.sqlite",
        prices=prices,
        progress=False,
        **settings,
    )
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = run_cupid(config, run_settings, data=data)
    return result, time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=756)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds each fake batch job is in progress")
    parser.add_argument("--poll", type=float, default=0.5, help="first polling interval in seconds")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the rounds and jobs")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("httpx").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        data = tmp / "instances.jsonl"
        generate_instances(args.instances, data)
        prices = tmp / "prices.json"
        prices.write_text(json.dumps({"stub": {"input": 2.5, "output": 10.0}}), encoding="utf-8")
        with StubServer(fast=True) as stub:
            direct, direct_wall, direct_cpu = run(
                f"openai-compat/stub@{stub.base_url}?concurrency=64", data, tmp, "direct", prices
            )
        with BatchServer(delay=args.delay, responder=default_responder) as fake:
            batch, batch_wall, batch_cpu = run(
                f"openai-compat/stub@{fake.base_url}",
                data,
                tmp,
                "batch",
                prices,
                batch=True,
                batch_poll=args.poll,
            )
            creates = list(fake.stats.creates)
        same_metrics = metrics(tmp / "direct") == metrics(tmp / "batch")
        same_records = scored(tmp / "direct") == scored(tmp / "batch")
    section = batch.summary["batch"]
    d_usage, b_usage = direct.summary["usage"], batch.summary["usage"]
    print(
        f"CUPID inference, {args.instances} instances; fake batch jobs {args.delay:g} s in progress, "
        f"polled from {args.poll:g} s"
    )
    print(f"status: direct {direct.summary['status']}, batch {batch.summary['status']}")
    print(
        f"summaries equal: {'yes' if same_metrics else 'NO'}; "
        f"records equal: {'yes' if same_records else 'NO'}"
    )
    print(
        f"batch: {section['jobs']} jobs ({sum(map(len, creates))} requests, "
        f"job sizes {[len(c) for c in creates]}), {section['rounds']} rounds"
    )
    print(
        f"calls: direct {d_usage['calls']} ({d_usage['cache_hits']} cache hits), "
        f"batch {b_usage['per_model']['openai-compat/stub'].get('batch_calls', 0)} batch calls"
    )
    ratio = b_usage["cost_usd"] / d_usage["cost_usd"] if d_usage["cost_usd"] else float("nan")
    print(
        f"accounted cost: batch ${b_usage['cost_usd']:.4f} vs direct ${d_usage['cost_usd']:.4f} "
        f"({ratio:.2f}x)"
    )
    print(f"direct: wall {direct_wall:.2f} s, CPU {direct_cpu:.2f} s")
    print(
        f"batch:  wall {batch_wall:.2f} s, CPU {batch_cpu:.2f} s; waiting for jobs {section['wait_s']:.2f} s "
        f"({section['jobs']} x {args.delay:g} s in progress = {section['jobs'] * args.delay:.1f} s), "
        f"the rest {batch_wall - section['wait_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
