"""Any OpenAI-compatible `/chat/completions` endpoint, over httpx."""

from __future__ import annotations

import itertools
import math
import ssl
from collections.abc import Sequence
from typing import Any

import httpx

from personalign.errors import ModelCallError
from personalign.llm.backends._http import read_key, scrub, status_error, transport_error
from personalign.llm.spec import ModelSpec
from personalign.llm.types import BackendResponse, GenerateConfig, Usage
from personalign.types import Message

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


def reasoning_fields(reasoning: bool | None, param: str) -> dict[str, Any]:
    """Request fields that turn reasoning on or off, in the style the server understands."""
    if reasoning is None or param == "none":
        return {}
    if param == "chat_template_kwargs":  # vLLM, SGLang, llama.cpp server (Qwen3-style templates)
        return {"chat_template_kwargs": {"enable_thinking": reasoning}}
    if param == "reasoning":  # OpenRouter
        return {"reasoning": {"enabled": reasoning}}
    if param == "reasoning_effort":  # OpenAI reasoning models
        return {"reasoning_effort": "medium" if reasoning else "minimal"}
    raise ValueError(f"unknown reasoning_param {param!r}")


class OpenAICompatBackend:
    def __init__(self, spec: ModelSpec, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        assert spec.base_url is not None
        self.spec = spec
        self.supports_json_schema = spec.schema_mode != "none"
        self.supports_reasoning = spec.reasoning_param != "none"
        self._key = read_key(spec.key_env, spec.label)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
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
        body: dict[str, Any] = {
            "model": self.spec.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": config.temperature,
            "max_tokens": config.max_tokens,
        }
        if config.top_p is not None:
            body["top_p"] = config.top_p
        if config.seed is not None:
            body["seed"] = config.seed
        if config.stop:
            body["stop"] = list(config.stop)
        fmt = response_format(config, self.spec.schema_mode)
        if fmt is not None:
            body["response_format"] = fmt
        body.update(reasoning_fields(config.reasoning, self.spec.reasoning_param))
        return body

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        label = self.spec.label
        try:
            response = await next(self._next).post(
                "/chat/completions", json=self.payload(messages, config), timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, label) from None
        if response.status_code != 200:
            raise status_error(response, label, self._key)
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            usage = data.get("usage") or {}
            tokens = Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            body = scrub(response.text[:200], self._key)
            raise ModelCallError(f"{label}: malformed response body: {body!r}", retryable=True) from None
        if not isinstance(text, str):
            raise ModelCallError(f"{label}: message content is not text", retryable=True)
        return BackendResponse(
            text=text,
            usage=tokens,
            raw={
                "id": data.get("id"),
                "finish_reason": choice.get("finish_reason"),
                "reasoning": message.get("reasoning_content") or message.get("reasoning"),
            },
        )

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
