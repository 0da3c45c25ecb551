"""The lean HTTP/1.1 client against a raw loopback socket server that answers with chosen bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from personalign.errors import ModelCallError
from personalign.llm.backends._http1 import Http1Pool, TransportFailure, lean_client_applies
from personalign.llm.backends.openai_compat import OpenAICompatBackend
from personalign.llm.spec import parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.types import Message

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
COMPLETION = json.dumps(
    {"id": "x", "choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3}}
).encode()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return head, await reader.readexactly(length)


async def serve(handler: Handler, scenario: Callable[[str], Awaitable[Any]]) -> tuple[Any, list[int]]:
    """Run `scenario(base_url)` against a server calling `handler(reader, writer, connection_number)`."""
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections) + 1)
        try:
            await handler(reader, writer, len(connections))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await scenario(f"http://127.0.0.1:{port}/v1"), connections
    finally:
        server.close()


def keep_alive_handler(response: Callable[[bytes, bytes], bytes], requests: int = 100) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        for _ in range(requests):
            head, body = await read_request(reader)
            writer.write(response(head, body))
            await writer.drain()

    return handler


def ok(body: bytes, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def post_many(base_url: str, n: int, **pool_options: Any) -> list[Any]:
    pool = Http1Pool(base_url, max_connections=pool_options.get("max_connections", 4), headers={"X-K": "v"})
    try:
        return [
            await pool.post("/chat/completions", b'{"n": %d}' % i, content_type="application/json", timeout=2)
            for i in range(n)
        ]
    finally:
        await pool.aclose()


def test_requests_reuse_one_keep_alive_connection_and_send_the_path_headers_and_body() -> None:
    seen: list[tuple[bytes, bytes]] = []

    def respond(head: bytes, body: bytes) -> bytes:
        seen.append((head, body))
        return ok(body)

    responses, connections = asyncio.run(serve(keep_alive_handler(respond), lambda url: post_many(url, 3)))
    assert [r.body for r in responses] == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']
    assert all(r.status == 200 for r in responses) and connections == [1]
    head = seen[0][0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "Host: 127.0.0.1:" in head and "X-K: v\r\n" in head and "Content-Type: application/json" in head


def test_chunked_body_with_trailers_is_reassembled() -> None:
    def respond(_head: bytes, _body: bytes) -> bytes:
        chunks = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks

    responses, connections = asyncio.run(serve(keep_alive_handler(respond), lambda url: post_many(url, 2)))
    assert [r.body for r in responses] == [b"hello world"] * 2 and connections == [1]


def test_connection_close_and_close_delimited_bodies_open_a_new_connection_each_time() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n % 2:
            writer.write(ok(b"closing", "Connection: close\r\n"))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil EOF")  # no length: the body ends at close
        await writer.drain()

    responses, connections = asyncio.run(serve(handler, lambda url: post_many(url, 4)))
    assert [r.body for r in responses] == [b"closing", b"until EOF"] * 2 and connections == [1, 2, 3, 4]


def test_interim_1xx_response_is_skipped_and_headers_are_lower_cased() -> None:
    def respond(_head: bytes, body: bytes) -> bytes:
        return b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok(
            body, "Retry-After: 3\r\nX-A: 1\r\nX-A: 2\r\n"
        )

    responses, _ = asyncio.run(serve(keep_alive_handler(respond), lambda url: post_many(url, 1)))
    assert responses[0].headers["retry-after"] == "3" and responses[0].headers["x-a"] == "1, 2"


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        _, body = await read_request(reader)
        writer.write(ok(body))  # keep-alive promised, then closed anyway
        await writer.drain()

    async def scenario(url: str) -> list[bytes]:
        pool = Http1Pool(url, max_connections=2, headers={})
        try:
            first = await pool.post("/x", b"1", content_type="text/plain", timeout=2)
            await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
            second = await pool.post("/x", b"2", content_type="text/plain", timeout=2)
            return [first.body, second.body]
        finally:
            await pool.aclose()

    bodies, connections = asyncio.run(serve(handler, scenario))
    assert bodies == [b"1", b"2"] and connections == [1, 2]


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (b"", "RemoteProtocolError"),  # closed without a response
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "RemoteProtocolError"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", "RemoteProtocolError"),
        (None, "ReadTimeout"),  # never answers
    ],
)
def test_broken_or_missing_responses_raise_named_transport_failures(reply: bytes | None, kind: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        if reply is None:
            await asyncio.sleep(5)
        writer.write(reply or b"")
        await writer.drain()

    async def scenario(url: str) -> TransportFailure:
        pool = Http1Pool(url, max_connections=1, headers={})
        try:
            with pytest.raises(TransportFailure) as info:
                await pool.post("/x", b"{}", content_type="application/json", timeout=0.3)
            return info.value
        finally:
            await pool.aclose()

    error, _ = asyncio.run(serve(handler, scenario))
    assert error.kind == kind and str(error).startswith(kind)


def test_refused_connection_is_a_connect_error() -> None:
    async def scenario() -> TransportFailure:
        pool = Http1Pool("http://127.0.0.1:9/v1", max_connections=1, headers={})
        with pytest.raises(TransportFailure) as info:
            await pool.post("/x", b"{}", content_type="application/json", timeout=2)
        return info.value

    assert asyncio.run(scenario()).kind == "ConnectError"


def test_backend_on_the_lean_client_parses_completions_and_status_errors() -> None:
    def respond(_head: bytes, body: bytes) -> bytes:
        if b'"fail"' in body:
            return b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
        return ok(COMPLETION)

    async def scenario(url: str) -> tuple[Any, ModelCallError]:
        backend = OpenAICompatBackend(parse_model_spec(f"openai-compat/m@{url}"))
        assert backend._lean is not None
        try:
            good = await backend.generate([Message(role="user", content="hé")], GenerateConfig(), timeout=2)
            with pytest.raises(ModelCallError) as info:
                await backend.generate([Message(role="user", content="fail")], GenerateConfig(), timeout=2)
            return good, info.value
        finally:
            await backend.aclose()

    (good, error), _ = asyncio.run(serve(keep_alive_handler(respond), scenario))
    assert good.text == "hi" and good.usage.prompt_tokens == 3 and good.raw["id"] == "x"
    assert error.status_code == 503 and error.retryable and error.retry_after == 7.0
    assert "HTTP 503: busy" in str(error)


def test_lean_client_only_for_plain_http_without_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert lean_client_applies("http://127.0.0.1:8000/v1")
    assert not lean_client_applies("https://api.example.com/v1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not lean_client_applies("http://10.0.0.5:8000/v1")
    backend = OpenAICompatBackend(parse_model_spec("openai-compat/m@http://10.0.0.5:8000/v1"))
    assert backend._lean is None and backend._clients  # httpx honours the proxy
    monkeypatch.setenv("NO_PROXY", "10.0.0.5")
    assert lean_client_applies("http://10.0.0.5:8000/v1")


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "none"])
def test_encoded_body_is_the_payload_as_compact_json(mode: str) -> None:
    backend = OpenAICompatBackend(
        parse_model_spec(f"openai-compat/m@http://127.0.0.1:9/v1?schema_mode={mode}")
    )
    messages = [Message(role="system", content='q " b \\ nl \n é 🙂'), Message(role="user", content="x")]
    for config in (
        GenerateConfig(),
        GenerateConfig(json_schema={"type": "object"}, stop=("\n",), seed=1, top_p=0.5, max_tokens=9),
    ):
        expected = json.dumps(backend.payload(messages, config), ensure_ascii=False, separators=(",", ":"))
        assert backend.encode_payload(messages, config) == expected.encode("utf-8")


def sse_chunked(events: list[str], split: bool) -> list[bytes]:
    """A chunked SSE response as the writes a server makes: one per event (``split``: each write
    also cut in two, so chunk framing straddles reads), then the terminating chunk."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    writes = [head]
    for event in events:
        data = f"data: {event}\n\n".encode()
        framed = b"%x\r\n" % len(data) + data + b"\r\n"
        writes += [framed[:7], framed[7:]] if split else [framed]
    return [*writes, b"0\r\n\r\n"]


