"""Rate limits, metrics, structured logs without secrets or message text, health."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from personalign.serve.observe import Metrics, RateLimiter, TokenBucket
from tests.serve.conftest import Gateway


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=2.0, burst=3)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.25) == pytest.approx(0.25)  # half a token refilled
    assert bucket.take(0.5) == 0.0
    assert bucket.take(10.0) == 0.0 and bucket.tokens == pytest.approx(2.0)  # capped at burst


def test_rate_limiter_is_per_key() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert limiter.check("k1", 1.0, 1) == 0.0
    assert limiter.check("k1", 1.0, 1) == pytest.approx(1.0)
    assert limiter.check("k2", 1.0, 1) == 0.0
    now[0] = 1.0
    assert limiter.check("k1", 1.0, 1) == 0.0


def test_429_with_retry_after_and_other_keys_unaffected(gateway: Gateway) -> None:
    codes = [gateway.client.get("/v1/models", headers=gateway.headers("slow")).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    r = gateway.client.get("/v1/models", headers=gateway.headers("slow"))
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert gateway.client.get("/v1/models", headers=gateway.headers("a")).status_code == 200
    metrics = gateway.client.get("/metrics").text
    assert re.search(r'personalign_rate_limited_total\{key_id="[0-9a-f]+"\} 2', metrics)


_SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]+="([^"\\]|\\.)*",?)*\})? [-+0-9.eE]+(Inf|NaN)?$'
)


def test_metrics_exposition(gateway: Gateway) -> None:
    gateway.chat("How is the weather in Porto?")
    gateway.chat("How is the weather in Porto?", stream=True)
    r = gateway.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for line in text.strip().splitlines():
        assert line.startswith("# ") or _SAMPLE.match(line), line
    assert 'personalign_http_requests_total{path="/v1/chat/completions",status="200"} 2' in text
    assert "personalign_turns_recorded_total 2" in text
    assert 'personalign_http_request_seconds_bucket{le="+Inf",path="/v1/chat/completions"} 2' in text
    assert re.search(r'personalign_tokens_total\{kind="completion",model="stub"\} [1-9]', text)


def test_metrics_escape_label_values() -> None:
    m = Metrics()
    m.inc("x_total", path='a"b\\c\nd')
    assert 'x_total{path="a\\"b\\\\c\\nd"} 1' in m.render()


def test_logs_are_json_without_secrets_text_or_user_ids(gateway: Gateway, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="personalign.serve")
    secret_text = "my bank PIN is 4321 and I prefer Zanzibar"
    gateway.chat(secret_text, user="ana.secret@example.com")
    gateway.chat(secret_text, user="ana.secret@example.com", stream=True)
    gateway.client.get("/v1/models", headers={"Authorization": "Bearer pk_bad_wrongwrongwrongwrong"})
    lines = [r.getMessage() for r in caplog.records if r.name == "personalign.serve"]
    assert len(lines) >= 3
    events = [json.loads(line) for line in lines]
    requests = [e for e in events if e["event"] == "request"]
    assert {e["status"] for e in requests} >= {200, 401}
    chat = [e for e in requests if e["path"] == "/v1/chat/completions"]
    assert len(chat) == 2 and all(e["tenant"] == "acme" and e["request_id"].startswith("req_") for e in chat)
    assert chat[0]["user"] and chat[0]["user"] == chat[1]["user"]  # a stable pseudonym
    everything = "\n".join(lines)
    for leaked in (
        "PIN",
        "4321",
        "Zanzibar",
        "ana.secret",
        gateway.keys["a"],
        gateway.keys["a"].split("_")[-1],
    ):
        assert leaked not in everything


def test_healthz_needs_no_key(gateway: Gateway) -> None:
    r = gateway.client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"} and "x-request-id" in r.headers


def test_a_log_line_the_logger_would_drop_is_not_serialised(caplog: Any) -> None:
    from personalign.serve.observe import log_event

    rendered: list[int] = []

    class Field:
        def __str__(self) -> str:
            rendered.append(1)
            return "field"

    caplog.set_level(logging.WARNING, logger="personalign.serve")
    log_event("request", value=Field())
    assert rendered == []  # the access line cost a JSON dump per request even with INFO off
    caplog.set_level(logging.INFO, logger="personalign.serve")
    log_event("request", value=Field())
    assert rendered == [1] and '"value": "field"' in caplog.records[-1].getMessage()
