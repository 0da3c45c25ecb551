"""The OpenAI Batch API (``/v1/files`` + ``/v1/batches``), also where an OpenAI-compatible server
implements it: a JSONL file of ``{"custom_id", "method", "url", "body"}`` lines is uploaded
with purpose ``batch``, a batch is created on it (tagged in its metadata), polled, and its
output and error files downloaded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from personalign.llm.backends._http import RETRYABLE_STATUS, read_key
from personalign.llm.backends.openai_compat import chat_completion_response
from personalign.llm.batch._http import HttpBatchClient
from personalign.llm.batch.core import BatchItem, BatchRequest, JobState, JobStatus
from personalign.llm.spec import ModelSpec

ENDPOINT = "/v1/chat/completions"
STATUS: dict[str, JobStatus] = {
    "validating": "running",
    "in_progress": "running",
    "finalizing": "running",
    "cancelling": "running",
    "completed": "completed",
    "failed": "failed",
    "expired": "expired",
    "cancelled": "cancelled",
}
# Error codes of requests a batch never ran (in its error file); they may be submitted again.
UNRUN_CODES = {"batch_expired", "batch_cancelled", "batch_failed"}


def request_lines(requests: Sequence[BatchRequest]) -> bytes:
    """The batch input file: one JSON request per line."""
    return "".join(
        json.dumps({"custom_id": r.custom_id, "method": "POST", "url": ENDPOINT, "body": r.body}) + "\n"
        for r in requests
    ).encode("utf-8")


class OpenAIBatchProvider(HttpBatchClient):
    name = "openai"
    max_requests = 50_000  # the API's per-batch limits: 50,000 requests, a 200 MB input file
    max_bytes = 190_000_000

    def __init__(
        self,
        spec: ModelSpec,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        completion_window: str = "24h",
    ) -> None:
        self.completion_window = completion_window
        key = read_key(spec.key_env, spec.label)
        super().__init__(spec, key, {"Authorization": f"Bearer {key}"} if key else {}, transport)

    async def submit(self, requests: Sequence[BatchRequest], tag: str) -> str:
        upload = await self._call(
            "POST",
            "/files",
            data={"purpose": "batch"},
            files={"file": (f"{tag}.jsonl", request_lines(requests), "application/jsonl")},
        )
        file_id = upload.json()["id"]
        created = await self._call(
            "POST",
            "/batches",
            json={
                "input_file_id": file_id,
                "endpoint": ENDPOINT,
                "completion_window": self.completion_window,
                "metadata": {"personalign_tag": tag},
            },
        )
        return str(created.json()["id"])

    async def find(self, tag: str) -> str | None:
        listed = await self._call("GET", "/batches", params={"limit": 100})
        for batch in listed.json().get("data", []):
            if (batch.get("metadata") or {}).get("personalign_tag") == tag:
                return str(batch["id"])
        return None

    async def poll(self, job_id: str) -> JobState:
        data = (await self._call("GET", f"/batches/{job_id}")).json()
        raw_status = str(data.get("status"))
        errors = (data.get("errors") or {}).get("data") or []
        return JobState(
            job_id=job_id,
            status=STATUS.get(raw_status, "running"),
            provider_status=raw_status,
            counts={k: int(v) for k, v in (data.get("request_counts") or {}).items()},
            files={k: data[k] for k in ("output_file_id", "error_file_id") if data.get(k)},
            error="; ".join(str(e.get("message")) for e in errors) or None,
        )

    async def fetch(self, state: JobState) -> list[str]:
        lines: list[str] = []
        for file_id in state.files.values():
            content = await self._call("GET", f"/files/{file_id}/content")
            lines += content.text.splitlines()
        return lines

    def parse_line(self, data: Any) -> BatchItem:
        cid = data["custom_id"]
        if not isinstance(cid, str):
            raise TypeError("custom_id is not a string")
        response = data.get("response")
        error = data.get("error")
        if response is not None and response.get("status_code") == 200:
            return BatchItem(cid, response=chat_completion_response(response["body"], self.spec.label))
        if response is not None:
            status = int(response["status_code"])
            body = response.get("body") or {}
            message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
            return BatchItem(
                cid,
                error=f"HTTP {status}: {message or 'error'}",
                status_code=status,
                retryable=status in RETRYABLE_STATUS,
            )
        if error is not None:
            code = str(error.get("code") or "error")
            return BatchItem(
                cid, error=f"{code}: {error.get('message') or ''}".strip(), retryable=code in UNRUN_CODES
            )
        raise KeyError("neither response nor error")

    async def cancel(self, job_id: str) -> None:
        await self._call("POST", f"/batches/{job_id}/cancel")
