"""Chat completions through the gateway: OpenAI shapes, memory injection, recorded turns, streaming."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.serve.conftest import Gateway, sse_events


def system_prompt(gw: Gateway) -> str:
    assert gw.stub is not None and gw.stub.stats.last_body is not None
    messages = gw.stub.stats.last_body["messages"]
    return "\n".join(m["content"] for m in messages if m["role"] == "system")


def test_non_streaming_shape_usage_and_request_id(gateway: Gateway) -> None:
    r = gateway.chat("Hello there, how do I plan a trip to Lisbon?")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "stub"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    # usage is the upstream's (the stub counts words)
    n_out = len(choice["message"]["content"].split())
    assert body["usage"]["completion_tokens"] == n_out
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + n_out
    assert r.headers["x-request-id"].startswith("req_")
    assert gateway.client.get("/healthz").json() == {"status": "ok"}


def test_client_request_id_is_kept_and_a_bad_one_replaced(gateway: Gateway) -> None:
    r = gateway.client.get("/v1/models", headers={**gateway.headers(), "X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert r.json()["data"][0]["id"] == "stub"
    r = gateway.client.get("/v1/models", headers={**gateway.headers(), "X-Request-Id": "a\tb c"})
    assert r.headers["x-request-id"].startswith("req_")


def test_earlier_turn_is_recorded_and_injected_next_time(gateway: Gateway) -> None:
    first = gateway.chat("For the Okafor transect report I prefer raw counts per transect.")
    assert first.headers["x-personalign-memory"] == "on"
    assert "transect" not in system_prompt(gateway)  # nothing stored yet
    second = gateway.chat("Draft the Okafor transect report for August.")
    assert second.status_code == 200
    assert second.headers["x-personalign-sessions"] == "1"
    assert "raw counts per transect" in system_prompt(gateway)
    # the client's own system message is kept, the block appended to it
    gateway.client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Okafor transect report again"}], "user": "ana"},
        headers=gateway.headers(),
    )  # fmt: skip
    assert system_prompt(gateway).startswith("You are terse.\n\n")
    assert "raw counts per transect" in system_prompt(gateway)


def test_memory_off_and_no_user_pass_through(gateway: Gateway) -> None:
    gateway.chat("I prefer the metric system for the Okafor transect report.")
    r = gateway.chat("Okafor transect report please", personalign={"memory": False})
    assert r.headers["x-personalign-memory"] == "off" and system_prompt(gateway) == ""
    r = gateway.chat("Okafor transect report please", user=None)
    assert r.headers["x-personalign-memory"] == "off" and system_prompt(gateway) == ""
    # nothing recorded for either: still one session
    export = gateway.client.get("/v1/memory/export", params={"user": "ana"}, headers=gateway.headers()).json()
    assert len(export["sessions"]) == 1


def test_user_from_header(gateway: Gateway) -> None:
    payload = {"messages": [{"role": "user", "content": "I prefer tea at the Lisbon office."}]}
    r = gateway.client.post("/v1/chat/completions", json=payload, headers=gateway.headers(user="hdr-user"))
    assert r.status_code == 200
    export = gateway.client.get("/v1/memory/export", headers=gateway.headers(user="hdr-user")).json()
    assert export["user"] == "hdr-user" and len(export["sessions"]) == 1
    turns = export["sessions"][0]["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant"]
    assert turns[0]["content"] == "I prefer tea at the Lisbon office."


def stream(gw: Gateway, text: str, **body: Any) -> tuple[httpx.Response, list[Any]]:
    payload = {"model": "stub", "messages": [{"role": "user", "content": text}], "user": "ana",
               "stream": True, **body}  # fmt: skip
    r = gw.client.post("/v1/chat/completions", json=payload, headers=gw.headers())
    return r, sse_events(r.text)


def check_stream_shape(events: list[Any], *, usage: bool) -> str:
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    if usage:
        last = chunks[-1]
        assert last["choices"] == [] and last["usage"]["completion_tokens"] > 0
        chunks = chunks[:-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)


def test_streaming_shape_matches_the_non_streamed_answer(gateway: Gateway) -> None:
    text = "Summarise the quarterly numbers for Brookfield."
    plain = gateway.chat(text, user="other").json()["choices"][0]["message"]["content"]
    r, events = stream(gateway, text, user="other2", stream_options={"include_usage": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert check_stream_shape(events, usage=True) == plain
    assert len(events) > 4  # several content pieces: streamed from the upstream, not one blob
    assert gateway.stub is not None and gateway.stub.stats.last_body["stream"] is True
    _, events = stream(gateway, text, user="other3")
    assert check_stream_shape(events, usage=False) == plain


def test_streamed_turn_is_recorded_before_done(gateway: Gateway) -> None:
    _, events = stream(gateway, "I prefer bullet points for the Brookfield minutes.")
    assert events[-1] == "[DONE]"
    export = gateway.client.get("/v1/memory/export", params={"user": "ana"}, headers=gateway.headers()).json()
    assert len(export["sessions"]) == 1
    answer = export["sessions"][0]["turns"][1]["content"]
    assert answer == check_stream_shape(events, usage=False)


def test_streaming_from_a_backend_without_streaming(gateway_factory: Any) -> None:
    gw = gateway_factory(upstream="stub=scripted/x")
    _, events = stream(gw, "Write two lines about the Lisbon trip.", stream_options={"include_usage": True})
    text = check_stream_shape(events, usage=True)
    assert text.startswith("Here is a response")
    plain = gw.chat("Write two lines about the Lisbon trip.", user="z").json()["choices"][0]["message"]
    assert plain["content"] == text


def test_upstream_failure_is_an_error_not_an_answer(gateway: Gateway) -> None:
    from tests.support.stub_server import FaultPlan

    assert gateway.stub is not None
    gateway.stub.faults = FaultPlan(sequence=["400"])
    r = gateway.chat("hello")
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
    gateway.stub.faults = FaultPlan(sequence=["400"])
    _, events = stream(gateway, "hello")
    assert "[DONE]" not in events and events[-1]["error"]["type"] == "upstream_error"
    # neither failed exchange was recorded
    r = gateway.client.get("/v1/memory/export", params={"user": "ana"}, headers=gateway.headers())
    assert r.status_code == 404


def test_bad_requests_name_the_field(gateway: Gateway) -> None:
    h = gateway.headers()
    r = gateway.client.post("/v1/chat/completions", json={"messages": []}, headers=h)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = gateway.client.post(
        "/v1/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]}, headers=h
    )
    assert r.status_code == 400 and "messages.0.role" in r.json()["error"]["message"]
    r = gateway.client.post(
        "/v1/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        headers=h,
    )
    assert r.status_code == 404
    r = gateway.chat("x", temperature=5)
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]


def test_a_request_never_waits_on_extraction(gateway_factory: Any) -> None:
    gw = gateway_factory(extract_delay=1.5)
    started = time.perf_counter()
    r = gw.chat("I prefer short answers in the Okafor report.")
    r2 = gw.chat("I prefer metric units in the Okafor report.", user="bo")
    elapsed = time.perf_counter() - started
    assert r.status_code == 200 and r2.status_code == 200
    assert elapsed < 1.0, elapsed  # two requests, each with a 1.5 s extraction queued behind it
    worker = gw.server.app.state.worker
    assert worker.backlog >= 1  # still extracting
    assert worker.wait_idle(timeout=30)
    memories = gw.client.get("/v1/memory/memories", params={"user": "ana"}, headers=gw.headers()).json()
    assert [m["content"] for m in memories["data"]] == ["I prefer short answers in the Okafor report."]
    # the next request gets the extracted memory instead of the raw session
    gw.chat("Draft the Okafor report.")
    assert "I prefer short answers" in system_prompt(gw)


def test_recorded_exchange_is_embedded_by_its_user_turn(gateway: Gateway) -> None:
    """The request's vector is computed once and stored as the session's embedding; it must equal
    what the engine computes for the stored session (its user turn)."""
    import numpy as np

    from personalign.memory.index import dense_text

    text = "Plan the Brookfield Science Olympiad logistics with Professor Reyes."
    gateway.chat(text)
    gateway.chat("Another request about Lisbon.")
    service = gateway.server.app.state.service
    view = service.view("acme")
    sessions = view.sessions("ana")
    embedder = service.embedder
    stored = view.vectors("ana", "s", embedder.name, [s.id for s in sessions])
    for session in sessions:
        expected = embedder.encode([dense_text(session)])[0]
        assert np.allclose(stored[session.id], expected)


@pytest.mark.parametrize("text", ["plain ", 'a "quoted"\nline\t', "ünïcödé → ✓", "</script>\\", ""])
def test_a_content_event_is_the_bytes_of_the_whole_event_serialised(text: str) -> None:
    from personalign.serve.app import ChunkEvents

    events = ChunkEvents({"id": "chatcmpl-req_1", "created": 1, "model": 'stub "x"'})
    whole = events.event([{"index": 0, "delta": {"content": text}, "finish_reason": None}])
    assert events.content(text) == whole
    assert json.loads(whole[6:])["choices"][0]["delta"]["content"] == text


def test_each_request_encodes_its_query_once_and_nothing_else(gateway_factory: Any) -> None:
    from personalign.retrieval import HashingEmbedder
    from personalign.retrieval.batching import QueryBatcher

    class Counting(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(512)  # the gateway's "hash" embedder, same name: the stored vectors fit
            self.calls: list[list[str]] = []

        def encode(self, texts: Any) -> Any:
            self.calls.append(list(texts))
            return super().encode(texts)

    gw = gateway_factory()
    service = gw.server.app.state.service
    counting = Counting()
    service.embedder, service.queries = counting, QueryBatcher(counting)
    texts = [f"Plan the Lisbon trip, part {i}." for i in range(4)]
    for i, text in enumerate(texts):
        if i % 2:
            assert stream(gw, text)[1][-1] == "[DONE]"
        else:
            assert gw.chat(text).status_code == 200
    time.sleep(0.3)  # index upkeep after the last answer
    # the retrieval, the stored session's embedding and the upkeep all reuse the one encoding
    assert counting.calls == [[t] for t in texts]
