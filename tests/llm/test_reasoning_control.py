"""GenerateConfig.reasoning: cache keys, spec option, and how each backend sends it."""

from __future__ import annotations

import hashlib
import json

import pytest

from personalign.errors import ConfigError
from personalign.llm import GenerateConfig, cache_key, parse_model_spec
from personalign.llm.backends.anthropic import AnthropicBackend
from personalign.llm.backends.openai_compat import OpenAICompatBackend
from personalign.types import Message

MESSAGES = [Message(role="user", content="Write to the IRS.")]


def test_cache_key_without_reasoning_is_unchanged_from_before_the_field() -> None:
    config = GenerateConfig(temperature=0.5, max_tokens=64)
    legacy = {k: v for k, v in config.model_dump(mode="json").items() if k != "reasoning"}
    payload = {"v": 1, "model": "openai/x", "messages": [["user", "Write to the IRS."]], "config": legacy}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert cache_key("openai/x", MESSAGES, config) == hashlib.sha256(blob.encode()).hexdigest()


def test_reasoning_on_off_and_unset_are_three_cache_entries() -> None:
    keys = {cache_key("openai/x", MESSAGES, GenerateConfig(reasoning=value)) for value in (None, True, False)}
    assert len(keys) == 3


@pytest.mark.parametrize(
    ("spec", "on", "off"),
    [
        (
            "openai-compat/qwen3@http://h:1/v1",
            {"chat_template_kwargs": {"enable_thinking": True}},
            {"chat_template_kwargs": {"enable_thinking": False}},
        ),
        ("openrouter/x?key_env=K", {"reasoning": {"enabled": True}}, {"reasoning": {"enabled": False}}),
        ("openai/gpt-5-mini?key_env=K", {"reasoning_effort": "medium"}, {"reasoning_effort": "minimal"}),
        ("openai/o4-mini?key_env=K", {"reasoning_effort": "medium"}, None),
        ("openai-compat/q@http://h:1/v1?reasoning_param=reasoning", {"reasoning": {"enabled": True}}, None),
    ],
)
def test_openai_compatible_payload_carries_the_reasoning_switch(
    monkeypatch: pytest.MonkeyPatch, spec: str, on: dict[str, object], off: dict[str, object] | None
) -> None:
    monkeypatch.setenv("K", "secret")
    backend = OpenAICompatBackend(parse_model_spec(spec))
    assert backend.supports_reasoning
    body_on = backend.payload(MESSAGES, GenerateConfig(reasoning=True))
    assert {k: body_on[k] for k in on} == on
    if off is not None:
        body_off = backend.payload(MESSAGES, GenerateConfig(reasoning=False))
        assert {k: body_off[k] for k in off} == off
    unset = backend.payload(MESSAGES, GenerateConfig())
    assert not {"chat_template_kwargs", "reasoning", "reasoning_effort"} & set(unset)


def test_reasoning_param_none_disables_control_and_bad_values_are_refused() -> None:
    backend = OpenAICompatBackend(parse_model_spec("openai-compat/q@http://h:1/v1?reasoning_param=none"))
    assert not backend.supports_reasoning
    assert "chat_template_kwargs" not in backend.payload(MESSAGES, GenerateConfig(reasoning=True))
    with pytest.raises(ConfigError, match="reasoning_param"):
        parse_model_spec("openai-compat/q@http://h:1/v1?reasoning_param=think")
    assert parse_model_spec("openai-compat/q@http://h:1/v1").to_record()["reasoning_param"] == (
        "chat_template_kwargs"
    )


def test_anthropic_thinking_budget_fits_inside_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret")
    backend = AnthropicBackend(parse_model_spec("anthropic/claude-x"))
    body = backend.payload(MESSAGES, GenerateConfig(reasoning=True, max_tokens=1024, temperature=1.0))
    assert body["thinking"]["type"] == "enabled"
    assert body["max_tokens"] > body["thinking"]["budget_tokens"] >= 1024
    assert "temperature" not in body
    plain = backend.payload(MESSAGES, GenerateConfig(reasoning=False, temperature=1.0))
    assert "thinking" not in plain and plain["temperature"] == 1.0
