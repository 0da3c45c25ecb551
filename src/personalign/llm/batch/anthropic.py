"""Anthropic Message Batches (``/v1/messages/batches``): the requests go inline as
``{"custom_id", "params"}``; results are a JSONL download of ``{"custom_id", "result"}`` lines
whose type is ``succeeded``, ``errored``, ``canceled`` or ``expired``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from personalign.llm.backends._http import read_key
from personalign.llm.backends.anthropic import API_VERSION, message_response
from personalign.llm.batch._http import HttpBatchClient
from personalign.llm.batch.core import BatchItem, BatchRequest, JobState, JobStatus
from personalign.llm.spec import ModelSpec

# Error types of requests that may succeed when submitted again.
TRANSIENT_ERRORS = {"api_error", "overloaded_error", "rate_limit_error", "timeout_error"}


class AnthropicBatchProvider(HttpBatchClient):
    name = "anthropic"
    max_requests = 100_000  # the API's per-batch limits: 100,000 requests, 256 MB
    max_bytes = 240_000_000

    def __init__(self, spec: ModelSpec, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        key = read_key(spec.key_env, spec.label)
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}
        super().__init__(spec, key, headers, transport)

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
