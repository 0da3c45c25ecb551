"""`Model` + `OpenAICompatBackend` against the loopback stub server: caching, retries, faults, keys."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import pytest

from personalign.errors import ConfigError, ModelCallError
from personalign.llm import CallCache, GenerateConfig, Model, ModelFactory, RetryPolicy
from personalign.types import Message
from tests.support.stub_server import FaultPlan, StubServer

T = TypeVar("T")

PROMPT = [
    Message(role="system", content="Be brief."),
    Message(role="user", content="Preference: short answer"),
]
SCHEMA = {"schema": {"type": "object", "properties": {"checklist": {"type": "array"}}}}
CHECKLIST = GenerateConfig(json_schema=SCHEMA["schema"], schema_name="checklist")
SECRET = "sk-stub-secret-4242"


def open_model(srv: StubServer, tmp_path: Path, **options: Any) -> tuple[ModelFactory, Model]:
    """A factory-built model on the stub, with fast retry delays (max_retries comes from the spec)."""
    query = urlencode({"max_retries": 6, "timeout": 2, **options})
    factory = ModelFactory(cache=CallCache(tmp_path / "c.sqlite"))
    model = factory.get(f"openai-compat/stub@{srv.base_url}?{query}")
    model.retry = RetryPolicy(max_retries=model.spec.max_retries, base_delay=0.01, max_delay=0.05)
    return factory, model


def run(factory: ModelFactory, coro: Coroutine[Any, Any, T]) -> T:
    """Run one scenario on a fresh event loop, then close the factory's clients and cache."""

    async def main() -> T:
        try:
            return await coro
        finally:
            await factory.aclose()

    try:
        return asyncio.run(main())
    finally:
        assert factory.cache is not None
        factory.cache.close()


def ask(i: int) -> list[Message]:
    return [Message(role="user", content=f"Question number {i}: what is a good name for a cat?")]


def test_plain_call_returns_text_and_usage_then_hits_the_cache(tmp_path: Path) -> None:
    with StubServer() as srv:
        factory, model = open_model(srv, tmp_path)

        async def scenario() -> tuple[Any, Any]:
            return await model.complete(PROMPT), await model.complete(PROMPT)

        first, second = run(factory, scenario())
        assert srv.stats.requests == 1
    assert first.text.startswith("Here is a response") and not first.cached
    assert first.attempts == 1 and first.raw is not None and first.raw["id"].startswith("chatcmpl-stub")
    assert first.usage.prompt_tokens == 5
    assert first.usage.completion_tokens == len(first.text.split()) > 0
    assert second.cached and second.text == first.text and second.usage == first.usage
    assert factory.tracker.cache_hits == 1 and factory.tracker.calls == 1
    assert factory.tracker.tokens == first.usage.total_tokens


def test_429_is_retried_after_the_servers_retry_after(tmp_path: Path) -> None:
    with StubServer(faults=FaultPlan(sequence=["429"], retry_after="0.3")) as srv:
        factory, model = open_model(srv, tmp_path)
        started = time.perf_counter()
        completion = run(factory, model.complete(PROMPT))
        elapsed = time.perf_counter() - started
        assert srv.stats.requests == 2 and srv.stats.outcomes == {"429": 1, "ok": 1}
    assert completion.attempts == 2 and completion.text
    assert elapsed >= 0.3  # backoff alone is at most 0.05 s, so Retry-After was honoured


def test_429_without_retries_raises_and_the_failure_is_not_cached(tmp_path: Path) -> None:
    with StubServer(faults=FaultPlan(sequence=["429"])) as srv:
        factory, model = open_model(srv, tmp_path, max_retries=0)

        async def scenario() -> tuple[ModelCallError, Any, Any]:
            with pytest.raises(ModelCallError) as info:
                await model.complete(PROMPT)
            return info.value, await model.complete(PROMPT), await model.complete(PROMPT)

        error, later, cached = run(factory, scenario())
        assert srv.stats.requests == 2  # failed call, then a real retry of it; the third was cached
    assert error.status_code == 429 and error.retryable and "HTTP 429" in str(error)
    assert not later.cached and later.text and cached.cached
    assert factory.tracker.errors == 1 and factory.tracker.calls == 1 and factory.tracker.cache_hits == 1


TRANSIENT = ["500", "503", "garbage", "bad_json", "reset", "timeout"]
EXPECTED_MESSAGE = {
    "500": "HTTP 500",
    "503": "HTTP 503",
    "garbage": "malformed response body",
    "bad_json": "malformed response body",
    "reset": "RemoteProtocolError",
    "timeout": "ReadTimeout",
}


