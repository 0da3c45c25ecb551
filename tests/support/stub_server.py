"""A loopback OpenAI-compatible HTTP server for tests and benchmarks, with injectable faults.

    with StubServer(latency=0.1, faults=FaultPlan(sequence=["429", "reset"])) as srv:
        spec = f"openai-compat/stub@{srv.base_url}"

Answers come from a responder (default: the scripted model's `default_responder`), so
personalign's own prompts get answers of the right shape.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from personalign.llm.backends.scripted import Responder, default_responder
from personalign.llm.types import GenerateConfig
from personalign.types import Message

# h11 so that "reset" can reach the transport; log_config=None leaves the host's logging alone.
UVICORN_OPTIONS: dict[str, Any] = dict(
    interface="asgi3", http="h11", loop="asyncio", lifespan="off", access_log=False, log_config=None
)
# Transport faults ("429" ... "bad_json") fail the call; content faults answer 200 with a bad reply:
# "garbage_content" (text no parser accepts), "truncated" (half the reply, finish_reason "length"),
# "empty" (no text at all).
OUTCOMES = (
    "ok",
    "400",
    "429",
    "500",
    "503",
    "timeout",
    "garbage",
    "reset",
    "bad_json",
    "garbage_content",
    "truncated",
    "empty",
)


@dataclass
class FaultPlan:
    """Which outcome each request gets: `sequence` first (repeated forever if `cycle`), then a draw
    from `rates` (outcome -> probability, `random.Random(seed)`); whatever is left over is "ok"."""

    rates: dict[str, float] = field(default_factory=dict)
    sequence: Sequence[str] = ()
    cycle: bool = False
    seed: int = 0
    retry_after: str | None = "0"  # Retry-After header sent with 429 (None: no header)
    hang_seconds: float = 30.0  # how long a "timeout" request hangs before answering

    def __post_init__(self) -> None:
        unknown = (set(self.rates) | set(self.sequence)) - set(OUTCOMES)
        if unknown:
            raise ValueError(f"unknown fault outcome(s) {sorted(unknown)}; known: {OUTCOMES}")
        if sum(self.rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates sum to more than 1")


@dataclass
class StubStats:
    """What the server saw: request count, outcome counts, and the last request's headers and body."""

    requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    last_headers: dict[str, str] = field(default_factory=dict)
    last_body: dict[str, Any] | None = None


def chat_request(body: Any) -> tuple[list[Message], GenerateConfig]:
    """The messages and config of a chat-completions request body (what a responder is given);
    raises KeyError/TypeError/AttributeError/ValidationError on a malformed body."""
    messages = [Message(role=m["role"], content=m["content"]) for m in body["messages"]]
    fmt = body.get("response_format") or {}
    spec = fmt.get("json_schema") or {}
    config = GenerateConfig(
        temperature=body.get("temperature") or 0.0,
        max_tokens=body.get("max_tokens") or 1024,
        json_schema=spec.get("schema") if fmt.get("type") == "json_schema" else fmt.get("schema"),
        schema_name=spec.get("name") or "output",
    )
    return messages, config


