"""The Anthropic Messages API, over httpx. JSON schemas are enforced with a forced tool call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from personalign.errors import ModelCallError
from personalign.llm.backends._http import read_key, status_error, transport_error
from personalign.llm.spec import ModelSpec
from personalign.llm.types import BackendResponse, GenerateConfig, Usage, normalize_finish_reason
from personalign.types import Message

API_VERSION = "2023-06-01"


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
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        body: dict[str, Any] = {
            "model": self.spec.model,
            "max_tokens": config.max_tokens,
            "temperature": config.temperature,
            "messages": [{"role": m.role, "content": m.content} for m in messages if m.role != "system"],
        }
        if system:
            body["system"] = system
        if config.reasoning:
            # Extended thinking takes a token budget inside max_tokens and no sampling changes.
            budget = max(1024, config.max_tokens // 2)
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = max(config.max_tokens, budget + 1024)
            del body["temperature"]
        elif config.top_p is not None:
            body["top_p"] = config.top_p
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
            body["tool_choice"] = {"type": "tool", "name": config.schema_name}
        return body

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        label = self.spec.label
        try:
            response = await self._client.post(
                "/v1/messages", json=self.payload(messages, config), timeout=timeout
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, label) from None
        if response.status_code != 200:
            raise status_error(response, label, self._key)
        try:
            data = response.json()
            blocks = data["content"]
        except (ValueError, KeyError, TypeError):
            raise ModelCallError(f"{label}: malformed response body", retryable=True) from None
        texts, thinking = [], []
        for block in blocks:
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
            },
        )

    async def aclose(self) -> None:
        await self._client.aclose()