def stream_events(text: str) -> list[str]:
    words = text.split(" ")
    events = [
        json.dumps({"choices": [{"delta": {"content": w + " "}, "finish_reason": None}]}) for w in words
    ]
    events.append(
        json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 2}})
    )
    return [*events, "[DONE]"]


def sse_handler(split: bool, pause: float = 0.0) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        while True:
            _, body = await read_request(reader)
            text = json.loads(body)["messages"][0]["content"]
            for piece in sse_chunked(stream_events(text), split):
                writer.write(piece)
                await writer.drain()
                if pause:
                    await asyncio.sleep(pause)

    return handler


@pytest.mark.parametrize("split", [False, True])
def test_streamed_answers_are_decoded_and_reuse_one_keep_alive_connection(split: bool) -> None:
    async def scenario(url: str) -> list[str]:
        backend = OpenAICompatBackend(parse_model_spec(f"openai-compat/m@{url}"))
        assert backend._lean is not None
        answers = []
        try:
            for text in ("one two three", "ünï cödé", "last"):
                pieces = [
                    c
                    async for c in backend.stream(
                        [Message(role="user", content=text)], GenerateConfig(), timeout=2
                    )
                ]
                assert pieces[-1].finish_reason == "stop" and pieces[-1].usage is not None
                answers.append("".join(p.text for p in pieces))
        finally:
            await backend.aclose()
        return answers

    answers, connections = asyncio.run(serve(sse_handler(split, pause=0.002), scenario))
    assert answers == ["one two three ", "ünï cödé ", "last "]
    assert connections == [1]  # the old streaming client opened a connection per answer


