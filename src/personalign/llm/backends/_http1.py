"""A lean HTTP/1.1 keep-alive client for plain-``http://`` model endpoints.

httpx spends about 1.2 ms of CPU per request (URL and header models, auth and redirect
layers, a pool that probes every connection's socket); a local or LAN model server answering
in ~0.1 s at concurrency 64 then leaves the event loop CPU-bound. This client does only what
a JSON POST to such a server needs, at about 0.15 ms per request:

- one pool of keep-alive connections per backend (at most ``max_connections``);
- request bodies sent with ``Content-Length``; responses read by ``Content-Length``, chunked
  transfer encoding, or until the server closes the connection;
- an idle connection the server has closed is dropped before reuse (as httpcore does);
- any failure closes the connection it happened on, and surfaces as `TransportFailure` named
  like httpx's errors (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``...);
- `Http1Pool.stream` hands a response body over as it arrives (server-sent events), one piece
  per network read, on the same keep-alive connections: a stream read to its end returns its
  connection to the pool (httpx opened a new connection for every streamed answer the gateway
  forwarded, since it stopped reading at ``[DONE]``, before the body's last chunk).

It is used only for ``http://`` URLs with no HTTP proxy configured in the environment and no
injected httpx transport; everything else (TLS, proxies) goes through httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

MAX_HEADER_BYTES = 64 * 1024


class TransportFailure(Exception):
    """A request that got no usable HTTP response; ``kind`` mirrors httpx's exception names."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def lean_client_applies(base_url: str) -> bool:
    """Whether `Http1Pool` may serve `base_url`: plain http, and no proxy would be used for it."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


class Http1Pool:
    """Keep-alive connections to one ``http://host:port``; `post` sends one request on one of them."""

    def __init__(self, base_url: str, *, max_connections: int, headers: Mapping[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http URL: {base_url}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rpartition("@")[2]
        fixed = {"Host": host_header, "Accept": "application/json", **headers}
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max(1, max_connections))
        self._closed = False

    async def post(self, path: str, body: bytes, *, content_type: str, timeout: float) -> RawResponse:
        """POST `body` to ``base_url + path``; raise `TransportFailure` if no response arrives."""
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + self._fixed_headers
            + f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode("latin-1")
        )
        async with self._slots:
            try:
                if sys.version_info >= (3, 11):  # no extra task per request, unlike wait_for
                    async with asyncio.timeout(timeout):
                        return await self._exchange(head + body)
                return await asyncio.wait_for(self._exchange(head + body), timeout)
            except asyncio.TimeoutError:
                raise TransportFailure("ReadTimeout", f"no response within {timeout:g}s") from None

    async def _exchange(self, request: bytes) -> RawResponse:
        connection = await self._checkout()
        try:
            connection.writer.write(request)
            response, keep_alive = await _read_response(connection.reader)
        except BaseException as exc:
            connection.close()
            if isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)):
                raise TransportFailure(
                    "RemoteProtocolError", "server disconnected without sending a complete response"
                ) from None
            if isinstance(exc, (asyncio.LimitOverrunError, ValueError)):
                raise TransportFailure("RemoteProtocolError", f"malformed HTTP response ({exc})") from None
            if isinstance(exc, OSError):
                raise TransportFailure("WriteError", str(exc) or type(exc).__name__) from None
            raise
        if keep_alive and not self._closed:
            self._idle.append(connection)
        else:
            connection.close()
        return response

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, body: bytes, *, content_type: str, timeout: float
    ) -> AsyncIterator[StreamedResponse]:
        """POST `body` and yield the response with its body unread (see `StreamedResponse.pieces`);
        ``timeout`` bounds each wait for the server (the head, then every read of the body). The
        connection goes back to the pool if the body was read to its end, else it is closed."""
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + self._fixed_headers
            + f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode("latin-1")
        )
        async with self._slots:
            connection = await self._checkout()
            response: StreamedResponse | None = None
            try:
                try:
                    connection.writer.write(head + body)
                    status, headers, keep_alive = await _within(_read_head(connection.reader), timeout)
                except BaseException as exc:
                    raise _failure(exc) from None
                response = StreamedResponse(status, headers, connection.reader, timeout, keep_alive)
                yield response
            except BaseException:
                connection.close()
                raise
            if response.reusable and not self._closed:
                self._idle.append(connection)
            else:
                connection.close()

    async def _checkout(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEADER_BYTES)
        except OSError as exc:
            raise TransportFailure("ConnectError", str(exc) or type(exc).__name__) from None
        return _Connection(reader, writer)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(OSError):  # best effort: the peer may be gone already
                await connection.writer.wait_closed()


