"""What both batch providers share: one HTTP client on the spec's base URL, and one request call
whose failures become `ModelCallError`s with the key scrubbed."""

from __future__ import annotations

from typing import Any

import httpx

from personalign.errors import ModelCallError
from personalign.llm.backends._http import RETRYABLE_STATUS, scrub
from personalign.llm.spec import ModelSpec


class HttpBatchClient:
    """Base of the providers: `_call` sends one batch-API request and raises on any non-200."""

    def __init__(
        self,
        spec: ModelSpec,
        key: str | None,
        headers: dict[str, str],
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        assert spec.base_url is not None
        self.spec = spec
        self._key = key
        self._client = httpx.AsyncClient(
            base_url=spec.base_url, headers=headers, transport=transport, timeout=spec.timeout
        )

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        label = self.spec.label
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ModelCallError(
                scrub(f"{label} batch: {type(exc).__name__}: {exc}", self._key), retryable=True
            ) from None
        if response.status_code != 200:
            body = scrub(response.text[:300], self._key)
            raise ModelCallError(
                f"{label} batch: {method} {path}: HTTP {response.status_code}: {body}",
                retryable=response.status_code in RETRYABLE_STATUS,
                status_code=response.status_code,
            )
        return response

    async def aclose(self) -> None:
        await self._client.aclose()
