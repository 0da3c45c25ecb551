"""Fixtures of the gateway tests: a stub upstream, keys of two tenants, a gateway on a free port."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from personalign.llm import GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.serve import GatewayConfig, GatewayServer, KeyRing, new_key
from personalign.types import Message
from tests.support.stub_server import StubServer

EXTRACTOR = "scripted/extractor"


def extraction_answer(messages: Sequence[Message], config: GenerateConfig) -> str:
    """A memory for every user turn that says 'I prefer ...' (the scripted extractor)."""
    if config.schema_name != "memories":
        return "ok"
    text = messages[-1].content
    found = []
    for line in text.splitlines():
        if "] user:" in line and "i prefer" in line.lower():
            turn = int(line.split("]", 1)[0].lstrip("["))
            content = line.split("user:", 1)[1].strip()
            found.append(
                {"kind": "preference", "context_factor": "", "category": "style", "content": content,
                 "evidence_turns": [turn]}
            )  # fmt: skip
    return json.dumps({"memories": found})


def extractor_factory(delay: float = 0.0) -> Callable[[], ModelFactory]:
    def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
        time.sleep(delay)  # runs in the extraction worker's thread: a slow extractor
        return extraction_answer(messages, config)

    def make() -> ModelFactory:
        backend = ScriptedBackend(responder)
        return ModelFactory(cache=None, backends={str(parse_model_spec(EXTRACTOR)): backend})

    return make


@dataclass
class Gateway:
    server: GatewayServer
    stub: StubServer | None
    keys: dict[str, str]  # name -> plaintext key
    client: httpx.Client

    def headers(self, key: str = "a", user: str | None = None) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.keys[key]}"}
        if user is not None:
            out["X-Personalign-User"] = user
        return out

    def chat(self, text: str, *, key: str = "a", user: str | None = "ana", **body: Any) -> httpx.Response:
        payload = {"model": "stub", "messages": [{"role": "user", "content": text}], **body}
        if user is not None:
            payload.setdefault("user", user)
        return self.client.post("/v1/chat/completions", json=payload, headers=self.headers(key))


def make_keys() -> tuple[KeyRing, dict[str, str]]:
    ring, plain = KeyRing(), {}
    for name, tenant, extra in (
        ("a", "acme", {}),
        ("b", "globex", {}),
        ("a2", "acme", {}),
        ("slow", "acme", {"rate": 1.0, "burst": 2}),
        ("bench", "bench", {"default_user": "bench-user"}),
    ):
        key, record = new_key(tenant, **extra)  # type: ignore[arg-type]
        ring.add(record)
        plain[name] = key
    return ring, plain


@pytest.fixture
def gateway_factory(tmp_path: Any) -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []
    owned: list[StubServer] = []

    def start(
        *,
        upstream: str | None = None,
        extract_delay: float | None = None,
        latency: float = 0.0,
        store: str | None = None,
        keys: tuple[KeyRing, dict[str, str]] | None = None,
        stub: StubServer | None = None,
        **cfg: Any,
    ) -> Gateway:
        own_stub = None
        if upstream is None:
            if stub is None:
                stub = own_stub = StubServer(latency=latency).start()
            upstream = f"stub=openai-compat/stub@{stub.base_url}"
        ring, plain = keys or make_keys()
        config = GatewayConfig(
            upstreams=[upstream],
            keys=ring,
            store=store or str(tmp_path / f"gw{len(started)}.sqlite"),
            embedder="hash",
            extractor=EXTRACTOR if extract_delay is not None else None,
            extractor_factory=extractor_factory(extract_delay or 0.0),
            **cfg,
        )
        server = GatewayServer(config).start()
        gw = Gateway(server, stub, plain, httpx.Client(base_url=server.url, timeout=30))
        started.append(gw)
        if own_stub is not None:
            owned.append(own_stub)
        return gw

    yield start
    for gw in started:
        gw.client.close()
        gw.server.stop()
    for stub in owned:
        stub.stop()


@pytest.fixture
def gateway(gateway_factory: Callable[..., Gateway]) -> Gateway:
    return gateway_factory()


def sse_events(text: str) -> list[Any]:
    """The ``data:`` payloads of a server-sent-events body (``[DONE]`` kept as the string)."""
    out: list[Any] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