def test_stream_batches_group_the_events_of_one_read() -> None:
    async def scenario(url: str) -> list[list[str]]:
        backend = OpenAICompatBackend(parse_model_spec(f"openai-compat/m@{url}"))
        try:
            return [
                [c.text for c in batch]
                async for batch in backend.stream_batches(
                    [Message(role="user", content="a b c d")], GenerateConfig(), timeout=2
                )
            ]
        finally:
            await backend.aclose()

    async def at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _n: int) -> None:
        await read_request(reader)
        writer.write(b"".join(sse_chunked(stream_events("a b c d"), split=False)))  # one write
        await writer.drain()

    batches, _ = asyncio.run(serve(at_once, scenario))
    assert batches == [["a ", "b ", "c ", "d ", ""]]


def test_an_abandoned_stream_closes_its_connection() -> None:
    async def scenario(url: str) -> list[bytes]:
        pool = Http1Pool(url, max_connections=1, headers={})
        body = json.dumps({"messages": [{"content": "x y z"}]}).encode()
        try:
            async with pool.stream("/c", body, content_type="application/json", timeout=2) as response:
                first = [piece async for piece in _take_one(response.pieces())]
            async with pool.stream("/c", body, content_type="application/json", timeout=2) as response:
                whole = await response.read()
            return [first[0], whole]
        finally:
            await pool.aclose()

    (first, whole), connections = asyncio.run(serve(sse_handler(split=False, pause=0.01), scenario))
    assert first.startswith(b"data: ") and whole.endswith(b"data: [DONE]\n\n")
    assert connections == [1, 2]  # the half-read body could not carry another request


async def _take_one(pieces: Any) -> Any:
    async for piece in pieces:
        yield piece
        return


def test_dechunker_fed_byte_by_byte() -> None:
    from personalign.llm.backends._http1 import _Dechunker

    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    decoder, out, done = _Dechunker(), b"", False
    for i in range(len(body)):
        piece, done = decoder.feed(body[i : i + 1])
        out += piece
        assert not done or i == len(body) - 1
    assert out == b"hello world" and done
    with pytest.raises(ValueError):
        _Dechunker().feed(b"3\r\nabcXX")
