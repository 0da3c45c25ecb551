"""Value types of the model layer: what a call asks for and what it returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from personalign.types import Message


class GenerateConfig(BaseModel):
    """Sampling and output settings of one call. Every field changes the output, so every
    field is part of the cache key; retries, timeouts and concurrency live elsewhere."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature; 0 is greedy.")
    max_tokens: int = Field(1024, gt=0, description="Upper bound on generated tokens.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling; None = backend default.")
    seed: int | None = Field(None, description="Sampling seed, for backends that accept one.")
    stop: tuple[str, ...] | None = Field(None, description="Stop sequences.")
    json_schema: dict[str, Any] | None = Field(
        None, description="JSON schema the output must follow; enforced where the backend supports it."
    )
    schema_name: str = Field("output", description="Name given to the schema (some APIs require one).")
    sample_index: int = Field(
        0, ge=0, description="Distinguishes repeated samples of the same prompt so each is cached apart."
    )
    reasoning: bool | None = Field(
        None,
        description="Ask the backend to turn reasoning ('thinking') on or off; None sends nothing "
        "(the model's default). Backends that cannot control it refuse True.",
    )

    def cache_fields(self) -> dict[str, Any]:
        fields = self.model_dump(mode="json")
        if fields["reasoning"] is None:  # keeps the keys of calls made before the field existed
            del fields["reasoning"]
        return fields


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The share of completion_tokens spent thinking, where the provider reports it (OpenAI's and
    # OpenRouter's usage.completion_tokens_details.reasoning_tokens); 0 when unknown.
    reasoning_tokens: int = 0
    # The share of prompt_tokens the backend did not evaluate because it reused their state (the
    # in-process llama.cpp backend's kept prefixes); 0 when unknown or none.
    cached_prompt_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


FinishReason = Literal["stop", "length", "content_filter", "other"]


def normalize_finish_reason(value: object) -> FinishReason | None:
    """A provider's stop/finish reason in one vocabulary: `length` means the reply was cut off at
    the token limit (OpenAI ``length``, Anthropic ``max_tokens``); None when the provider gave none."""
    if value is None or value == "":
        return None
    text = str(value).lower()
    if text in ("length", "max_tokens", "max_output_tokens"):
        return "length"
    if text in ("stop", "end_turn", "stop_sequence", "tool_use", "tool_calls", "function_call", "eos"):
        return "stop"
    if text in ("content_filter", "refusal", "safety"):
        return "content_filter"
    return "other"


class BackendResponse(BaseModel):
    """What a backend returns for one successful attempt."""

    text: str
    usage: Usage = Usage()
    finish_reason: FinishReason | None = None
    raw: dict[str, Any] | None = None
    # The response's rate-limit headers (lower-case names; `llm.ratelimit.rate_headers`), read by
    # the endpoint's adaptive concurrency; never cached.
    headers: dict[str, str] | None = None


class Completion(BaseModel):
    """The result of `Model.complete`: text plus accounting."""

    text: str
    usage: Usage
    model: str
    cached: bool = False
    latency_s: float = 0.0
    cost_usd: float | None = None
    attempts: int = 0
    finish_reason: FinishReason | None = Field(
        None, description="Why generation stopped: 'length' = cut off at max_tokens; None = not reported."
    )
    cache_key: str | None = Field(None, description="The call-cache key, so a rejected reply can be evicted.")
    raw: dict[str, Any] | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


__all__ = [
    "BackendResponse",
    "Completion",
    "FinishReason",
    "GenerateConfig",
    "Message",
    "Usage",
    "normalize_finish_reason",
]
