"""The gateway's ASGI app: OpenAI-compatible chat completions with per-user memory, and the memory API.

Per chat request: API key -> tenant; user from ``user``, the ``X-Personalign-User`` header or the
key's default user; retrieve what is relevant to the last user message, select what applies,
inject the memory block into the system message, forward upstream, answer (or stream), record
the exchange as a session, and queue extraction in the background worker.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from personalign.errors import DataError, ModelCallError, PersonalignError
from personalign.llm import GenerateConfig, ModelFactory
from personalign.memory.backend import MemoryBackend, Recorded
from personalign.memory.engine import Retrieval, RetrievalConfig
from personalign.memory.select import (
    SelectionPolicy,
    applied,
    memories_of,
    render_memory_block,
    select_memories,
)
from personalign.memory.store import UnknownUserError
from personalign.memory.types import CommunicationContext
from personalign.serve.extraction import ExtractionWorker
from personalign.serve.keys import ApiKey, KeyRing
from personalign.serve.observe import Metrics, RateLimiter, log_event, user_ref
from personalign.serve.tenancy import MemoryService, memory_json, scoped_id
from personalign.serve.upstream import Upstreams, stream
from personalign.types import Message

T = TypeVar("T")
USER_HEADER = "x-personalign-user"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass
class GatewayConfig:
    """Everything the gateway is built from (the CLI's options)."""

    upstreams: Sequence[str]
    keys: KeyRing
    store: str | MemoryBackend = ":memory:"  # a path, sqlite:///PATH, postgresql://..., or a store
    embedder: str | None = "minilm"
    extractor: str | None = None  # model spec for background extraction; None: sessions only
    judge: str | None = None  # model spec deciding which preferences apply; None: policy/apply all
    policy: SelectionPolicy | None = None
    k_sessions: int = 3
    k_memories: int = 8
    extraction_workers: int = 2
    index_shards: int = 16  # users' search indexes in this many independently locked engines
    request_threads: int = 32  # threads for the chat path's blocking work (lookup, record, upkeep)
    indexed_users: int = 4096  # users' indexes kept in memory per tenant (least recently searched evicted)
    # Builds the model factory of upstream calls (tests inject scripted backends); default: no cache.
    factory: Callable[[], ModelFactory] | None = None
    extractor_factory: Callable[[], ModelFactory] | None = None
    version: str = field(default="0.1.0")


# --- request and response models (they make the OpenAPI schema) -------------------------------


class ContentPart(BaseModel):
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None


class ContextIn(BaseModel):
    """The communication context of a request (who the answer is for, what it must do)."""

    recipient: str = ""
    task: str = ""
    formality: str = ""
    notes: str = ""


class PersonalignOptions(BaseModel):
    """Gateway options in the request body (``personalign``; OpenAI clients send them as extra body)."""

    memory: bool = True
    context: ContextIn | None = None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    response_format: dict[str, Any] | None = None
    personalign: PersonalignOptions | None = None


class MemoryIn(BaseModel):
    user: str | None = None
    content: str
    kind: Literal["preference", "fact"] = "preference"
    category: str = "general"
    context_factor: str = ""


class CorrectionIn(BaseModel):
    user: str | None = None
    content: str


class SearchIn(BaseModel):
    user: str | None = None
    query: str
    k_sessions: int = Field(3, ge=0, le=50)
    k_memories: int = Field(8, ge=0, le=100)


# --- errors ----------------------------------------------------------------------------------


def error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-shaped error body."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status, headers=headers
    )


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers


# --- middleware: request ids, access log, metrics ---------------------------------------------


class RequestContext:
    """Pure ASGI middleware: a request id on every response, one JSON log line and metrics per request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else "req_" + secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        done = False

        def account() -> None:
            """Metrics and the log line, once, before the response's last byte leaves."""
            nonlocal done
            if done:
                return
            done = True
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            self.metrics.inc("personalign_http_requests_total", path=path, status=str(status))
            self.metrics.observe("personalign_http_request_seconds", elapsed, path=path)
            state = scope.get("state", {})
            log_event(
                "request",
                request_id=request_id,
                method=scope["method"],
                path=path,
                status=status,
                ms=round(elapsed * 1000, 2),
                tenant=state.get("tenant"),
                key_id=state.get("key_id"),
                user=state.get("user_ref"),
            )

        async def send_with_id(message: AsgiMessage) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                account()
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            account()  # no complete response (an error, a client gone): still counted and logged


