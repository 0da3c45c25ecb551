"""Adaptive concurrency against a server that enforces a request rate with 429s.

    .venv/bin/python benchmarks/rate_limit.py [--calls 2000] [--rps 60] [--concurrency 256]
        [--latency 0.2] [--style openai|anthropic|none]

Runs `--calls` distinct calls at ``concurrency=`` against `tests/support/ratelimit_server.py`
(its own process; a token bucket of one second's burst) twice, with adaptation on and off,
and prints the wall time against the rate-limit bound (calls / rps), the share of answers
that were 429 and what the endpoint's controller did. Targets with adaptation on: wall time
within 1.2x of the bound, fewer than 2% of answers 429.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.ratelimit_server import RateLimitServer  # noqa: E402

from personalign.llm import GenerateConfig, ModelFactory  # noqa: E402
from personalign.types import Message  # noqa: E402


async def drive(spec: str, calls: int) -> tuple[float, int, dict[str, object]]:
    factory = ModelFactory(cache=None)
    model = factory.get(spec)
    config = GenerateConfig(max_tokens=16)

    async def one(i: int) -> bool:
        try:
            await model.complete([Message(role="user", content=f"question number {i}")], config)
        except Exception:
            return False
        return True

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(calls)))
    wall = time.perf_counter() - started
    await factory.aclose()
    return wall, results.count(False), factory.tracker.to_record()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rps", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--style", default="openai", choices=["openai", "anthropic", "none"])
    parser.add_argument("--only", choices=["on", "off"], help="run one mode only")
    args = parser.parse_args()
    bound = args.calls / args.rps
    print(
        f"{args.calls} calls, concurrency={args.concurrency}, {args.rps:g} req/s enforced, "
        f"{args.latency:g}s latency, {args.style} headers; bound {bound:.1f}s"
    )
    for mode in ("on", "off"):
        if args.only and mode != args.only:
            continue
        with RateLimitServer(args.rps, latency=args.latency, style=args.style) as server:
            spec = (
                f"openai-compat/rl@{server.base_url}?concurrency={args.concurrency}"
                f"&max_retries=100&adaptive={'true' if mode == 'on' else 'false'}"
            )
            wall, failed, usage = asyncio.run(drive(spec, args.calls))
            stats = server.stats()
        answers = stats["ok"] + stats["rate_limited"]
        share = stats["rate_limited"] / answers if answers else 0.0
        print(
            f"adaptation {mode:>3}: wall {wall:6.1f}s = {wall / bound:.2f}x bound; "
            f"429s {stats['rate_limited']}/{answers} = {share:.1%}; failed calls {failed}"
        )
        limits = usage.get("rate_limits")
        if limits:
            print("  controller:", json.dumps(limits))


if __name__ == "__main__":
    main()