@pytest.mark.parametrize("fault", TRANSIENT)
def test_transient_fault_is_retried_until_an_attempt_succeeds(tmp_path: Path, fault: str) -> None:
    with StubServer(faults=FaultPlan(sequence=[fault, fault], hang_seconds=5)) as srv:
        factory, model = open_model(srv, tmp_path, timeout=1.0)
        completion = run(factory, model.complete(PROMPT))
        assert srv.stats.requests == 3 and srv.stats.outcomes == {fault: 2, "ok": 1}
    assert completion.attempts == 3 and completion.text.startswith("Here is a response")
    assert factory.tracker.per_model["openai-compat/stub"].retries == 2


@pytest.mark.parametrize("fault", TRANSIENT)
def test_persistent_fault_raises_a_retryable_error(tmp_path: Path, fault: str) -> None:
    with StubServer(faults=FaultPlan(rates={fault: 1.0}, hang_seconds=5)) as srv:
        factory, model = open_model(srv, tmp_path, timeout=1.0, max_retries=2)
        with pytest.raises(ModelCallError) as info:
            run(factory, model.complete(PROMPT))
        assert srv.stats.requests == 3 and srv.stats.outcomes == {fault: 3}
    error = info.value
    assert error.retryable and "after 3 attempts" in str(error)
    assert EXPECTED_MESSAGE[fault] in str(error)
    assert error.status_code == (int(fault) if fault.isdigit() else None)
    assert factory.tracker.errors == 1 and factory.tracker.calls == 0


def test_400_is_not_retried(tmp_path: Path) -> None:
    with StubServer(faults=FaultPlan(sequence=["400"], cycle=True)) as srv:
        factory, model = open_model(srv, tmp_path)
        with pytest.raises(ModelCallError) as info:
            run(factory, model.complete(PROMPT))
        assert srv.stats.requests == 1
    assert info.value.status_code == 400 and not info.value.retryable


def test_api_key_is_sent_as_bearer_and_scrubbed_from_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STUB_KEY", SECRET)
    with StubServer(faults=FaultPlan(sequence=["ok", "400"])) as srv:
        factory, model = open_model(srv, tmp_path, key_env="STUB_KEY")

        async def scenario() -> ModelCallError:
            await model.complete(ask(1))
            assert srv.stats.last_headers["authorization"] == f"Bearer {SECRET}"
            with pytest.raises(ModelCallError) as info:
                await model.complete(ask(2))  # the 400 body echoes the Authorization header
            return info.value

        error = run(factory, scenario())
        assert srv.stats.requests == 2
    assert "Authorization: Bearer ***" in str(error)
    assert SECRET not in str(error) and SECRET not in repr(error.args)
    assert SECRET not in json.dumps(model.spec.to_record())


def test_unset_key_env_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STUB_KEY_UNSET", raising=False)
    factory = ModelFactory(cache=None)
    with pytest.raises(ConfigError, match="STUB_KEY_UNSET"):
        factory.get("openai-compat/stub@http://127.0.0.1:9/v1?key_env=STUB_KEY_UNSET")


@pytest.mark.parametrize(
    ("schema_mode", "expected"),
    [
        (
            "json_schema",
            {"type": "json_schema", "json_schema": {"name": "checklist", **SCHEMA, "strict": False}},
        ),
        ("json_object", {"type": "json_object", **SCHEMA}),
        ("none", None),
    ],
)
def test_response_format_follows_schema_mode(
    tmp_path: Path, schema_mode: str, expected: dict[str, Any] | None
) -> None:
    with StubServer() as srv:
        factory, model = open_model(srv, tmp_path, schema_mode=schema_mode)
        completion = run(factory, model.complete(PROMPT, CHECKLIST))
        body = srv.stats.last_body
    assert body is not None and body.get("response_format") == expected
    assert body["model"] == "stub" and body["messages"][1] == {"role": "user", "content": PROMPT[1].content}
    assert body["temperature"] == 0.0 and body["max_tokens"] == 1024
    if schema_mode == "json_schema":  # the stub passed the schema name on, so the answer has its shape
        assert json.loads(completion.text) == {"checklist": ["Does the response follow: short?"]}


def test_concurrent_calls_overlap_on_a_slow_server(tmp_path: Path) -> None:
    with StubServer(latency=0.1) as srv:
        factory, model = open_model(srv, tmp_path, concurrency=64)

        async def scenario() -> list[Any]:
            return await asyncio.gather(*(model.complete(ask(i)) for i in range(64)))

        started = time.perf_counter()
        completions = run(factory, scenario())
        elapsed = time.perf_counter() - started
        assert srv.stats.requests == 64
    assert all(c.text and c.attempts == 1 for c in completions)
    assert elapsed < 3.0  # one at a time would take 6.4 s