class StubServer:
    """uvicorn + Starlette on a free loopback port, in a background thread; use as a context manager."""

    def __init__(
        self,
        responder: Responder | None = None,
        latency: float = 0.0,
        faults: FaultPlan | None = None,
        *,
        fast: bool = False,
    ) -> None:
        self.responder = responder or default_responder
        self.latency = latency
        self.stats = StubStats()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.faults = faults or FaultPlan()
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then (else Nagle adds ~40 ms per call).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        routes = [
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ]
        self._app = Starlette(routes=routes)
        # fast: uvicorn's C parser and loop (httptools, uvloop), for throughput measurements where
        # the stub's own per-request CPU must not add to the fixed latency; "reset" needs h11.
        options = {**UVICORN_OPTIONS, **({"http": "httptools", "loop": "uvloop"} if fast else {})}
        self._server = uvicorn.Server(uvicorn.Config(self._asgi, **options))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="stub-server", daemon=True
        )

    @property
    def faults(self) -> FaultPlan:
        return self._faults

    @faults.setter
    def faults(self, plan: FaultPlan) -> None:
        with self._lock:
            self._faults, self._rng, self._index = plan, random.Random(plan.seed), 0

    def start(self) -> StubServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("stub server failed to start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes "timeout" requests still hanging
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pick(self) -> str:
        """The next request's outcome (counted in `stats`)."""
        with self._lock:
            plan, outcome = self._faults, "ok"
            if plan.sequence and (plan.cycle or self._index < len(plan.sequence)):
                outcome = plan.sequence[self._index % len(plan.sequence)]
                self._index += 1
            else:
                draw = self._rng.random()
                for name, rate in plan.rates.items():
                    if draw < rate:
                        outcome = name
                        break
                    draw -= rate
            self.stats.outcomes[outcome] += 1
            return outcome

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        # uvicorn's `send` is a bound method of the request cycle: keep its transport for "reset".
        scope["stub.transport"] = getattr(getattr(send, "__self__", None), "transport", None)
        await self._app(scope, receive, send)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def _chat(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        with self._lock:
            self.stats.requests += 1
            self.stats.last_headers = dict(request.headers)
            self.stats.last_body = body
        outcome = self._pick()
        if self.latency:
            await asyncio.sleep(self.latency)
        return await self._respond(request, outcome, body)

    async def _respond(self, request: Request, outcome: str, body: Any) -> Response:
        plan = self._faults
        if outcome == "reset":
            transport = request.scope.get("stub.transport")
            if transport is None:
                raise RuntimeError("'reset' needs uvicorn's h11 transport")
            transport.abort()
            await request.receive()  # returns http.disconnect once uvicorn sees the close
            return Response(status_code=204)  # never sent: the connection is gone
        if outcome == "timeout":
            deadline = time.monotonic() + plan.hang_seconds
            while time.monotonic() < deadline and not self._closing.is_set():
                await asyncio.sleep(0.02)
        if outcome in ("429", "500", "503"):
            headers = {"Retry-After": plan.retry_after} if outcome == "429" and plan.retry_after else None
            return _error(int(outcome), f"stub fault {outcome}", headers)
        if outcome == "400":
            auth = request.headers.get("authorization", "")
            return _error(400, f"invalid request (you sent Authorization: {auth})")
        if outcome == "garbage":
            return PlainTextResponse("<html>502 upstream hiccup</html>", status_code=200)
        if outcome == "bad_json":
            return JSONResponse({"id": "chatcmpl-stub", "object": "chat.completion", "usage": {}})
        return self._complete(body, outcome)

    def _complete(self, body: Any, outcome: str = "ok") -> Response:
        try:
            messages, config = chat_request(body)
        except (TypeError, KeyError, AttributeError, ValidationError) as exc:
            return _error(400, f"bad request body: {exc}")
        reply = self.responder(messages, config)
        text, finish = (reply, "stop") if isinstance(reply, str) else (reply.text, reply.finish_reason)
        if outcome == "garbage_content":
            text = "~~ garbled ~~ <<not an answer>>"
        elif outcome == "truncated":
            text, finish = text[: max(1, len(text) // 2)], "length"
        elif outcome == "empty":
            text = ""
        n_in, n_out = sum(len(m.content.split()) for m in messages), len(text.split())
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        ident = {
            "id": f"chatcmpl-stub-{time.time_ns()}",
            "created": int(time.time()),
            "model": body.get("model"),
        }
        if body.get("stream"):
            return _stream(ident, text, finish, usage)
        return JSONResponse({**ident, "object": "chat.completion", "choices": [choice], "usage": usage})


def _stream(ident: dict[str, Any], text: str, finish: str | None, usage: dict[str, int]) -> Response:
    """The answer as OpenAI server-sent events: a role delta, one event per word, the finish
    reason, the usage (as with ``stream_options.include_usage``), then ``[DONE]``."""
    import json

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        payload = {**ident, "object": "chat.completion.chunk", "choices": choices, **extra}
        return f"data: {json.dumps(payload)}\n\n"

    pieces = [w + " " for w in text.split(" ")] if text else []
    if pieces:
        pieces[-1] = pieces[-1][:-1]
    events = [event([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])]
    events += [event([{"index": 0, "delta": {"content": p}, "finish_reason": None}]) for p in pieces]
    events.append(event([{"index": 0, "delta": {}, "finish_reason": finish}]))
    events.append(event([], usage=usage))
    events.append("data: [DONE]\n\n")

    async def body() -> Any:
        for item in events:
            yield item.encode("utf-8")

    return StreamingResponse(body(), media_type="text/event-stream")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    payload = {"error": {"message": message, "type": "stub_error", "code": status}}
    return JSONResponse(payload, status_code=status, headers=headers)


def main() -> None:
    """Serve until killed, printing the base URL: ``python -m tests.support.stub_server --latency 0.1``."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--fast", action="store_true", help="httptools + uvloop (no 'reset' fault)")
    args = parser.parse_args()
    server = StubServer(latency=args.latency, fast=args.fast).start()
    print(server.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