async def _within(awaitable: Awaitable[T], timeout: float) -> T:
    """``awaitable``, or TimeoutError after ``timeout`` seconds (no extra task on Python >= 3.11)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await awaitable
    return await asyncio.wait_for(awaitable, timeout)


def _failure(exc: BaseException) -> BaseException:
    """A transport error as `TransportFailure` (named like httpx's); anything else as it is."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return TransportFailure("ReadTimeout", "no response in time")
    if isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)):
        return TransportFailure(
            "RemoteProtocolError", "server disconnected without sending a complete response"
        )
    if isinstance(exc, (asyncio.LimitOverrunError, ValueError)):
        return TransportFailure("RemoteProtocolError", f"malformed HTTP response ({exc})")
    if isinstance(exc, OSError):
        return TransportFailure("WriteError", str(exc) or type(exc).__name__)
    return exc


@dataclass
class StreamedResponse:
    """A response whose body is read as it arrives (`pieces`), framing (chunked, length) removed."""

    status: int
    headers: dict[str, str]
    reader: asyncio.StreamReader = field(repr=False)
    timeout: float
    keep_alive: bool
    complete: bool = False  # the body was read to its end

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body, one piece per network read (everything that arrived together comes as one
        piece, so a consumer can pass on what arrived at once in one write)."""
        if self.status in (101, 204, 304):
            self.complete = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            decoder: _Dechunker | None = _Dechunker()
            remaining = -1
        else:
            decoder = None
            length = self.headers.get("content-length")
            remaining = int(length) if length is not None else -1
            if remaining < 0:
                self.keep_alive = False  # delimited by the server closing the connection
        while not self.complete:
            if remaining == 0:
                self.complete = True
                break
            try:
                size = 65536 if remaining < 0 else min(65536, remaining)
                data = await _within(self.reader.read(size), self.timeout)
            except BaseException as exc:
                raise _failure(exc) from None
            if not data:
                if decoder is None and remaining < 0:
                    self.complete = True  # the server closed: that was the end of the body
                    break
                raise TransportFailure("RemoteProtocolError", "server disconnected in the middle of the body")
            if decoder is not None:
                try:
                    data, self.complete = decoder.feed(data)
                except ValueError as exc:
                    raise TransportFailure("RemoteProtocolError", f"malformed chunked body ({exc})") from None
            elif remaining > 0:
                remaining -= len(data)
            if data:
                yield data

    async def read(self) -> bytes:
        """The rest of the body at once."""
        return b"".join([piece async for piece in self.pieces()])


class _Dechunker:
    """Incremental decoder of a chunked transfer-encoded body: `feed` bytes as they arrive."""

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0  # bytes of the current chunk's data still to come
        self._state = "size"  # size -> data -> crlf -> size ... -> trailer

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """The payload in ``data`` (with what was buffered) and whether the body ended."""
        buffer, out = self._buffer + data, []
        while True:
            if self._state == "data":
                take = buffer[: self._remaining]
                out.append(take)
                buffer = buffer[len(take) :]
                self._remaining -= len(take)
                if self._remaining:
                    break
                self._state = "crlf"
            elif self._state == "crlf":
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise ValueError("chunk not terminated by CRLF")
                buffer, self._state = buffer[2:], "size"
            else:  # "size" or "trailer": one line at a time
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEADER_BYTES:
                        raise ValueError("chunk size line too long")
                    break
                line, buffer = buffer[:end], buffer[end + 2 :]
                if self._state == "trailer":
                    if not line:
                        self._buffer = buffer
                        return b"".join(out), True
                    continue
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    self._state = "trailer"
                else:
                    self._state, self._remaining = "data", size
        self._buffer = buffer
        return b"".join(out), False


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bool]:
    """A response's status and headers (after any interim 1xx); whether the connection may be reused."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(rest[:3])
        if not 100 <= status < 200 or status == 101:
            break  # interim 1xx responses (e.g. 103 Early Hints) precede the real one
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return status, headers, keep_alive


async def _read_response(reader: asyncio.StreamReader) -> tuple[RawResponse, bool]:
    """One response from `reader`; also whether the connection may carry another request."""
    status, headers, keep_alive = await _read_head(reader)
    if status in (101, 204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body, keep_alive = await reader.read(), False  # delimited by the server closing the connection
    return RawResponse(status, headers, body), keep_alive


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("chunk not terminated by CRLF")
