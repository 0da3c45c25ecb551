"""Anthropic Message Batches (``/v1/messages/batches``): the requests go inline as
``{"custom_id", "params"}``; results are a JSONL download of ``{"custom_id", "result"}`` lines
whose type is ``succeeded``, ``errored``, ``canceled`` or ``expired``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from personalign.errors import ModelCallError
from personalign.llm.backends._http import RETRYABLE_STATUS, read_key, scrub
from personalign.llm.backends.anthropic import API_VERSION, message_response
from personalign.llm.batch.core import BatchItem, BatchRequest, JobState, JobStatus
from personalign.llm.spec import ModelSpec

# Error types of requests that may succeed when submitted again.
TRANSIENT_ERRORS = {"api_error", "overloaded_error", "rate_limit_error", "timeout_error"}


class AnthropicBatchProvider:
    name = "anthropic"
    max_requests = 100_000  # the API's per-batch limits: 100,000 requests, 256 MB
    max_bytes = 240_000_000

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

    async def submit(self, requests: Sequence[BatchRequest], tag: str) -> str:
        body = {"requests": [{"custom_id": r.custom_id, "params": r.body} for r in requests]}
        created = await self._call("POST", "/v1/messages/batches", json=body)
        return str(created.json()["id"])

    async def find(self, tag: str) -> str | None:
        return None  # batches carry no metadata to recognise ours by

    async def poll(self, job_id: str) -> JobState:
        data = (await self._call("GET", f"/v1/messages/batches/{job_id}")).json()
        raw_status = str(data.get("processing_status"))
        counts = {k: int(v) for k, v in (data.get("request_counts") or {}).items()}
        if raw_status != "ended":
            status: JobStatus = "running"
        elif data.get("cancel_initiated_at"):
            status = "cancelled"
        elif counts.get("expired"):
            status = "expired"
        else:
            status = "completed"
        url = data.get("results_url")
        return JobState(job_id, status, raw_status, counts, {"results_url": url} if url else {})

    async def fetch(self, state: JobState) -> list[str]:
        url = state.files.get("results_url") or ""
        if not url.startswith(str(self._client.base_url).rstrip("/") + "/"):
            url = f"/v1/messages/batches/{state.job_id}/results"  # our key goes to our endpoint only
        return (await self._call("GET", url)).text.splitlines()

    def parse_line(self, data: Any) -> BatchItem:
        cid = data["custom_id"]
        if not isinstance(cid, str):
            raise TypeError("custom_id is not a string")
        result = data["result"]
        kind = result["type"]
        if kind == "succeeded":
            return BatchItem(cid, response=message_response(result["message"]))
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or result.get("error") or {}
            etype = str(error.get("type") or "error")
            return BatchItem(
                cid,
                error=f"{etype}: {error.get('message') or ''}".strip(),
                retryable=etype in TRANSIENT_ERRORS,
            )
        if kind in ("canceled", "expired"):
            return BatchItem(cid, error=f"request {kind} with its batch", retryable=True)
        raise ValueError(f"unknown result type {kind!r}")

    async def cancel(self, job_id: str) -> None:
        await self._call("POST", f"/v1/messages/batches/{job_id}/cancel")

    async def aclose(self) -> None:
        await self._client.aclose()
