"""What each provider and model family accepts in a request, as one table (pure, no I/O).

OpenAI's reasoning models (o1/o3/o4 and the gpt-5 family) reject ``max_tokens`` and any
non-default ``temperature`` / ``top_p`` with HTTP 400; they take ``max_completion_tokens`` and
``reasoning_effort`` instead. Anthropic's extended thinking needs the default temperature and a
thinking budget inside ``max_tokens``. The backends build request bodies from the
`Capabilities` resolved here, so a model's rules live in one place (docs/adding-a-backend.md).

Spec options override the table (``?token_param=``, ``?reasoning_effort=``, ``?system_role=``,
``?thinking_budget=``). OpenRouter, Together and ``openai-compat`` servers translate or ignore
parameters themselves, so for them nothing is dropped: what the user sets is passed through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from personalign.errors import ConfigError

TokenParam = Literal["max_tokens", "max_completion_tokens"]
SystemRole = Literal["system", "developer"]
TOKEN_PARAMS: tuple[str, ...] = ("max_tokens", "max_completion_tokens")
SYSTEM_ROLES: tuple[str, ...] = ("system", "developer")
# Every effort any provider documents; a family narrows it down (`Capabilities.efforts`).
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh")
PASSTHROUGH_PROVIDERS = ("openrouter", "together", "openai-compat")
# Anthropic: the smallest thinking budget the API accepts, and the room kept for the answer.
MIN_THINKING_BUDGET = 1024
ANSWER_ROOM = 1024


@dataclass(frozen=True)
class Capabilities:
    """The request rules of one model: which fields may be sent and under which names."""

    family: str
    token_param: TokenParam = "max_tokens"
    # temperature / top_p may be sent: "always", "never", or "effort_none" (only when the
    # reasoning effort is "none", as gpt-5.1 and later allow).
    sampling: Literal["always", "never", "effort_none"] = "always"
    # reasoning_effort values the model accepts; () = the field is never sent (unless passthrough).
    efforts: tuple[str, ...] = ()
    effort_off: str | None = None  # the effort that turns reasoning off; None = it cannot be turned off
    system_role: SystemRole = "system"
    reasoning_effort: str | None = None  # set by the spec option
    thinking_budget: int | None = None  # Anthropic, set by the spec option
    passthrough: bool = False
    notes: str = ""
    overrides: tuple[str, ...] = field(default=(), compare=False)

    @property
    def sends_temperature(self) -> bool:
        """Whether requests carry the configured temperature (False: the model's default is used;
        for Anthropic, also False while thinking is on)."""
        if self.thinking_budget is not None:
            return False
        return self.sampling == "always" or (
            self.sampling == "effort_none" and self.reasoning_effort == "none"
        )

    def to_record(self) -> dict[str, Any]:
        """For the manifest: how this model's requests are built."""
        return {
            "family": self.family,
            "token_param": self.token_param,
            "sampling": self.sampling,
            "sends_temperature": self.sends_temperature,
            "reasoning_effort": self.reasoning_effort,
            "system_role": self.system_role,
            **({"thinking_budget": self.thinking_budget} if self.thinking_budget is not None else {}),
            **({"overrides": list(self.overrides)} if self.overrides else {}),
        }


# OpenAI models by name, first match wins. Names are matched without an ``ft:`` prefix.
_OPENAI_TABLE: tuple[tuple[re.Pattern[str], Capabilities], ...] = (
    (
        re.compile(r"^o1-(mini|preview)\b"),
        Capabilities(
            family="o1-mini/preview",
            token_param="max_completion_tokens",
            sampling="never",
            notes="no reasoning_effort",
        ),
    ),
    (
        re.compile(r"^o\d+(-|$)"),
        Capabilities(
            family="o-series",
            token_param="max_completion_tokens",
            sampling="never",
            efforts=("low", "medium", "high"),
        ),
    ),
    (
        re.compile(r"^gpt-5(\.\d+)?-chat\b"),
        Capabilities(family="gpt-5 chat", token_param="max_completion_tokens"),
    ),
    (
        re.compile(r"^gpt-5(-|$)"),
        Capabilities(
            family="gpt-5",
            token_param="max_completion_tokens",
            sampling="never",
            efforts=("minimal", "low", "medium", "high"),
            effort_off="minimal",
        ),
    ),
    (
        re.compile(r"^gpt-5\.\d+"),
        Capabilities(
            family="gpt-5.x",
            token_param="max_completion_tokens",
            sampling="effort_none",
            efforts=("none", "low", "medium", "high", "xhigh"),
            effort_off="none",
        ),
    ),
)
_OPENAI_DEFAULT = Capabilities(family="openai chat")
_ANTHROPIC = Capabilities(family="anthropic")
_PASSTHROUGH = Capabilities(family="passthrough", passthrough=True)
_IN_PROCESS = Capabilities(family="in-process")


