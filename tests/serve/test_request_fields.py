"""Request fields: what is forwarded, what is refused (never silently dropped), and exchanges that
cannot be stored (never acknowledged)."""

from __future__ import annotations

from typing import Any

from personalign.llm import ModelFactory, parse_model_spec
from personalign.llm.backends.scripted import ScriptedBackend
from tests.serve.conftest import Gateway, sse_events

SCHEMA = {"type": "object", "properties": {"label": {"type": "string"}}, "required": ["label"]}


def test_response_format_is_forwarded(gateway: Gateway) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA}}
    r = gateway.chat("Label this.", response_format=fmt)
    assert r.status_code == 200
    assert gateway.stub is not None and gateway.stub.stats.last_body is not None
    sent = gateway.stub.stats.last_body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == SCHEMA
    assert sent["json_schema"]["name"] == "verdict"
    r = gateway.chat("Label this.", response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    assert r.status_code == 400 and "response_format.json_schema.schema" in r.json()["error"]["message"]


def test_fields_the_gateway_cannot_honour_are_refused(gateway: Gateway) -> None:
    assert gateway.stub is not None
    before = gateway.stub.stats.requests
    for extra, field in (
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ):
        r = gateway.chat("hello", **extra)
        assert r.status_code == 400, extra
        assert r.json()["error"]["message"].startswith(field)
    assert gateway.stub.stats.requests == before  # nothing reached the upstream
    assert gateway.chat("hello", n=1, tools=[]).status_code == 200


def test_repeated_client_request_id_records_both_turns(gateway: Gateway) -> None:
    for _ in range(2):
        r = gateway.client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Same id twice."}], "user": "ana"},
            headers={**gateway.headers(), "X-Request-Id": "client-1"},
        )
        assert r.status_code == 200 and r.headers["x-request-id"] == "client-1"
    export = gateway.client.get("/v1/memory/export", params={"user": "ana"}, headers=gateway.headers()).json()
    assert [s["metadata"]["request_id"] for s in export["sessions"]] == ["client-1", "client-1"]


def test_a_message_the_store_would_refuse_is_refused_before_the_upstream(gateway: Gateway) -> None:
    assert gateway.stub is not None
    before = gateway.stub.stats.requests
    r = gateway.chat("x" * 50_001)
    assert r.status_code == 400 and "content" in r.json()["error"]["message"]
    assert gateway.stub.stats.requests == before
    # without memory nothing is stored, so nothing is refused
    assert gateway.chat("x" * 50_001, personalign={"memory": False}).status_code == 200


def test_an_answer_that_cannot_be_stored_is_not_acknowledged(gateway_factory: Any) -> None:
    spec = "scripted/big"

    def factory() -> ModelFactory:
        backend = ScriptedBackend(lambda messages, config: "word " * 12_000)  # 60,000 characters
        return ModelFactory(cache=None, backends={str(parse_model_spec(spec)): backend})

    gw = gateway_factory(upstream=f"stub={spec}", factory=factory)
    r = gw.chat("Write a very long essay.")
    assert r.status_code == 500 and r.json()["error"]["type"] == "storage_error"
    r = gw.client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Again."}], "user": "ana", "stream": True},
        headers=gw.headers(),
    )
    events = sse_events(r.text)
    assert "[DONE]" not in events and events[-1]["error"]["type"] == "storage_error"
    export = gw.client.get("/v1/memory/export", params={"user": "ana"}, headers=gw.headers())
    assert export.status_code == 404  # neither exchange was stored (nor acknowledged), so no user row either


def test_text_parts_and_developer_messages(gateway: Gateway) -> None:
    payload = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "Porto."}],
            },
        ],
        "user": "ana",
    }
    r = gateway.client.post("/v1/chat/completions", json=payload, headers=gateway.headers())
    assert r.status_code == 200
    assert gateway.stub is not None and gateway.stub.stats.last_body is not None
    sent = gateway.stub.stats.last_body["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[-1] == {"role": "user", "content": "Hello Porto."}
    payload["messages"][1]["content"] = [{"type": "image_url", "image_url": {"url": "x"}}]  # type: ignore[index]
    r = gateway.client.post("/v1/chat/completions", json=payload, headers=gateway.headers())
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("messages[1].content")
