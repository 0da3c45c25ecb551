"""The batch client end to end against the fake batch endpoint (model layer only; no run wiring).

    .venv/bin/python benchmarks/batch_client.py [--calls 795] [--delay 2] [--style openai|anthropic]

Builds `--calls` distinct requests with a real `Model`, runs them through `BatchRunner` (journal
in a temporary directory, polling from 0.2 s growing x1.5), accepts the results into a fresh
call cache, and prints the wall time against the job's own processing delay, the client's CPU
time, the number of jobs, and the accounted cost against the same answers priced as direct calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.batch_server import BatchServer  # noqa: E402

from personalign.llm import CallCache, GenerateConfig, ModelFactory  # noqa: E402
from personalign.llm.batch import (  # noqa: E402
    BatchJournal,
    BatchRunner,
    PollPolicy,
    accept_results,
    batch_provider,
    batch_request,
)
from personalign.llm.pricing import Price, PriceTable  # noqa: E402
from personalign.types import Message  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=795)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds each fake job is in progress")
    parser.add_argument("--style", choices=["openai", "anthropic"], default="openai")
    args = parser.parse_args()
    prices = PriceTable({"m": Price(2.5, 10.0)}, "benchmark (gpt-4o-like prices)")
    os.environ.setdefault("FAKE_BATCH_KEY", "sk-fake")
    with BatchServer(delay=args.delay) as server, tempfile.TemporaryDirectory() as tmp:
        url = server.base_url if args.style == "openai" else server.root_url
        provider_name = "openai-compat" if args.style == "openai" else "anthropic"
        cache = CallCache(Path(tmp) / "cache.sqlite")
        factory = ModelFactory(cache=cache, prices=prices)
        model = factory.get(f"{provider_name}/m@{url}?key_env=FAKE_BATCH_KEY")
        config = GenerateConfig(max_tokens=256)
        messages = [
            [Message(role="system", content="Answer briefly."), Message(role="user", content=f"request {i}")]
            for i in range(args.calls)
        ]

        async def run() -> tuple[float, float, int]:
            provider = batch_provider(model.spec)
            runner = BatchRunner(
                provider, BatchJournal(Path(tmp) / "journal", provider.name), poll=PollPolicy(0.2)
            )
            try:
                requests = [batch_request(model, m, config) for m in messages]
                outcome = await runner.run(requests)
            finally:
                await provider.aclose()
            results = accept_results(model, outcome)
            batch_cost = sum(getattr(r, "cost_usd", 0.0) or 0.0 for r in results.values())
            direct_cost = sum(
                prices.cost(model.spec, item.response.usage) or 0.0
                for item in outcome.items.values()
                if item.response is not None
            )
            return batch_cost, direct_cost, outcome.jobs

        wall0, cpu0 = time.perf_counter(), time.process_time()
        batch_cost, direct_cost, jobs = asyncio.run(run())
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        cache.close()
    print(f"{args.calls} calls via {args.style} batch shapes, job delay {args.delay:g}s")
    print(f"wall {wall:.2f}s ({wall - args.delay:.2f}s over the job's own time), CPU {cpu:.2f}s, jobs {jobs}")
    print(f"accounted cost ${batch_cost:.6f} vs ${direct_cost:.6f} direct ({batch_cost / direct_cost:.2f}x)")


if __name__ == "__main__":
    main()