def base_capabilities(provider: str, model: str) -> Capabilities:
    """The table's row for a provider and model, before spec options."""
    if provider == "openai":
        name = model.lower().removeprefix("ft:")
        for pattern, caps in _OPENAI_TABLE:
            if pattern.search(name):
                return caps
        return _OPENAI_DEFAULT
    if provider == "anthropic":
        return _ANTHROPIC
    if provider in PASSTHROUGH_PROVIDERS:
        return _PASSTHROUGH
    return _IN_PROCESS


def resolve_capabilities(provider: str, model: str, options: Mapping[str, str]) -> Capabilities:
    """The table's row with the spec options applied; `ConfigError` for an option the model
    cannot take (e.g. ``reasoning_effort`` on gpt-4o, or ``high`` where only others exist)."""
    caps = base_capabilities(provider, model)
    where = f"{provider}/{model}"
    updates: dict[str, Any] = {}
    if "token_param" in options:
        if options["token_param"] not in TOKEN_PARAMS:
            raise ConfigError(f"{where}: token_param must be one of {list(TOKEN_PARAMS)}")
        updates["token_param"] = options["token_param"]
    if "system_role" in options:
        if options["system_role"] not in SYSTEM_ROLES:
            raise ConfigError(f"{where}: system_role must be one of {list(SYSTEM_ROLES)}")
        updates["system_role"] = options["system_role"]
    effort = options.get("reasoning_effort")
    if effort is not None:
        if provider == "anthropic":
            raise ConfigError(f"{where}: Anthropic takes thinking_budget=N, not reasoning_effort")
        if effort not in REASONING_EFFORTS:
            raise ConfigError(f"{where}: reasoning_effort must be one of {list(REASONING_EFFORTS)}")
        if not caps.passthrough and effort not in caps.efforts:
            accepted = ", ".join(caps.efforts) or "none (not a reasoning model)"
            raise ConfigError(
                f"{where}: reasoning_effort={effort} is not accepted here (accepted: {accepted})"
            )
        updates["reasoning_effort"] = effort
    if "thinking_budget" in options:
        if provider != "anthropic":
            raise ConfigError(f"{where}: thinking_budget applies to anthropic/ models only")
        try:
            budget = int(options["thinking_budget"])
        except ValueError:
            raise ConfigError(f"{where}: thinking_budget must be an integer") from None
        if budget < MIN_THINKING_BUDGET:
            raise ConfigError(f"{where}: thinking_budget must be at least {MIN_THINKING_BUDGET}")
        updates["thinking_budget"] = budget
    if not updates:
        return caps
    return Capabilities(**{**caps.__dict__, **updates, "overrides": tuple(sorted(updates))})


@dataclass(frozen=True)
class OpenAIFields:
    """The request fields a capability row allows for one call, and what was left out."""

    fields: dict[str, Any]
    unsent: tuple[str, ...]


