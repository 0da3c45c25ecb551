"""The capability table: exact request bodies per model family, spec options, reasoning tokens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from personalign.errors import ConfigError, ModelCallError
from personalign.llm import CallCache, GenerateConfig, ModelFactory, cache_key, parse_model_spec
from personalign.llm.backends.anthropic import AnthropicBackend
from personalign.llm.backends.openai_compat import OpenAICompatBackend
from personalign.llm.capabilities import resolve_capabilities
from personalign.prompts import parse_template
from personalign.runs.steps import StepRunner
from personalign.types import Message

MESSAGES = [Message(role="system", content="Be brief."), Message(role="user", content="Hi")]
CONFIG = GenerateConfig(temperature=0.0, max_tokens=64)
SENT_MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "sk-test")


def openai_body(spec: str, config: GenerateConfig = CONFIG) -> dict[str, Any]:
    backend = OpenAICompatBackend(parse_model_spec(spec))
    body = backend.payload(MESSAGES, config)
    # what goes on the wire is the same body
    assert json.loads(backend.encode_payload(MESSAGES, config)) == body
    return body


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1-nano"])
def test_chat_models_keep_max_tokens_and_temperature(model: str) -> None:
    assert openai_body(f"openai/{model}") == {
        "model": model,
        "messages": SENT_MESSAGES,
        "max_tokens": 64,
        "temperature": 0.0,
    }


@pytest.mark.parametrize("model", ["o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.2"])
def test_reasoning_models_get_max_completion_tokens_and_no_temperature(model: str) -> None:
    assert openai_body(f"openai/{model}", GenerateConfig(temperature=0.0, max_tokens=64, top_p=0.9)) == {
        "model": model,
        "messages": SENT_MESSAGES,
        "max_completion_tokens": 64,
    }


def test_reasoning_effort_option_is_sent_and_validated() -> None:
    assert openai_body("openai/o3-mini?reasoning_effort=high")["reasoning_effort"] == "high"
    assert openai_body("openai/gpt-5?reasoning_effort=minimal")["reasoning_effort"] == "minimal"
    with pytest.raises(ConfigError, match="not accepted"):
        parse_model_spec("openai/gpt-4o?reasoning_effort=low")
    with pytest.raises(ConfigError, match="not accepted"):
        parse_model_spec("openai/o4-mini?reasoning_effort=minimal")
    with pytest.raises(ConfigError, match="reasoning_effort must be"):
        parse_model_spec("openai/gpt-5?reasoning_effort=max")


def test_gpt_5_2_takes_a_temperature_only_with_effort_none() -> None:
    body = openai_body("openai/gpt-5.2?reasoning_effort=none", GenerateConfig(temperature=0.7, max_tokens=64))
    assert body == {
        "model": "gpt-5.2",
        "messages": SENT_MESSAGES,
        "max_completion_tokens": 64,
        "temperature": 0.7,
        "reasoning_effort": "none",
    }
    assert "temperature" not in openai_body("openai/gpt-5.2?reasoning_effort=low")


def test_reasoning_switch_uses_each_familys_values() -> None:
    assert openai_body("openai/gpt-5.2", GenerateConfig(reasoning=False))["reasoning_effort"] == "none"
    assert openai_body("openai/gpt-5", GenerateConfig(reasoning=False))["reasoning_effort"] == "minimal"
    assert openai_body("openai/o3-mini", GenerateConfig(reasoning=True))["reasoning_effort"] == "medium"
    backend = OpenAICompatBackend(parse_model_spec("openai/o3-mini"))
    with pytest.raises(ModelCallError, match="cannot turn reasoning off") as caught:
        backend.payload(MESSAGES, GenerateConfig(reasoning=False))
    assert not caught.value.retryable
    assert not OpenAICompatBackend(parse_model_spec("openai/gpt-4o")).supports_reasoning


def test_token_param_and_system_role_options() -> None:
    body = openai_body("openai/my-finetune?token_param=max_completion_tokens&system_role=developer")
    assert body == {
        "model": "my-finetune",
        "messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 64,
        "temperature": 0.0,
    }
    with pytest.raises(ConfigError, match="token_param"):
        parse_model_spec("openai/gpt-4o?token_param=max_output_tokens")
    with pytest.raises(ConfigError, match="system_role"):
        parse_model_spec("openai/gpt-4o?system_role=admin")


def test_deepseek_r1_on_openrouter_is_passed_through() -> None:
    assert openai_body(
        "openrouter/deepseek/deepseek-r1", GenerateConfig(temperature=0.6, max_tokens=4096)
    ) == {
        "model": "deepseek/deepseek-r1",
        "messages": SENT_MESSAGES,
        "max_tokens": 4096,
        "temperature": 0.6,
    }
    body = openai_body(
        "openrouter/deepseek/deepseek-r1?reasoning_effort=high", GenerateConfig(reasoning=True)
    )
    assert body["reasoning"] == {"enabled": True, "effort": "high"}
    assert openai_body("openrouter/deepseek/deepseek-r1?reasoning_effort=low")["reasoning"] == {
        "effort": "low"
    }


def test_vllm_openai_compat_model_is_passed_through() -> None:
    spec = "openai-compat/Qwen/Qwen3-8B@http://127.0.0.1:8000/v1"
    assert openai_body(spec, GenerateConfig(temperature=1.0, max_tokens=4096, top_p=0.95, seed=3)) == {
        "model": "Qwen/Qwen3-8B",
        "messages": SENT_MESSAGES,
        "max_tokens": 4096,
        "temperature": 1.0,
        "top_p": 0.95,
        "seed": 3,
    }
    body = openai_body(spec + "?reasoning_effort=low", GenerateConfig(reasoning=True))
    assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["reasoning_effort"] == "low"


def anthropic_body(spec: str, config: GenerateConfig) -> dict[str, Any]:
    return AnthropicBackend(parse_model_spec(spec)).payload(MESSAGES, config)


def test_claude_without_thinking() -> None:
    assert anthropic_body("anthropic/claude-sonnet-4-5", GenerateConfig(temperature=0.0, max_tokens=256)) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "Hi"}],
        "system": "Be brief.",
    }


def test_claude_with_thinking_drops_temperature_and_keeps_the_budget_inside_max_tokens() -> None:
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    config = GenerateConfig(
        temperature=0.0, max_tokens=4096, reasoning=True, json_schema=schema, schema_name="j"
    )
    body = anthropic_body("anthropic/claude-sonnet-4-5", config)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 4096 and "temperature" not in body
    assert body["tool_choice"] == {"type": "auto"}  # a forced tool call is refused while thinking
    budgeted = anthropic_body(
        "anthropic/claude-opus-4-1?thinking_budget=8000", GenerateConfig(max_tokens=4096)
    )
    assert budgeted["thinking"]["budget_tokens"] == 8000
    assert budgeted["max_tokens"] > 8000 and "temperature" not in budgeted
    off = anthropic_body("anthropic/claude-opus-4-1?thinking_budget=8000", GenerateConfig(reasoning=False))
    assert "thinking" not in off and off["temperature"] == 0.0
    with pytest.raises(ConfigError, match="at least 1024"):
        parse_model_spec("anthropic/claude-opus-4-1?thinking_budget=100")


def test_manifest_record_says_whether_the_temperature_is_sent() -> None:
    assert parse_model_spec("openai/o4-mini").to_record()["capabilities"]["sends_temperature"] is False
    assert parse_model_spec("openai/gpt-4o").to_record()["capabilities"]["sends_temperature"] is True
    assert resolve_capabilities("openai", "gpt-5.2", {"reasoning_effort": "none"}).sends_temperature


def test_reasoning_effort_is_part_of_the_cache_key_and_defaults_keep_old_keys() -> None:
    low, high = (
        parse_model_spec("openai/o3-mini?reasoning_effort=low"),
        parse_model_spec("openai/o3-mini?reasoning_effort=high"),
    )
    plain = parse_model_spec("openai/o3-mini?timeout=30")
    assert plain.identity == plain.label == "openai/o3-mini"
    assert low.identity == "openai/o3-mini?reasoning_effort=low"
    keys = {cache_key(s.identity, MESSAGES, CONFIG) for s in (low, high, plain)}
    assert len(keys) == 3


def _reply(text: str, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "id": "x",
        "choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 500,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }


def test_reasoning_tokens_are_counted_per_step_and_in_the_usage(tmp_path: Path) -> None:
    bodies: list[dict[str, Any]] = []

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=_reply('{"label": "follow"}', 448))

    spec = parse_model_spec("openai/o4-mini")
    backend = OpenAICompatBackend(spec, transport=httpx.MockTransport(server))
    factory = ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), backends={str(spec): backend})
    model = factory.get(spec)
    template = parse_template("t", "<!-- user -->\n{{x}}")
    steps = StepRunner()

    async def run() -> None:
        try:
            await steps.call(
                "judge",
                role="judge",
                model=model,
                template=template,
                values={"x": "go"},
                config=GenerateConfig(temperature=0.0, max_tokens=4096),
                parse=str,
            )
        finally:
            await factory.aclose()

    asyncio.run(run())
    step = steps.steps["judge"]
    assert (step.completion_tokens, step.reasoning_tokens) == (500, 448)
    assert "temperature_not_sent" in step.flags
    assert "temperature" not in bodies[0] and bodies[0]["max_completion_tokens"] == 4096
    usage = factory.tracker.to_record()
    assert (
        usage["reasoning_tokens"] == 448 and usage["per_model"]["openai/o4-mini"]["reasoning_tokens"] == 448
    )
