"""The gateway in front of the real llama.cpp server (SmolLM2): plain and streamed answers, memory
injected from an earlier exchange, extraction by the same model in the background."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from personalign.serve import GatewayConfig, GatewayServer, KeyRing, new_key
from tests.serve.conftest import sse_events
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_gateway_over_real_llama_server(tmp_path: Path) -> None:
    key, record = new_key("acme")
    with llama_server(n_ctx=4096) as base_url:
        spec = spec_for(base_url)
        config = GatewayConfig(
            upstreams=[f"smol={spec}"],
            keys=KeyRing([record]),
            store=str(tmp_path / "gw.sqlite"),
            embedder="hash",
            extractor=spec,
            extraction_workers=1,
        )
        with GatewayServer(config) as gw, httpx.Client(base_url=gw.url, timeout=900) as client:
            headers = {"Authorization": f"Bearer {key}"}
            first = "For Professor Okafor, always lead with the raw kelp counts per transect. Say OK."
            r = client.post(
                "/v1/chat/completions",
                json={"model": "smol", "user": "ana", "max_tokens": 40, "temperature": 0,
                      "messages": [{"role": "user", "content": first}]},
                headers=headers,
            )  # fmt: skip
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["choices"][0]["message"]["content"].strip()
            assert body["choices"][0]["finish_reason"] in ("stop", "length")
            assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0
            # the answer came back while extraction was queued; let it finish before the next call so the
            # one-slot llama.cpp server does not serve a 600-token extraction ahead of it on a busy machine
            worker = gw.app.state.worker
            assert worker.stats["queued"] == 1
            assert worker.wait_idle(timeout=900)

            r = client.post(
                "/v1/chat/completions",
                json={"model": "smol", "user": "ana", "max_tokens": 40, "temperature": 0, "stream": True,
                      "stream_options": {"include_usage": True},
                      "messages": [{"role": "user", "content": "Draft the update for Professor Okafor."}]},
                headers=headers,
            )  # fmt: skip
            assert r.status_code == 200
            assert r.headers["x-personalign-memory"] == "on"
            assert int(r.headers["x-personalign-sessions"]) + int(r.headers["x-personalign-memories"]) >= 1
            events = sse_events(r.text)
            assert events[-1] == "[DONE]"
            pieces = [e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"]]
            assert sum(1 for p in pieces if p) > 3  # streamed token by token by the real server
            finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
            assert finish[-1] in ("stop", "length")

            assert worker.wait_idle(timeout=900)
            assert worker.stats["done"] + worker.stats["failed"] == worker.stats["queued"] == 2
            export = client.get("/v1/memory/export", params={"user": "ana"}, headers=headers).json()
            assert len(export["sessions"]) == 2
            # each session was either extracted or its failure recorded (never silently skipped)
            assert {e["session_id"] for e in export["extractions"]} == {s["id"] for s in export["sessions"]}