def openai_fields(
    caps: Capabilities,
    *,
    temperature: float,
    top_p: float | None,
    max_tokens: int,
    reasoning: bool | None,
    reasoning_param: str,
) -> OpenAIFields:
    """Token limit, sampling and reasoning fields of an OpenAI-style chat request.

    `reasoning` (GenerateConfig.reasoning) turns reasoning on (the spec's effort, else
    ``medium``) or off (the family's off effort); raises `ValueError` where it cannot be honoured.
    """
    fields: dict[str, Any] = {caps.token_param: max_tokens}
    effort = caps.reasoning_effort
    toggle: dict[str, Any] = {}
    if reasoning is not None:
        if reasoning_param == "reasoning_effort" and not caps.passthrough:
            if not caps.efforts:
                raise ValueError(f"{caps.family} models take no reasoning_effort")
            if reasoning:
                effort = effort if effort not in (None, caps.effort_off) else "medium"
            elif caps.effort_off is None:
                raise ValueError(f"{caps.family} models cannot turn reasoning off")
            else:
                effort = caps.effort_off
        else:
            toggle = reasoning_toggle(reasoning, reasoning_param, effort)
    sampling = caps.sampling == "always" or (caps.sampling == "effort_none" and effort == "none")
    unsent: list[str] = []
    if sampling:
        fields["temperature"] = temperature
        if top_p is not None:
            fields["top_p"] = top_p
    else:
        unsent.append("temperature")
        if top_p is not None:
            unsent.append("top_p")
    if toggle:
        fields.update(toggle)
    elif effort is not None:
        if reasoning_param == "reasoning":  # OpenRouter's reasoning object
            fields["reasoning"] = {"effort": effort}
        else:
            fields["reasoning_effort"] = effort
    return OpenAIFields(fields, tuple(unsent))


def reasoning_toggle(reasoning: bool, param: str, effort: str | None = None) -> dict[str, Any]:
    """Fields that turn reasoning on or off, in the style the server understands."""
    if param == "none":
        return {}
    if param == "chat_template_kwargs":  # vLLM, SGLang, llama.cpp server (Qwen3-style templates)
        fields: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": reasoning}}
        if effort is not None:
            fields["reasoning_effort"] = effort
        return fields
    if param == "reasoning":  # OpenRouter
        block: dict[str, Any] = {"enabled": reasoning}
        if reasoning and effort is not None:
            block["effort"] = effort
        return {"reasoning": block}
    if param == "reasoning_effort":  # passthrough servers told to use OpenAI's field
        return {"reasoning_effort": (effort or "medium") if reasoning else "minimal"}
    raise ValueError(f"unknown reasoning_param {param!r}")


@dataclass(frozen=True)
class AnthropicFields:
    fields: dict[str, Any]
    unsent: tuple[str, ...]
    thinking: bool


def anthropic_fields(
    caps: Capabilities, *, temperature: float, top_p: float | None, max_tokens: int, reasoning: bool | None
) -> AnthropicFields:
    """max_tokens, sampling and thinking fields of an Anthropic Messages request.

    Thinking is on when asked for (`reasoning` True) or when the spec sets a thinking budget
    (unless `reasoning` is False). With thinking, the temperature is left at its default (the
    API requires 1), top_p is sent only within the 0.95-1 the API allows, and the budget sits
    inside max_tokens with at least `ANSWER_ROOM` tokens left for the answer.
    """
    thinking = bool(reasoning) or (reasoning is None and caps.thinking_budget is not None)
    if not thinking:
        fields: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if top_p is not None:
            fields["top_p"] = top_p
        return AnthropicFields(fields, (), False)
    budget = caps.thinking_budget or max(MIN_THINKING_BUDGET, max_tokens // 2)
    fields = {
        "max_tokens": max(max_tokens, budget + ANSWER_ROOM),
        "thinking": {"type": "enabled", "budget_tokens": budget},
    }
    unsent = ["temperature"]
    if top_p is not None and top_p >= 0.95:
        fields["top_p"] = top_p
    elif top_p is not None:
        unsent.append("top_p")
    return AnthropicFields(fields, tuple(unsent), True)


def table_rows() -> list[tuple[str, str, Capabilities]]:
    """(provider, model pattern, capabilities) of the table, for docs and tests."""
    rows = [("openai", pattern.pattern, caps) for pattern, caps in _OPENAI_TABLE]
    rows.append(("openai", "(any other)", _OPENAI_DEFAULT))
    rows.append(("anthropic", "(any)", _ANTHROPIC))
    rows.extend((p, "(any)", _PASSTHROUGH) for p in PASSTHROUGH_PROVIDERS)
    return rows
