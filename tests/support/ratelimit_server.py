"""A fake OpenAI-compatible server that enforces N requests per second, in its own process.

    python -m tests.support.ratelimit_server --rps 60 --latency 0.2 [--style openai|anthropic|none]

prints its base URL and serves until killed. The limit is a token bucket of one second's
burst (capacity N, refilled at N per second), as providers slice their per-minute limits; a
request that finds it empty gets 429 with ``retry-after`` (whole seconds) and
``retry-after-ms``. Every answer carries the bucket's state in the chosen header style:
OpenAI ``x-ratelimit-limit/remaining/reset-requests`` (reset as ``1s``/``850ms``) or
Anthropic ``anthropic-ratelimit-requests-limit/remaining/reset`` (an RFC 3339 time), or none.
``GET /stats`` returns the counts (``ok``, ``rate_limited``) and ``POST /stats/reset`` zeroes
them and refills the bucket. `RateLimitServer` runs it as a subprocess for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def format_duration(seconds: float) -> str:
    """OpenAI's reset format: ``6m0s``, ``1s``, ``850ms``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class Limiter:
    """The token bucket; all state lives on the server's one event loop."""

    def __init__(self, rps: float) -> None:
        self.rps = rps
        self.capacity = max(1.0, rps)
        self.level = self.capacity
        self.stamp = time.monotonic()
        self.ok = 0
        self.rate_limited = 0

    def take(self) -> tuple[bool, float]:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rps)
        self.stamp = now
        if self.level >= 1:
            self.level -= 1
            self.ok += 1
            return True, self.level
        self.rate_limited += 1
        return False, self.level

    def headers(self, level: float, style: str) -> dict[str, str]:
        remaining = math.floor(level)
        reset = (self.capacity - level) / self.rps
        if style == "openai":
            return {
                "x-ratelimit-limit-requests": str(int(self.capacity)),
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": format_duration(reset),
            }
        if style == "anthropic":
            when = datetime.fromtimestamp(time.time() + reset, tz=timezone.utc)
            return {
                "anthropic-ratelimit-requests-limit": str(int(self.capacity)),
                "anthropic-ratelimit-requests-remaining": str(remaining),
                "anthropic-ratelimit-requests-reset": when.isoformat(timespec="milliseconds"),
            }
        return {}


def build_app(rps: float, latency: float, style: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    limiter = Limiter(rps)

    async def chat(request: Request) -> Response:
        body = await request.json()
        allowed, level = limiter.take()
        headers = limiter.headers(level, style)
        if not allowed:
            wait = (1 - level) / limiter.rps
            headers["retry-after"] = str(max(1, math.ceil(wait)))
            headers["retry-after-ms"] = str(math.ceil(wait * 1000))
            error = {"error": {"message": "rate limit reached", "type": "requests", "code": 429}}
            return JSONResponse(error, status_code=429, headers=headers)
        if latency:
            await asyncio.sleep(latency)
        prompt = body["messages"][-1]["content"]
        text = json.dumps({"echo": prompt[-40:]})
        usage = {"prompt_tokens": len(prompt) // 4 + 1, "completion_tokens": 8, "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        payload = {"id": "chatcmpl-rl", "object": "chat.completion", "choices": [choice], "usage": usage}
        return JSONResponse(payload, headers=headers)

    async def stats(request: Request) -> Response:
        return JSONResponse({"ok": limiter.ok, "rate_limited": limiter.rate_limited})

    async def reset(request: Request) -> Response:
        limiter.ok = limiter.rate_limited = 0
        limiter.level, limiter.stamp = limiter.capacity, time.monotonic()
        return JSONResponse({"ok": 0, "rate_limited": 0})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/stats/reset", reset, methods=["POST"]),
        ]
    )


class RateLimitServer:
    """The server as a subprocess (its CPU is not the client's): ``with RateLimitServer(60) as srv``."""

    def __init__(self, rps: float, *, latency: float = 0.05, style: str = "openai") -> None:
        self.args = ["--rps", str(rps), "--latency", str(latency), "--style", style]
        self.base_url = ""
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> RateLimitServer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.ratelimit_server", *self.args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.base_url = self._process.stdout.readline().strip()
        if not self.base_url:
            self._process.kill()
            raise RuntimeError("rate-limit server failed to start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)

    def _request(self, method: str, path: str) -> dict[str, int]:
        import urllib.request

        root = self.base_url.rsplit("/v1", 1)[0]
        req = urllib.request.Request(root + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as response:
            data: dict[str, int] = json.loads(response.read())
        return data

    def stats(self) -> dict[str, int]:
        return self._request("GET", "/stats")

    def reset(self) -> None:
        self._request("POST", "/stats/reset")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rps", type=float, default=60.0)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--style", choices=["openai", "anthropic", "none"], default="openai")
    args = parser.parse_args()
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # connections made before uvicorn runs wait in the backlog
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    config = uvicorn.Config(
        build_app(args.rps, args.latency, args.style),
        http="httptools",
        loop="uvloop",
        lifespan="off",
        access_log=False,
        log_config=None,
        backlog=2048,
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
