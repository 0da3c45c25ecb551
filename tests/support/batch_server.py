"""A fake batch endpoint over real HTTP: OpenAI's files + batches API and Anthropic's Message
Batches, with delays, per-request errors, missing/extra/garbled/out-of-order lines and expiry.

    with BatchServer(delay=0.5, faults=BatchFaults(error_ids={...})) as srv:
        spec = f"openai-compat/m@{srv.base_url}"          # OpenAI shapes under /v1
        spec = f"anthropic/m@{srv.root_url}"              # Anthropic shapes under /v1/messages/batches

A job is `delay` seconds in progress after creation, then ends. Answers echo the last message
(``reply to: <text>``), or come from `responder` (as `StubServer`'s do, e.g. the scripted
model's `default_responder`, so a batch run and a direct run against the stub get the same
replies), or, with `forward` (an OpenAI-compatible base URL, OpenAI shapes only), from a real
server: a job's requests are sent there one by one in a worker thread, and the job ends once
all are answered, as a provider's batch would run them. `stats` records every upload, create
(with its custom_ids), poll and cancel, so tests can prove nothing was submitted twice.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from personalign.llm.backends.scripted import Responder
from personalign.llm.types import GenerateConfig
from personalign.types import Message
from tests.support.stub_server import UVICORN_OPTIONS, chat_request


@dataclass
class BatchFaults:
    error_ids: set[str] = field(default_factory=set)  # answered with a 400 error line
    transient_ids: set[str] = field(default_factory=set)  # a 500 error line (the first time only)
    drop_ids: set[str] = field(default_factory=set)  # no line at all
    extra_lines: int = 0  # lines for custom_ids nobody asked for
    garbage_lines: int = 0  # lines that are not JSON
    shuffle: bool = False  # lines in reverse order
    expire_jobs: int = 0  # the first N jobs expire with only their first half answered
    fail_jobs: int = 0  # the first N jobs fail validation (no results)
    poll_errors: int = 0  # the first N polls answer 503
    lost_creates: int = 0  # the first N creates make the job but answer 502 (the answer is "lost")


@dataclass
class BatchStats:
    uploads: int = 0
    creates: list[list[str]] = field(default_factory=list)  # custom_ids of each created job
    polls: int = 0
    cancels: int = 0


@dataclass
class _Job:
    id: str
    kind: str  # "openai" | "anthropic"
    index: int
    requests: list[tuple[str, dict[str, Any]]]
    created: float
    metadata: dict[str, Any]
    cancelled: float | None = None
    output: dict[str, str] | None = None  # file name -> content, built when the job ends
    # With `forward`: each request's chat-completion body from the real server, once all are in.
    forwarded: dict[str, dict[str, Any]] | None = None


def _reply(body: dict[str, Any]) -> tuple[str, int, int]:
    messages = body.get("messages") or []
    last = messages[-1]["content"] if messages else ""
    prompt = sum(len(str(m.get("content", "")).split()) for m in messages) + len(
        str(body.get("system", "")).split()
    )
    text = f"reply to: {last}"
    return text, prompt, len(text.split())


def _responder_reply(responder: Responder, kind: str, body: dict[str, Any]) -> tuple[str, str]:
    """The responder's text and finish reason for an OpenAI or Anthropic request body."""
    if kind == "openai":
        messages, config = chat_request(body)
    else:
        system = [Message(role="system", content=body["system"])] if body.get("system") else []
        tools = body.get("tools") or []
        config = GenerateConfig(
            temperature=body.get("temperature") or 0.0,
            max_tokens=body.get("max_tokens") or 1024,
            json_schema=tools[0]["input_schema"] if tools else None,
            schema_name=tools[0]["name"] if tools else "output",
        )
        messages = system + [Message(role=m["role"], content=m["content"]) for m in body["messages"]]
    reply = responder(messages, config)
    return (reply, "stop") if isinstance(reply, str) else (reply.text, reply.finish_reason or "stop")


