"""Any OpenAI-compatible `/chat/completions` endpoint.

Plain-``http://`` endpoints (local and LAN servers) are reached through the lean keep-alive
client in `_http1` unless an HTTP proxy is configured; ``https://`` endpoints, proxies and
injected transports go through httpx.
"""

from __future__ import annotations

import itertools
import json
import math
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from personalign.errors import ModelCallError
from personalign.llm.backends._http import http_status_error, read_key, scrub, transport_error
from personalign.llm.backends._http1 import Http1Pool, TransportFailure, lean_client_applies
from personalign.llm.cache import json_string
from personalign.llm.capabilities import openai_fields, reasoning_toggle
from personalign.llm.ratelimit import rate_headers
from personalign.llm.spec import ModelSpec
from personalign.llm.types import (
    BackendResponse,
    GenerateConfig,
    StreamChunk,
    Usage,
    normalize_finish_reason,
)
from personalign.types import Message

if TYPE_CHECKING:  # imported where used: ~40 ms that plain-http endpoints never need
    import httpx

CONNECTIONS_PER_SHARD = 8


def response_format(config: GenerateConfig, schema_mode: str) -> dict[str, Any] | None:
    if config.json_schema is None or schema_mode == "none":
        return None
    if schema_mode == "json_object":  # llama-cpp-python server style
        return {"type": "json_object", "schema": config.json_schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": config.schema_name, "schema": config.json_schema, "strict": False},
    }


class EventLines:
    """Server-sent events split into the payloads of their ``data:`` lines, fed as bytes arrive;
    after ``data: [DONE]`` nothing more is returned (the rest of the body is only drained)."""

    def __init__(self) -> None:
        self._partial = b""
        self.done = False

    def feed(self, data: bytes) -> list[str]:
        if self.done:
            return []
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out: list[str] = []
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event names
            payload = line[5:].strip().decode("utf-8", errors="replace")
            if payload == "[DONE]":
                self.done = True
                break
            out.append(payload)
        return out


def reasoning_fields(reasoning: bool | None, param: str) -> dict[str, Any]:
    """Request fields that turn reasoning on or off, in the style the server understands."""
    return {} if reasoning is None else reasoning_toggle(reasoning, param)


def chat_completion_response(data: Any, label: str) -> BackendResponse:
    """A chat completion body as a `BackendResponse` (direct calls and batch result lines alike);
    raises KeyError/TypeError/... on a malformed body, `ModelCallError` when the content is not text."""
    choice = data["choices"][0]
    message = choice["message"]
    text = message.get("content") or ""
    usage = data.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    tokens = Usage(
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        reasoning_tokens=int(details.get("reasoning_tokens") or usage.get("reasoning_tokens") or 0),
    )
    if not isinstance(text, str):
        raise ModelCallError(f"{label}: message content is not text", retryable=True)
    return BackendResponse(
        text=text,
        usage=tokens,
        finish_reason=normalize_finish_reason(choice.get("finish_reason")),
        raw={
            "id": data.get("id"),
            "finish_reason": choice.get("finish_reason"),
            "reasoning": message.get("reasoning_content") or message.get("reasoning"),
        },
    )


