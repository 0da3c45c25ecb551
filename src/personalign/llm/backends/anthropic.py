"""The Anthropic Messages API, over httpx. JSON schemas are enforced with a forced tool call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from personalign.errors import ModelCallError
from personalign.llm.backends._http import read_key, status_error, transport_error
from personalign.llm.capabilities import anthropic_fields
from personalign.llm.ratelimit import rate_headers
from personalign.llm.spec import ModelSpec
from personalign.llm.types import BackendResponse, GenerateConfig, Usage, normalize_finish_reason
from personalign.types import Message

API_VERSION = "2023-06-01"


def message_response(data: Any, unsent: Sequence[str] = ()) -> BackendResponse:
    """A Messages API body as a `BackendResponse` (direct calls and batch results alike); raises
    KeyError/TypeError/AttributeError on a malformed body."""
    texts, thinking = [], []
    for block in data["content"]:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            texts.append(json.dumps(block.get("input", {}), ensure_ascii=False))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
    usage = data.get("usage") or {}
    return BackendResponse(
        text="".join(texts),
        usage=Usage(
            prompt_tokens=int(usage.get("input_tokens") or 0),
            completion_tokens=int(usage.get("output_tokens") or 0),
        ),
        finish_reason=normalize_finish_reason(data.get("stop_reason")),
        raw={
            "id": data.get("id"),
            "stop_reason": data.get("stop_reason"),
            "reasoning": "".join(thinking) or None,
            **({"unsent": list(unsent)} if unsent else {}),
        },
    )


class AnthropicBackend:
    supports_json_schema = True
    supports_reasoning = True

    def __init__(self, spec: ModelSpec, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        assert spec.base_url is not None
        self.spec = spec
        self._key = read_key(spec.key_env, spec.label)
        headers = {"anthropic-version": API_VERSION}
        if self._key:
            headers["x-api-key"] = self._key
        self._client = httpx.AsyncClient(
            base_url=spec.base_url, headers=headers, transport=transport, timeout=spec.timeout
        )

    def payload(self, messages: Sequence[Message], config: GenerateConfig) -> dict[str, Any]:
        """The request body under the capability rules (`llm.capabilities.anthropic_fields`):
        with extended thinking, no temperature, the budget inside max_tokens, and a schema asked
        for with an optional tool (the API refuses a forced tool call while thinking)."""
        return self._payload(messages, config)[0]

    def _payload(
        self, messages: Sequence[Message], config: GenerateConfig
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        shaped = anthropic_fields(
            self.spec.caps,
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_tokens,
            reasoning=config.reasoning,
        )
        body: dict[str, Any] = {
            "model": self.spec.model,
            **shaped.fields,
            "messages": [{"role": m.role, "content": m.content} for m in messages if m.role != "system"],
        }
        if system:
            body["system"] = system
        if config.stop:
            body["stop_sequences"] = list(config.stop)
        if config.json_schema is not None:
            body["tools"] = [
                {
                    "name": config.schema_name,
                    "description": "Record the answer in this structure.",
                    "input_schema": config.json_schema,
                }
            ]
            forced = {"type": "tool", "name": config.schema_name}
            body["tool_choice"] = {"type": "auto"} if shaped.thinking else forced
        return body, shaped.unsent

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        label = self.spec.label
        body, unsent = self._payload(messages, config)
        try:
            response = await self._client.post("/v1/messages", json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise transport_error(exc, label) from None
        if response.status_code != 200:
            raise status_error(response, label, self._key)
        try:
            parsed = message_response(response.json(), unsent)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ModelCallError(f"{label}: malformed response body", retryable=True) from None
        headers = rate_headers(response.headers)
        if headers:
            parsed.headers = headers
        return parsed

    async def aclose(self) -> None:
        await self._client.aclose()