class BatchServer:
    def __init__(
        self,
        *,
        delay: float = 0.3,
        faults: BatchFaults | None = None,
        responder: Responder | None = None,
        forward: str | None = None,
    ) -> None:
        self.delay = delay
        self.responder = responder
        self.forward = forward
        self.faults = faults or BatchFaults()
        self.stats = BatchStats()
        self._lock = threading.Lock()
        self._files: dict[str, str] = {}
        self._jobs: dict[str, _Job] = {}
        self._transient_done: set[str] = set()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        port = self._sock.getsockname()[1]
        self.root_url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.root_url}/v1"
        routes = [
            Route("/v1/files", self._upload, methods=["POST"]),
            Route("/v1/files/{file_id}/content", self._content, methods=["GET"]),
            Route("/v1/batches", self._create_openai, methods=["POST"]),
            Route("/v1/batches", self._list_openai, methods=["GET"]),
            Route("/v1/batches/{job_id}", self._get_openai, methods=["GET"]),
            Route("/v1/batches/{job_id}/cancel", self._cancel_openai, methods=["POST"]),
            Route("/v1/messages/batches", self._create_anthropic, methods=["POST"]),
            Route("/v1/messages/batches/{job_id}", self._get_anthropic, methods=["GET"]),
            Route("/v1/messages/batches/{job_id}/results", self._results_anthropic, methods=["GET"]),
            Route("/v1/messages/batches/{job_id}/cancel", self._cancel_anthropic, methods=["POST"]),
        ]
        self._server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), **UVICORN_OPTIONS))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="batch-server", daemon=True
        )

    def __enter__(self) -> BatchServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("batch server failed to start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    # --- job life ------------------------------------------------------------------------------
    def _add_job(
        self, kind: str, requests: list[tuple[str, dict[str, Any]]], metadata: dict[str, Any]
    ) -> _Job:
        with self._lock:
            job = _Job(
                f"batch_{uuid.uuid4().hex[:12]}",
                kind,
                len(self.stats.creates),
                requests,
                time.monotonic(),
                metadata,
            )
            self._jobs[job.id] = job
            self.stats.creates.append([cid for cid, _ in requests])
        if self.forward is not None:
            threading.Thread(target=self._run_forwarded, args=(job,), daemon=True).start()
        return job

    def _run_forwarded(self, job: _Job) -> None:
        """Answer the job's requests through the real server (sequentially, as it serves them)."""
        import httpx

        answers: dict[str, dict[str, Any]] = {}
        with httpx.Client(base_url=str(self.forward), timeout=600) as client:
            for cid, body in job.requests:
                response = client.post("/chat/completions", json=body)
                response.raise_for_status()
                answers[cid] = response.json()
        job.forwarded = answers

    def _state(self, job: _Job) -> str:
        """validating/in_progress, then completed | failed | expired | cancelled (OpenAI words)."""
        if job.index < self.faults.fail_jobs:
            return "failed"
        ended = time.monotonic() - job.created >= self.delay
        if self.forward is not None and job.forwarded is None:
            ended = False
        if job.cancelled is not None:
            state = "cancelled"
        elif not ended:
            return "in_progress"
        else:
            state = "expired" if job.index < self.faults.expire_jobs else "completed"
        if job.output is None:
            job.output = self._build_output(job, state)
        return state

    def _build_output(self, job: _Job, state: str) -> dict[str, str]:
        """Result lines: answers and error lines, with the configured faults."""
        faults = self.faults
        ran = job.requests if state == "completed" else job.requests[: len(job.requests) // 2]
        unrun = job.requests[len(ran) :]
        out: list[str] = []
        err: list[str] = []
        for cid, body in ran:
            if cid in faults.drop_ids:
                continue
            transient = cid in faults.transient_ids and cid not in self._transient_done
            if transient:
                self._transient_done.add(cid)
            if cid in faults.error_ids or transient:
                status = 400 if cid in faults.error_ids else 500
                (err if job.kind == "openai" else out).append(self._error_line(job.kind, cid, status))
                continue
            if job.forwarded is not None:
                completion = job.forwarded[cid]
                response = {"status_code": 200, "body": completion}
                out.append(json.dumps({"id": "r", "custom_id": cid, "response": response, "error": None}))
                continue
            out.append(self._answer_line(job.kind, cid, body))
        for cid, _ in unrun:
            if job.kind == "openai":
                code = "batch_expired" if state == "expired" else "batch_cancelled"
                err.append(
                    json.dumps(
                        {
                            "id": "r",
                            "custom_id": cid,
                            "response": None,
                            "error": {"code": code, "message": "not run"},
                        }
                    )
                )
            else:
                kind = "expired" if state == "expired" else "canceled"
                out.append(json.dumps({"custom_id": cid, "result": {"type": kind}}))
        for i in range(faults.extra_lines):
            out.append(
                self._answer_line(job.kind, f"stranger-{i}", {"messages": [{"role": "user", "content": "?"}]})
            )
        out += ["{not json"] * faults.garbage_lines
        if faults.shuffle:
            out.reverse()
        files = {"output": "\n".join(out) + "\n" if out else ""}
        if err:
            files["error"] = "\n".join(err) + "\n"
        return files

    def _answer_line(self, kind: str, cid: str, body: dict[str, Any]) -> str:
        text, n_in, n_out = _reply(body)
        finish = "stop"
        if self.responder is not None:
            text, finish = _responder_reply(self.responder, kind, body)
            n_out = len(text.split())
        if kind == "openai":
            completion = {
                "id": f"chatcmpl-{cid[:8]}",
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                ],
                "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
            }
            return json.dumps(
                {
                    "id": "r",
                    "custom_id": cid,
                    "response": {"status_code": 200, "body": completion},
                    "error": None,
                }
            )
        content: dict[str, Any] = {"type": "text", "text": text}
        if self.responder is not None and body.get("tools"):
            content = {"type": "tool_use", "id": "toolu_1", "name": body["tools"][0]["name"]}
            content["input"] = json.loads(text)
        message = {
            "id": f"msg_{cid[:8]}",
            "type": "message",
            "content": [content],
            "stop_reason": "max_tokens" if finish == "length" else "end_turn",
            "usage": {"input_tokens": n_in, "output_tokens": n_out},
        }
        return json.dumps({"custom_id": cid, "result": {"type": "succeeded", "message": message}})

    @staticmethod
    def _error_line(kind: str, cid: str, status: int) -> str:
        if kind == "openai":
            body = {"error": {"message": f"fake error {status}", "type": "invalid_request_error"}}
            return json.dumps(
                {
                    "id": "r",
                    "custom_id": cid,
                    "response": {"status_code": status, "body": body},
                    "error": None,
                }
            )
        etype = "invalid_request_error" if status == 400 else "api_error"
        error = {"type": "error", "error": {"type": etype, "message": f"fake error {status}"}}
        return json.dumps({"custom_id": cid, "result": {"type": "errored", "error": error}})

    # --- OpenAI shapes -------------------------------------------------------------------------
    async def _upload(self, request: Request) -> Response:
        raw = await request.body()
        boundary = request.headers["content-type"].split("boundary=", 1)[1].strip('"').encode()
        content = None
        for part in raw.split(b"--" + boundary):
            head, _, data = part.partition(b"\r\n\r\n")
            if b'name="file"' in head:
                content = data.rsplit(b"\r\n", 1)[0].decode("utf-8")
        if content is None:
            return JSONResponse({"error": {"message": "no file part"}}, status_code=400)
        file_id = f"file-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self._files[file_id] = content
            self.stats.uploads += 1
        return JSONResponse({"id": file_id, "object": "file", "purpose": "batch", "bytes": len(content)})

    async def _content(self, request: Request) -> Response:
        content = self._files.get(request.path_params["file_id"])
        if content is None:
            return JSONResponse({"error": {"message": "no such file"}}, status_code=404)
        return PlainTextResponse(content)

    async def _create_openai(self, request: Request) -> Response:
        body = await request.json()
        content = self._files.get(body.get("input_file_id", ""))
        if content is None or body.get("endpoint") != "/v1/chat/completions":
            return JSONResponse({"error": {"message": "bad input_file_id or endpoint"}}, status_code=400)
        lines = [json.loads(line) for line in content.splitlines() if line.strip()]
        job = self._add_job(
            "openai", [(line["custom_id"], line["body"]) for line in lines], body.get("metadata") or {}
        )
        if job.index < self.faults.lost_creates:
            return JSONResponse({"error": {"message": "bad gateway"}}, status_code=502)
        return JSONResponse(self._openai_view(job))

    def _openai_view(self, job: _Job) -> dict[str, Any]:
        state = self._state(job)
        view: dict[str, Any] = {
            "id": job.id,
            "object": "batch",
            "status": state,
            "metadata": job.metadata,
            "request_counts": {"total": len(job.requests)},
        }
        if job.output is not None:
            for name, text in job.output.items():
                if text:
                    file_id = f"file-{job.id}-{name}"
                    self._files[file_id] = text
                    view[f"{name}_file_id"] = file_id
        if state == "failed":
            view["errors"] = {"data": [{"code": "invalid", "message": "fake validation failure"}]}
        return view

    async def _list_openai(self, request: Request) -> Response:
        jobs = [self._openai_view(j) for j in self._jobs.values() if j.kind == "openai"]
        return JSONResponse({"object": "list", "data": jobs[::-1]})

    def _job(self, request: Request, kind: str) -> _Job | None:
        job = self._jobs.get(request.path_params["job_id"])
        return job if job is not None and job.kind == kind else None

    async def _get_openai(self, request: Request) -> Response:
        job = self._job(request, "openai")
        if job is None:
            return JSONResponse({"error": {"message": "no such batch"}}, status_code=404)
        with self._lock:
            self.stats.polls += 1
            failing = self.stats.polls <= self.faults.poll_errors
        if failing:
            return JSONResponse({"error": {"message": "unavailable"}}, status_code=503)
        return JSONResponse(self._openai_view(job))

    async def _cancel_openai(self, request: Request) -> Response:
        job = self._job(request, "openai")
        if job is None:
            return JSONResponse({"error": {"message": "no such batch"}}, status_code=404)
        with self._lock:
            self.stats.cancels += 1
            if job.output is None:
                job.cancelled = time.monotonic()
        return JSONResponse(self._openai_view(job))

    # --- Anthropic shapes ----------------------------------------------------------------------
    async def _create_anthropic(self, request: Request) -> Response:
        body = await request.json()
        job = self._add_job("anthropic", [(r["custom_id"], r["params"]) for r in body["requests"]], {})
        return JSONResponse(self._anthropic_view(job))

    def _anthropic_view(self, job: _Job) -> dict[str, Any]:
        state = self._state(job)
        ended = state != "in_progress"
        view: dict[str, Any] = {
            "id": job.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {"processing": 0 if ended else len(job.requests)},
            "cancel_initiated_at": "2026-01-01T00:00:00Z" if job.cancelled is not None else None,
            "results_url": f"{self.root_url}/v1/messages/batches/{job.id}/results" if ended else None,
        }
        if state == "expired":
            view["request_counts"]["expired"] = len(job.requests) - len(job.requests) // 2
        return view

    async def _get_anthropic(self, request: Request) -> Response:
        job = self._job(request, "anthropic")
        if job is None:
            return JSONResponse({"error": {"type": "not_found_error"}}, status_code=404)
        with self._lock:
            self.stats.polls += 1
            failing = self.stats.polls <= self.faults.poll_errors
        if failing:
            return JSONResponse({"error": {"message": "unavailable"}}, status_code=503)
        return JSONResponse(self._anthropic_view(job))

    async def _results_anthropic(self, request: Request) -> Response:
        job = self._job(request, "anthropic")
        if job is None or job.output is None:
            return JSONResponse({"error": {"type": "not_found_error"}}, status_code=404)
        return PlainTextResponse(job.output["output"])

    async def _cancel_anthropic(self, request: Request) -> Response:
        job = self._job(request, "anthropic")
        if job is None:
            return JSONResponse({"error": {"type": "not_found_error"}}, status_code=404)
        with self._lock:
            self.stats.cancels += 1
            if job.output is None:
                job.cancelled = time.monotonic()
        return JSONResponse(self._anthropic_view(job))
