"""Model specs: the short strings users type to name a model.

Syntax: ``provider/model[@base_url][?option=value&...]``

- ``local/smollm2``: the bundled SmolLM2-135M-Instruct, in-process via llama.cpp (default);
  ``local/<path-to.gguf>`` for any GGUF file.
- ``openai/<model>``: api.openai.com, key from ``OPENAI_API_KEY``.
- ``openrouter/<model>``, ``together/<model>``: their OpenAI-compatible APIs.
- ``openai-compat/<model>@<base_url>``: any OpenAI-compatible server (vLLM, SGLang, Ollama,
  llama.cpp server, ...); no key unless ``key_env`` is given.
- ``anthropic/<model>``: the Anthropic Messages API, key from ``ANTHROPIC_API_KEY``.
- ``scripted/<name>``: a deterministic in-process model for tests and dry runs.
- ``hf/<model-or-path>``: transformers in-process (``hf/smollm2`` = the bundled GGUF, dequantized);
  options ``adapter`` (a PEFT adapter directory, e.g. from ``personalign train``), ``device``,
  ``dtype``, ``gguf_file`` and ``batch`` (prompts per generate call, default 8). The adapter's
  weights hash is part of the model identity.

Options: ``key_env`` (name of the env var holding the key; the key itself is never part of
a spec), ``concurrency`` (calls in flight; with adaptation, the ceiling), ``adaptive``
(``true`` by default for HTTP endpoints: calls in flight adapt to 429s and rate-limit
headers, `llm.ratelimit`; ``false`` keeps exactly ``concurrency``), ``rpm`` / ``tpm``
(requests / tokens per minute budgets, paced per endpoint), ``timeout`` (seconds per call),
``max_retries``, and for
OpenAI-compatible servers ``schema_mode`` = ``json_schema`` (OpenAI style, default) |
``json_object`` (llama-cpp-python server style) | ``none``, and ``reasoning_param``, how a
request to turn reasoning on or off is sent: ``chat_template_kwargs`` (``enable_thinking``, as
vLLM, SGLang and llama.cpp servers take it; default for ``openai-compat`` and ``together``),
``reasoning`` (OpenRouter's ``{"enabled": ...}``; default for ``openrouter``),
``reasoning_effort`` (OpenAI's, ``medium`` / the family's off effort; default for ``openai``) or
``none``. Request-shape options, checked against the capability table (`llm.capabilities`):
``token_param`` (``max_tokens`` | ``max_completion_tokens``), ``reasoning_effort``
(``none|minimal|low|medium|high|xhigh``, where the model accepts it; part of the cache key),
``system_role`` (``system`` | ``developer``) and, for Anthropic, ``thinking_budget`` (tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from personalign.errors import ConfigError
from personalign.llm.capabilities import Capabilities, base_capabilities, resolve_capabilities
from personalign.redact import redact_text

OPENAI_COMPATIBLE_HOSTS: dict[str, tuple[str, str]] = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
}
PROVIDERS = (*OPENAI_COMPATIBLE_HOSTS, "openai-compat", "anthropic", "local", "scripted", "hf")
# hf/: 8 calls in flight, so the in-process backend can batch them into one generate call
DEFAULT_CONCURRENCY = {"local": 1, "scripted": 64, "anthropic": 8, "hf": 8}
# hf/: a call's time includes its wait for the batch ahead of it in the same process (no network to
# fail), so a CPU batch of long replies must not be cut off and retried at the HTTP default.
DEFAULT_TIMEOUT = {"hf": 3600.0}
KNOWN_OPTIONS = {
    "key_env",
    "concurrency",
    "timeout",
    "max_retries",
    "schema_mode",
    "reasoning_param",
    "token_param",
    "reasoning_effort",
    "system_role",
    "thinking_budget",
    # hf/ (transformers in-process)
    "adapter",
    "device",
    "dtype",
    "gguf_file",
    "batch",
    "adaptive",
    "rpm",
    "tpm",
}
HF_ONLY_OPTIONS = ("adapter", "device", "dtype", "gguf_file", "batch")
# Options that change what the model writes: part of the cache key and of run identities
# (``adapter_sha`` is computed from an hf/ adapter's weights, never typed).
OUTPUT_OPTIONS = ("reasoning_effort", "system_role", "thinking_budget", "adapter_sha", "dtype", "gguf_file")
SCHEMA_MODES = {"json_schema", "json_object", "none"}
# How an OpenAI-compatible backend is told to turn reasoning on or off (GenerateConfig.reasoning).
REASONING_PARAMS = {"chat_template_kwargs", "reasoning", "reasoning_effort", "none"}
DEFAULT_REASONING_PARAM = {"openai": "reasoning_effort", "openrouter": "reasoning"}

EMBEDDED_DEFAULT = "local/smollm2"


def subject_and_judge(model: str | None, judge: str | None) -> tuple[str, str]:
    """The subject and judge specs of a run: the embedded default for whichever is not given.

    A subject other than the embedded default needs an explicit judge: a run never silently
    grades a model with itself or with the small bundled model.
    """
    if model and model != EMBEDDED_DEFAULT and not judge:
        raise ConfigError(
            "--judge is required with --model: personalign never lets a model grade itself by default"
        )
    return model or EMBEDDED_DEFAULT, judge or EMBEDDED_DEFAULT


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str | None = None
    key_env: str | None = None
    concurrency: int = 16
    timeout: float = 120.0
    max_retries: int = 4
    schema_mode: str = "json_schema"
    reasoning_param: str = "chat_template_kwargs"
    adaptive: bool = True
    rpm: float | None = None
    tpm: float | None = None
    options: dict[str, str] = field(default_factory=dict, compare=False)
    capabilities: Capabilities | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """Identity of the model (used in cache keys, reports and run names)."""
        return f"{self.provider}/{self.model}"

    @property
    def caps(self) -> Capabilities:
        """The request rules of this model (the capability table with the spec's options)."""
        return self.capabilities or base_capabilities(self.provider, self.model)

    @property
    def identity(self) -> str:
        """`label` plus the options that change the output (``?reasoning_effort=high``): what a
        cache key and a run identity must tell apart. Equal to `label` when none is set."""
        extra = [f"{k}={self.options[k]}" for k in OUTPUT_OPTIONS if k in self.options]
        if self.options.get("system_role") == "system":  # the default: same output as unset
            extra.remove("system_role=system")
        return self.label + ("?" + "&".join(extra) if extra else "")

    def __str__(self) -> str:
        """The spec as shown and stored: credentials in the base URL are redacted."""
        text = self.label
        if self.base_url and self.provider == "openai-compat":
            text += f"@{redact_text(self.base_url)}"
        return text

    def to_record(self) -> dict[str, object]:
        """A JSON-safe description for manifests; never contains a key, only its variable name."""
        return {
            "spec": str(self),
            "provider": self.provider,
            "model": self.model,
            "base_url": redact_text(self.base_url) if self.base_url else None,
            "key_env": self.key_env,
            "concurrency": self.concurrency,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "schema_mode": self.schema_mode,
            "reasoning_param": self.reasoning_param,
            "capabilities": self.caps.to_record(),
            # Only when set, so that existing manifests stay byte-identical.
            **({"adaptive": False} if not self.adaptive else {}),
            **({"rpm": self.rpm} if self.rpm is not None else {}),
            **({"tpm": self.tpm} if self.tpm is not None else {}),
        }


def parse_model_spec(text: str) -> ModelSpec:
    """Parse a spec string; raises `ConfigError` with the reason when it is malformed.

    Error messages show the spec with credentials redacted (`redact_text`).
    """
    raw = text.strip()
    text = redact_text(text)  # from here on only for messages
    if "/" not in raw:
        raise ConfigError(
            f"model spec {text!r} must look like provider/model (providers: {', '.join(PROVIDERS)})"
        )
    raw, _, query = raw.partition("?")
    provider, _, rest = raw.partition("/")
    provider = provider.lower()
    if provider not in PROVIDERS:
        raise ConfigError(f"unknown provider {provider!r} in {text!r} (known: {', '.join(PROVIDERS)})")
    model, _, base_url = rest.partition("@")
    if not model:
        raise ConfigError(f"model spec {text!r} names no model")
    options = dict(parse_qsl(query, keep_blank_values=True)) if query else {}
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)} in {text!r} (known: {sorted(KNOWN_OPTIONS)})")

    key_env = options.get("key_env")
    if provider != "hf" and set(options) & set(HF_ONLY_OPTIONS):
        raise ConfigError(f"{text!r}: {sorted(set(options) & set(HF_ONLY_OPTIONS))} only apply to hf/ models")
    if provider == "hf" and options.get("adapter"):
        from personalign.llm.adapters import adapter_digest

        options["adapter_sha"] = adapter_digest(options["adapter"])
    if provider in OPENAI_COMPATIBLE_HOSTS:
        default_url, default_key = OPENAI_COMPATIBLE_HOSTS[provider]
        base_url = base_url or default_url
        key_env = key_env or default_key
    elif provider == "openai-compat":
        if not base_url:
            raise ConfigError(
                f"{text!r}: openai-compat needs a base URL, e.g. openai-compat/NAME@http://host:8000/v1"
            )
    elif provider == "anthropic":
        base_url = base_url or "https://api.anthropic.com"
        key_env = key_env or "ANTHROPIC_API_KEY"
    elif base_url:
        raise ConfigError(f"{text!r}: provider {provider!r} takes no base URL")
    if base_url and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"{text!r}: base URL must start with http:// or https://")

    schema_mode = options.get("schema_mode", "json_schema")
    if schema_mode not in SCHEMA_MODES:
        raise ConfigError(f"{text!r}: schema_mode must be one of {sorted(SCHEMA_MODES)}")
    reasoning_param = options.get(
        "reasoning_param", DEFAULT_REASONING_PARAM.get(provider, "chat_template_kwargs")
    )
    if reasoning_param not in REASONING_PARAMS:
        raise ConfigError(f"{text!r}: reasoning_param must be one of {sorted(REASONING_PARAMS)}")
    try:
        concurrency = int(options.get("concurrency", DEFAULT_CONCURRENCY.get(provider, 16)))
        timeout = float(options.get("timeout", DEFAULT_TIMEOUT.get(provider, 120.0)))
        max_retries = int(options.get("max_retries", 4))
    except ValueError as exc:
        raise ConfigError(f"{text!r}: bad numeric option ({exc})") from None
    if concurrency < 1 or timeout <= 0 or max_retries < 0:
        raise ConfigError(f"{text!r}: concurrency >= 1, timeout > 0 and max_retries >= 0 are required")
    adaptive_text = options.get("adaptive", "true").lower()
    if adaptive_text not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise ConfigError(f"{text!r}: adaptive must be true or false, not {options['adaptive']!r}")
    budgets: dict[str, float | None] = {}
    for name in ("rpm", "tpm"):
        try:
            budgets[name] = float(options[name]) if name in options else None
        except ValueError:
            raise ConfigError(f"{text!r}: {name} must be a number, not {options[name]!r}") from None
        value = budgets[name]
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"{text!r}: {name} must be > 0")
    capabilities = resolve_capabilities(provider, model, options)
    return ModelSpec(
        capabilities=capabilities,
        provider=provider,
        model=model,
        base_url=base_url.rstrip("/") if base_url else None,
        key_env=key_env,
        concurrency=concurrency,
        timeout=timeout,
        max_retries=max_retries,
        schema_mode=schema_mode,
        reasoning_param=reasoning_param,
        adaptive=adaptive_text in ("true", "1", "yes", "on"),
        rpm=budgets["rpm"],
        tpm=budgets["tpm"],
        options=options,
    )