# --- the app -----------------------------------------------------------------------------------


def create_app(config: GatewayConfig) -> FastAPI:
    """Build the gateway (store, engine, upstream models, extraction worker) as a FastAPI app."""
    service = MemoryService(
        config.store,
        embedder=config.embedder,
        config=RetrievalConfig(k_sessions=config.k_sessions, k_memories=config.k_memories),
        shards=config.index_shards,
        max_users=config.indexed_users,
    )
    factory = config.factory() if config.factory is not None else ModelFactory(cache=None)
    upstreams = Upstreams(factory, config.upstreams)
    judge = factory.get(config.judge) if config.judge else None
    worker = (
        ExtractionWorker(
            service.view,
            config.extractor,
            workers=config.extraction_workers,
            factory=config.extractor_factory,
        )
        if config.extractor
        else None
    )
    limiter = RateLimiter()
    warming: dict[str, asyncio.Task[None]] = {}
    # The chat path's blocking work (lookup, record, upkeep) hops straight to its own threads: the
    # generic anyio hop (cancel scopes, capacity limiter, context copy) cost more event-loop CPU.
    blocking = ThreadPoolExecutor(max_workers=config.request_threads, thread_name_prefix="gateway")

    async def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the request-path threads."""
        return await asyncio.get_running_loop().run_in_executor(blocking, partial(fn, *args, **kwargs))

    async def warm(tenant: str, user: str, sid: str, recorded: Recorded | None = None) -> None:
        started = time.perf_counter()
        try:
            await off_loop(service.warm, tenant, user, recorded)
            metrics.observe("personalign_index_upkeep_seconds", time.perf_counter() - started)
        except Exception as exc:  # upkeep only: the next request refreshes anyway
            log_event("warm_failed", error=type(exc).__name__)
        finally:
            warming.pop(sid, None)

    metrics = Metrics()
    metrics.describe("personalign_http_requests_total", "HTTP requests by route and status")
    metrics.describe("personalign_http_request_seconds", "HTTP request time by route")
    metrics.describe("personalign_upstream_seconds", "Time spent waiting for the upstream model")
    metrics.describe("personalign_memory_seconds", "Time spent retrieving and selecting memories")
    metrics.describe("personalign_turns_recorded_total", "Exchanges stored as sessions")
    metrics.describe("personalign_record_seconds", "Time spent storing an exchange")
    metrics.describe(
        "personalign_index_upkeep_seconds", "Index refresh after a recorded exchange (off the request path)"
    )
    metrics.describe("personalign_upstream_errors_total", "Failed upstream calls")
    metrics.describe("personalign_rate_limited_total", "Requests refused by a rate limit")
    metrics.describe("personalign_tokens_total", "Tokens reported by the upstream")
    if worker is not None:
        metrics.gauge("personalign_extraction_backlog", lambda: float(worker.backlog))
        metrics.gauge("personalign_extraction_jobs_done", lambda: float(worker.stats["done"]))
        metrics.gauge("personalign_extraction_jobs_failed", lambda: float(worker.stats["failed"]))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if worker is not None:
                await run_in_threadpool(worker.close)
            await upstreams.aclose()
            blocking.shutdown(wait=True)
            service.close()

    app = FastAPI(
        title="personalign gateway",
        version=config.version,
        description="OpenAI-compatible chat completions with per-user memory, and the memory API.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.worker = worker
    app.state.metrics = metrics
    app.state.upstreams = upstreams

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return error(exc.status, exc.message, exc.kind, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = [
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in exc.errors()
        ]
        return error(400, "invalid request: " + "; ".join(problems[:5]), "invalid_request_error")

    @app.exception_handler(UnknownUserError)
    async def unknown_user(request: Request, exc: UnknownUserError) -> Response:
        return error(404, "no such user for this key's tenant", "not_found")

    @app.exception_handler(DataError)
    async def bad_data(request: Request, exc: DataError) -> Response:
        where = f"field '{exc.field}': " if exc.field else ""
        return error(400, f"{where}{exc.detail}", "invalid_request_error")

    async def authenticate(request: Request, authorization: str | None = Header(None)) -> ApiKey:
        presented = ""
        if authorization and authorization.lower().startswith("bearer "):
            presented = authorization[7:].strip()
        key = config.keys.authenticate(presented) if presented else None
        if key is None:
            raise ApiError(401, "missing or invalid API key", "authentication_error")
        request.scope["state"]["tenant"] = key.tenant
        request.scope["state"]["key_id"] = key.key_id
        wait = limiter.check(key.key_id, key.rate, key.burst)
        if wait > 0:
            metrics.inc("personalign_rate_limited_total", key_id=key.key_id)
            retry = str(max(1, int(wait + 0.999)))
            raise ApiError(429, "rate limit reached for this key", "rate_limit_error", {"Retry-After": retry})
        return key

    def user_of(request: Request, key: ApiKey, given: str | None) -> str | None:
        user = given or request.headers.get(USER_HEADER) or key.default_user
        if user is not None:
            request.scope["state"]["user_ref"] = user_ref(key.tenant, user)
        return user

    def required_user(request: Request, key: ApiKey, given: str | None) -> str:
        user = user_of(request, key, given)
        if not user:
            raise ApiError(
                400, "name the user (`user` or the X-Personalign-User header)", "invalid_request_error"
            )
        return user

    # --- OpenAI-compatible endpoints --------------------------------------------------------

    @app.get("/v1/models", tags=["openai"])
    async def models(key: ApiKey = Depends(authenticate)) -> dict[str, Any]:
        """The upstream models this gateway serves, by the names clients use in ``model``."""
        return {
            "object": "list",
            "data": [
                {"id": u.name, "object": "model", "created": 0, "owned_by": "personalign"}
                for u in upstreams.items
            ],
        }

    @app.post("/v1/chat/completions", tags=["openai"], response_model=None)
    async def chat(body: ChatRequest, request: Request, key: ApiKey = Depends(authenticate)) -> Response:
        """Chat completions with the user's memory injected (``stream`` for server-sent events)."""
        upstream = upstreams.get(body.model)
        if upstream is None:
            raise ApiError(404, f"unknown model {body.model!r} (see /v1/models)", "invalid_request_error")
        messages = [to_message(m, i) for i, m in enumerate(body.messages)]
        last_user = next((m.content for m in reversed(messages) if m.role == "user"), None)
        if last_user is None:
            raise ApiError(400, "messages: no user message", "invalid_request_error")
        options = body.personalign or PersonalignOptions()
        user = user_of(request, key, body.user) if options.memory else None
        request_id = request.scope["state"]["request_id"]
        headers = {"X-Personalign-Memory": "off"}
        qvec = None
        if user is not None:
            started = time.perf_counter()
            # while this user's index upkeep runs, search the index as it is rather than queue behind it
            fresh = scoped_id(key.tenant, user) not in warming
            qvec, found = await off_loop(  # one hop to the thread pool for all the blocking work
                service.lookup, key.tenant, user, last_user,
                k_sessions=config.k_sessions, k_memories=config.k_memories, refresh=fresh,
            )  # fmt: skip
            block, n_memories, n_sessions = await memory_block(found, options.context)
            metrics.observe("personalign_memory_seconds", time.perf_counter() - started)
            headers = {"X-Personalign-Memory": "on", "X-Personalign-Memories": str(n_memories),
                       "X-Personalign-Sessions": str(n_sessions)}  # fmt: skip
            if block:
                messages = inject(messages, block)
        gen = generate_config(body)
        turn_messages = [{"role": "user", "content": last_user}]
        if user is not None:  # what the store would refuse is refused before the upstream is paid
            service.check_exchange(turn_messages)

        async def record(answer: str, finish: str | None) -> None:
            """Store the exchange; raises ApiError when it cannot be stored (the turn is then not
            acknowledged: no answer is returned, a stream ends without [DONE])."""
            if user is None:
                return
            empty = not answer.strip()
            exchange = [
                *turn_messages,
                {"role": "assistant", "content": "(empty reply)" if empty else answer},
            ]
            meta = {
                "request_id": request_id,
                "model": upstream.name,
                "finish_reason": finish,
                "empty_reply": empty,
            }
            sid = scoped_id(key.tenant, user)
            recording = time.perf_counter()
            turn_id = "turn_" + secrets.token_hex(8)  # unique: a client's request id may repeat
            try:
                recorded = await off_loop(
                    service.record_turn, key.tenant, user, exchange, session_id=turn_id, metadata=meta,
                    user_vector=qvec,
                )  # fmt: skip
            except PersonalignError as exc:
                log_event("record_failed", request_id=request_id, error=type(exc).__name__)
                detail = f"{exc.field}: {exc.detail}" if isinstance(exc, DataError) else type(exc).__name__
                raise ApiError(500, f"the exchange could not be stored ({detail})", "storage_error") from None
            metrics.inc("personalign_turns_recorded_total")
            metrics.observe("personalign_record_seconds", time.perf_counter() - recording)
            if worker is not None:
                worker.submit(key.tenant, user)
            if sid not in warming:  # index upkeep after the answer, not before the next one
                warming[sid] = asyncio.create_task(warm(key.tenant, user, sid, recorded))

        created = int(time.time())
        ident = {"id": "chatcmpl-" + request_id, "created": created, "model": upstream.name}
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(
                sse(upstream.model, messages, gen, ident, include_usage, record),
                media_type="text/event-stream",
                headers={**headers, "Cache-Control": "no-cache"},
            )
        started = time.perf_counter()
        try:
            completion = await upstream.model.complete(messages, gen)
        except ModelCallError as exc:
            metrics.inc("personalign_upstream_errors_total", model=upstream.name)
            raise ApiError(502, f"upstream model failed: {exc}", "upstream_error") from None
        finally:
            metrics.observe("personalign_upstream_seconds", time.perf_counter() - started)
        finish = (completion.raw or {}).get("finish_reason") or completion.finish_reason or "stop"
        await record(completion.text, finish)
        usage = completion.usage
        count_tokens(upstream.name, usage.prompt_tokens, usage.completion_tokens)
        return JSONResponse(
            {
                **ident,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": completion.text},
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                },
            },
            headers=headers,
        )

    def count_tokens(model: str, prompt: int, completion: int) -> None:
        metrics.inc("personalign_tokens_total", prompt, model=model, kind="prompt")
        metrics.inc("personalign_tokens_total", completion, model=model, kind="completion")

    async def sse(
        model: Any,
        messages: list[Message],
        gen: GenerateConfig,
        ident: dict[str, Any],
        include_usage: bool,
        record: Callable[[str, str | None], Awaitable[None]],
    ) -> AsyncIterator[bytes]:
        events = ChunkEvents(ident)
        # the role event goes out with the first content (the headers have gone already), and what
        # arrived from the upstream in one read goes to the client in one write
        pending = [
            events.event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        ]
        parts: list[str] = []
        finish: str | None = None
        usage = None
        started = time.perf_counter()
        try:
            async for batch in stream(model, messages, gen):
                for chunk in batch:
                    if chunk.text:
                        parts.append(chunk.text)
                        pending.append(events.content(chunk.text))
                    if chunk.finish_reason is not None:
                        finish = chunk.raw_finish_reason or chunk.finish_reason
                    if chunk.usage is not None:
                        usage = chunk.usage
                if pending:
                    yield b"".join(pending)
                    pending = []
        except ModelCallError as exc:
            metrics.inc("personalign_upstream_errors_total", model=ident["model"])
            payload = {"error": {"message": f"upstream model failed: {exc}", "type": "upstream_error"}}
            yield b"".join([*pending, b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n"])
            return
        finally:
            metrics.observe("personalign_upstream_seconds", time.perf_counter() - started)
        try:
            await record("".join(parts), finish)
        except ApiError as exc:
            payload = {"error": {"message": exc.message, "type": exc.kind}}
            yield b"".join([*pending, b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n"])
            return
        pending.append(events.event([{"index": 0, "delta": {}, "finish_reason": finish or "stop"}]))
        if usage is not None:
            count_tokens(ident["model"], usage.prompt_tokens, usage.completion_tokens)
        if include_usage:
            counts = (
                {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                }
                if usage is not None
                else None
            )
            pending.append(events.event([], usage=counts))
        pending.append(b"data: [DONE]\n\n")
        yield b"".join(pending)

    async def memory_block(found: Retrieval | None, context: ContextIn | None) -> tuple[str, int, int]:
        """The rendered block, the number of memories applied and of sessions shown ('' if none)."""
        if found is None:  # the user has no history yet
            return "", 0, 0
        if not found.memories and not found.sessions:
            return "", 0, 0
        ctx = CommunicationContext(**context.model_dump()) if context is not None else CommunicationContext()
        decisions = await select_memories(memories_of(found.memories), ctx, judge=judge, policy=config.policy)
        kept = applied(decisions)
        sessions = [s.session for s in found.sessions if s.session] if not found.memories else []
        if not kept and not sessions:
            return "", 0, 0
        return render_memory_block(memories=kept, sessions=sessions), len(kept), len(sessions)

    # --- memory API -------------------------------------------------------------------------

    def user_param(
        user: str | None = Query(None, description="The user (or the X-Personalign-User header)."),
    ) -> str | None:
        return user

    @app.get("/v1/memory/memories", tags=["memory"])
    async def list_memories(
        request: Request,
        key: ApiKey = Depends(authenticate),
        user: str | None = Depends(user_param),
        include_superseded: bool = False,
    ) -> dict[str, Any]:
        """The user's memories (current ones, or with ``include_superseded`` every version)."""
        who = required_user(request, key, user)
        found = await run_in_threadpool(
            service.memories, key.tenant, who, include_superseded=include_superseded
        )
        return {"object": "list", "data": [memory_json(m) for m in found]}

    @app.post("/v1/memory/memories", tags=["memory"], status_code=201)
    async def add_memory(
        body: MemoryIn, request: Request, key: ApiKey = Depends(authenticate)
    ) -> dict[str, Any]:
        """Store a memory the user stated directly; a preference supersedes the current one of its context."""
        who = required_user(request, key, body.user)
        record = await run_in_threadpool(
            service.add_memory, key.tenant, who, body.content, kind=body.kind, category=body.category,
            context_factor=body.context_factor,
        )  # fmt: skip
        return memory_json(record)

    @app.post("/v1/memory/search", tags=["memory"])
    async def search(body: SearchIn, request: Request, key: ApiKey = Depends(authenticate)) -> dict[str, Any]:
        """What the gateway would retrieve for ``query``: memories (with their history) and sessions."""
        who = required_user(request, key, body.user)
        found = await run_in_threadpool(
            service.retrieve,
            key.tenant,
            who,
            body.query,
            k_sessions=body.k_sessions,
            k_memories=body.k_memories,
        )
        return {
            "memories": [
                {**memory_json(i.memory), "score": i.score, "history": [memory_json(h) for h in i.history]}
                for i in found.memories
                if i.memory is not None
            ],
            "sessions": [
                {
                    "id": i.session.id,
                    "external_id": i.session.external_id,
                    "timestamp": i.session.timestamp,
                    "score": i.score,
                    "turns": [{"role": t.role, "content": t.content} for t in i.session.turns],
                }
                for i in found.sessions
                if i.session is not None
            ],
            "matched_factor": found.matched_factor,
        }

    @app.get("/v1/memory/memories/{memory_id}/history", tags=["memory"])
    async def history(
        memory_id: int,
        request: Request,
        key: ApiKey = Depends(authenticate),
        user: str | None = Depends(user_param),
    ) -> dict[str, Any]:
        """Every version of this memory's context, oldest first (supersession history)."""
        who = required_user(request, key, user)
        chain = await run_in_threadpool(service.chain, key.tenant, who, memory_id)
        return {"object": "list", "data": [memory_json(m) for m in chain]}

    @app.post("/v1/memory/memories/{memory_id}/correct", tags=["memory"], status_code=201)
    async def correct(
        memory_id: int, body: CorrectionIn, request: Request, key: ApiKey = Depends(authenticate)
    ) -> dict[str, Any]:
        """A corrected version of a memory; the old one stays in the history, superseded."""
        who = required_user(request, key, body.user)
        record = await run_in_threadpool(service.correct, key.tenant, who, memory_id, body.content)
        return memory_json(record)

    @app.delete("/v1/memory/memories/{memory_id}", tags=["memory"])
    async def delete_memory(
        memory_id: int,
        request: Request,
        key: ApiKey = Depends(authenticate),
        user: str | None = Depends(user_param),
    ) -> dict[str, Any]:
        """Remove one memory (with its history and embeddings)."""
        who = required_user(request, key, user)
        await run_in_threadpool(service.delete_memory, key.tenant, who, memory_id)
        return {"deleted": memory_id}

    @app.delete("/v1/memory/users", tags=["memory"])
    async def delete_user(
        request: Request, key: ApiKey = Depends(authenticate), user: str | None = Depends(user_param)
    ) -> dict[str, Any]:
        """Delete everything stored about the user; the answer lists rows deleted and rows left (zero)."""
        who = required_user(request, key, user)
        deleted = await run_in_threadpool(service.delete_user, key.tenant, who)
        exists = await run_in_threadpool(service.has_user, key.tenant, who)
        return {"deleted": deleted, "user_exists": exists}

    @app.get("/v1/memory/export", tags=["memory"])
    async def export(
        request: Request, key: ApiKey = Depends(authenticate), user: str | None = Depends(user_param)
    ) -> dict[str, Any]:
        """Everything stored about the user as JSON: sessions, memories (all versions), history."""
        who = required_user(request, key, user)
        return await run_in_threadpool(service.export_user, key.tenant, who)

    # --- operations -------------------------------------------------------------------------

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> Response:
        """Liveness and store readiness (no authentication)."""
        try:
            await run_in_threadpool(service.ping)
        except Exception:
            return JSONResponse({"status": "store unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", tags=["ops"])
    async def metrics_text() -> Response:
        """Prometheus text exposition."""
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    app.add_middleware(RequestContext, metrics=metrics)
    return app


class ChunkEvents:
    """The server-sent events of one streamed answer. A content event, sent for every piece, is the
    JSON-escaped text between a prefix and a suffix made once per answer (the same bytes as
    serialising the whole event each time, without rebuilding and re-encoding the envelope)."""

    def __init__(self, ident: dict[str, Any]) -> None:
        self.ident = ident
        blank = self.event([{"index": 0, "delta": {"content": ""}, "finish_reason": None}])
        cut = blank.rindex(b'"content": ""') + len(b'"content": ')
        self._prefix, self._suffix = blank[:cut], blank[cut + 2 :]

    def event(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        payload = {**self.ident, "object": "chat.completion.chunk", "choices": choices, **extra}
        return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"

    def content(self, text: str) -> bytes:
        return self._prefix + json.dumps(text, ensure_ascii=False).encode("utf-8") + self._suffix


def to_message(m: ChatMessage, index: int) -> Message:
    """An OpenAI message as a core Message (text parts joined; ``developer`` is a system message)."""
    content = m.content
    if isinstance(content, list):
        texts = [p.text for p in content if p.type == "text" and p.text is not None]
        if len(texts) != len(content):
            raise ApiError(
                400, f"messages[{index}].content: only text parts are supported", "invalid_request_error"
            )
        content = "".join(texts)
    if content is None:
        raise ApiError(400, f"messages[{index}].content: missing", "invalid_request_error")
    role = "system" if m.role == "developer" else m.role
    return Message(role=role, content=content)


def inject(messages: list[Message], block: str) -> list[Message]:
    """The memory block appended to the first system message, or as a new leading system message."""
    if messages and messages[0].role == "system":
        first = Message(role="system", content=f"{messages[0].content}\n\n{block}")
        return [first, *messages[1:]]
    return [Message(role="system", content=block), *messages]


# Request fields that would change the answer but that the gateway cannot forward: refused, never dropped.
UNSUPPORTED = (
    "tools", "tool_choice", "functions", "function_call", "logprobs", "top_logprobs", "logit_bias",
    "frequency_penalty", "presence_penalty", "audio", "modalities", "prediction",
)  # fmt: skip


def generate_config(body: ChatRequest) -> GenerateConfig:
    """The request's sampling and output settings; a field the gateway cannot honour is a 400."""
    extra = body.model_extra or {}
    for name in UNSUPPORTED:
        if extra.get(name) not in (None, False, [], {}):
            raise ApiError(400, f"{name}: not supported by this gateway", "invalid_request_error")
    if extra.get("n") not in (None, 1):
        raise ApiError(400, "n: only one choice per request is supported", "invalid_request_error")
    stop = (body.stop,) if isinstance(body.stop, str) else (tuple(body.stop) if body.stop else None)
    schema, schema_name = response_schema(body.response_format)
    return GenerateConfig(
        temperature=body.temperature if body.temperature is not None else 1.0,
        max_tokens=body.max_completion_tokens or body.max_tokens or 1024,
        top_p=body.top_p,
        seed=body.seed,
        stop=stop,
        json_schema=schema,
        schema_name=schema_name,
    )


def response_schema(fmt: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """``response_format`` as the model layer's (json_schema, schema_name)."""
    if not fmt or fmt.get("type") in (None, "text"):
        return None, "output"
    kind = fmt.get("type")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ApiError(
                400, "response_format.json_schema.schema: an object is required", "invalid_request_error"
            )
        return spec["schema"], str(spec.get("name") or "output")
    if kind == "json_object":
        schema = fmt.get("schema")
        return (schema if isinstance(schema, dict) else {"type": "object"}), "output"
    raise ApiError(400, f"response_format.type: unknown type {kind!r}", "invalid_request_error")


__all__ = ["ApiError", "ChatRequest", "GatewayConfig", "PersonalignError", "create_app", "inject"]