class OpenAICompatBackend:
    def __init__(self, spec: ModelSpec, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        assert spec.base_url is not None
        self.spec = spec
        self.supports_json_schema = spec.schema_mode != "none"
        caps = spec.caps
        self.supports_reasoning = spec.reasoning_param != "none" and (
            caps.passthrough or spec.reasoning_param != "reasoning_effort" or bool(caps.efforts)
        )
        self._key = read_key(spec.key_env, spec.label)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._clients: list[httpx.AsyncClient] = []
        self._stream_client: httpx.AsyncClient | None = None
        self._headers = headers
        self._transport = transport
        self._lean: Http1Pool | None = None
        if transport is None and lean_client_applies(spec.base_url):
            self._lean = Http1Pool(spec.base_url, max_connections=spec.concurrency, headers=headers)
            return
        import httpx

        # httpcore scans every pooled connection on each request, so one pool of 64 connections
        # costs ~10 ms of CPU per call; shards of at most 8 connections keep that flat.
        shards = max(1, math.ceil(spec.concurrency / CONNECTIONS_PER_SHARD))
        per_shard = math.ceil(spec.concurrency / shards)
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        tls = ssl.create_default_context()  # one TLS context for all shards (each costs ~25 ms)
        self._clients = [
            httpx.AsyncClient(
                base_url=spec.base_url,
                headers=headers,
                limits=limits,
                transport=transport,
                timeout=spec.timeout,
                verify=tls,
            )
            for _ in range(shards)
        ]
        self._next = itertools.cycle(self._clients)

    def payload(self, messages: Sequence[Message], config: GenerateConfig) -> dict[str, Any]:
        """The request body, shaped by the model's capability row (`llm.capabilities`): the
        token-limit field's name, sampling fields only where accepted, reasoning effort, the role
        system messages go under. Raises a non-retryable `ModelCallError` for a config the model
        cannot honour (e.g. reasoning off on an o-series model)."""
        return self._payload(messages, config)[0]

    def _payload(
        self, messages: Sequence[Message], config: GenerateConfig
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        caps = self.spec.caps
        try:
            shaped = openai_fields(
                caps,
                temperature=config.temperature,
                top_p=config.top_p,
                max_tokens=config.max_tokens,
                reasoning=config.reasoning,
                reasoning_param=self.spec.reasoning_param,
            )
        except ValueError as exc:
            raise ModelCallError(f"{self.spec.label}: {exc}", retryable=False) from None
        system_role = caps.system_role
        body: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [
                {"role": system_role if m.role == "system" else m.role, "content": m.content}
                for m in messages
            ],
        }
        fields = dict(shaped.fields)
        toggles: dict[str, Any] = {
            k: fields.pop(k) for k in ("chat_template_kwargs", "reasoning", "reasoning_effort") if k in fields
        }
        body.update(fields)
        if config.seed is not None:
            body["seed"] = config.seed
        if config.stop:
            body["stop"] = list(config.stop)
        fmt = response_format(config, self.spec.schema_mode)
        if fmt is not None:
            body["response_format"] = fmt
        body.update(toggles)
        return body, shaped.unsent

    def encode_payload(self, messages: Sequence[Message], config: GenerateConfig) -> bytes:
        """`payload()` as compact UTF-8 JSON (as httpx's `json=` writes it), key order kept.

        The messages are spliced in from `json_string`, which the cache key has usually just
        computed for the same texts, so a long prompt is escaped once per call, not twice.
        """
        rest, _ = self._payload([], config)
        del rest["model"], rest["messages"]
        role = self.spec.caps.system_role
        rendered = ",".join(
            f'{{"role":{json_string(role if m.role == "system" else m.role)},'
            f'"content":{json_string(m.content)}}}'
            for m in messages
        )
        tail = json.dumps(rest, ensure_ascii=False, separators=(",", ":"), allow_nan=False)[1:]
        head = f'{{"model":{json_string(self.spec.model)},"messages":[{rendered}]'
        return (head + ("," + tail if tail != "}" else "}")).encode("utf-8")

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        label = self.spec.label
        body = self.encode_payload(messages, config)
        if self._lean is not None:
            try:
                raw = await self._lean.post(
                    "/chat/completions", body, content_type="application/json", timeout=timeout
                )
            except TransportFailure as exc:
                raise ModelCallError(f"{label}: {exc}", retryable=True) from None
            status, content, headers = raw.status, raw.body, rate_headers(raw.headers)
        else:
            import httpx

            try:
                response = await next(self._next).post(
                    "/chat/completions",
                    content=body,
                    headers={"Content-Type": "application/json"},
                    timeout=timeout,
                )
            except httpx.HTTPError as exc:
                raise transport_error(exc, label) from None
            status, content = response.status_code, response.content
            headers = rate_headers(response.headers)
        if status != 200:
            text = content.decode("utf-8", errors="replace")
            raise http_status_error(status, text, headers, label, self._key)
        parsed = self.parse_response(content)
        if headers:
            parsed.headers = headers
        unsent = self._payload([], config)[1]
        if unsent and parsed.raw is not None:
            parsed.raw["unsent"] = list(unsent)
        return parsed

    def parse_response(self, content: bytes) -> BackendResponse:
        label = self.spec.label
        try:
            return chat_completion_response(json.loads(content), label)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            body = scrub(content[:200].decode("utf-8", errors="replace"), self._key)
            raise ModelCallError(f"{label}: malformed response body: {body!r}", retryable=True) from None

    async def stream(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> AsyncIterator[StreamChunk]:
        """One streamed attempt (``"stream": true``): yield the answer's pieces as the server sends
        them (server-sent events), the last ones with the finish reason and, where the server
        reports it, the usage. Raises `ModelCallError` on an HTTP error or a malformed event; no
        retries (a stream cannot be replayed once pieces have been passed on)."""
        async for batch in self.stream_batches(messages, config, timeout=timeout):
            for chunk in batch:
                yield chunk

    async def stream_batches(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> AsyncIterator[list[StreamChunk]]:
        """As :meth:`stream`, the pieces grouped by the network read they arrived in (a proxy passes
        each group on in one write). The body is read to its end after ``[DONE]``, so the
        keep-alive connection is reused for the next call."""
        label = self.spec.label
        body = (
            self.encode_payload(messages, config)[:-1]
            + b',"stream":true,"stream_options":{"include_usage":true}}'
        )
        if self._lean is not None:
            try:
                async with self._lean.stream(
                    "/chat/completions", body, content_type="application/json", timeout=timeout
                ) as response:
                    if response.status != 200:
                        text = (await response.read()).decode("utf-8", errors="replace")
                        raise http_status_error(
                            response.status, text, rate_headers(response.headers), label, self._key
                        )
                    events = EventLines()
                    async for piece in response.pieces():
                        batch = self._parse_events(events, piece)
                        if batch:
                            yield batch
            except TransportFailure as exc:
                raise ModelCallError(f"{label}: {exc}", retryable=True) from None
            return
        import httpx

        if self._stream_client is None:
            self._stream_client = httpx.AsyncClient(
                base_url=self.spec.base_url or "",
                headers=self._headers,
                transport=self._transport,
                timeout=timeout,
                limits=httpx.Limits(
                    max_connections=self.spec.concurrency, max_keepalive_connections=self.spec.concurrency
                ),
            )
        try:
            async with self._stream_client.stream(
                "POST",
                "/chat/completions",
                content=body,
                headers={"Content-Type": "application/json"},
                timeout=timeout,
            ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise http_status_error(
                        response.status_code, text, rate_headers(response.headers), label, self._key
                    )
                events = EventLines()
                async for piece in response.aiter_bytes():
                    batch = self._parse_events(events, piece)
                    if batch:
                        yield batch
        except httpx.HTTPError as exc:
            raise transport_error(exc, label) from None

    def _parse_events(self, events: EventLines, piece: bytes) -> list[StreamChunk]:
        """The chunks of the ``data:`` events completed by ``piece`` (none after ``[DONE]``)."""
        batch: list[StreamChunk] = []
        for data in events.feed(piece):
            chunk = self.parse_stream_event(data)
            if chunk is not None:
                batch.append(chunk)
        return batch

    def parse_stream_event(self, data: str) -> StreamChunk | None:
        """One ``data:`` event of a streamed answer (None for an event that carries nothing)."""
        label = self.spec.label
        try:
            event = json.loads(data)
            if "error" in event:
                message = scrub(str(event["error"])[:300], self._key)
                raise ModelCallError(f"{label}: error in stream: {message}", retryable=False)
            choices = event.get("choices") or []
            text, finish = "", None
            if choices:
                delta = choices[0].get("delta") or {}
                text = delta.get("content") or ""
                finish = choices[0].get("finish_reason")
            usage = event.get("usage")
            tokens = (
                Usage(
                    prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    completion_tokens=int(usage.get("completion_tokens") or 0),
                )
                if isinstance(usage, dict)
                else None
            )
        except (ValueError, TypeError, AttributeError, IndexError):
            body = scrub(data[:200], self._key)
            raise ModelCallError(f"{label}: malformed stream event: {body!r}", retryable=False) from None
        if not isinstance(text, str):
            raise ModelCallError(f"{label}: streamed content is not text", retryable=False)
        if not text and finish is None and tokens is None:
            return None
        return StreamChunk(
            text=text,
            finish_reason=normalize_finish_reason(finish),
            usage=tokens,
            raw_finish_reason=None if finish is None else str(finish),
        )

    async def aclose(self) -> None:
        if self._stream_client is not None:
            await self._stream_client.aclose()
        if self._lean is not None:
            await self._lean.aclose()
        for client in self._clients:
            await client.aclose()
