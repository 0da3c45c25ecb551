"""Building models: `build_backend` for a spec, and `ModelFactory`, which shares one call cache, usage
tracker and price table among a run's models (re-exported by `personalign.llm`)."""

from __future__ import annotations

import json

from personalign.errors import ConfigError
from personalign.llm.backends import Backend
from personalign.llm.cache import CallCache
from personalign.llm.model import Model, endpoint_gate
from personalign.llm.pricing import PriceTable
from personalign.llm.ratelimit import EndpointGate
from personalign.llm.spec import ModelSpec, parse_model_spec
from personalign.llm.usage import UsageTracker


def build_backend(spec: ModelSpec) -> Backend:
    """Instantiate the backend for a spec; heavy imports happen only for the provider in use."""
    if spec.provider == "local":
        from personalign.llm.backends.llama_local import LlamaLocalBackend

        return LlamaLocalBackend(spec)
    if spec.provider == "scripted":
        from personalign.llm.backends.scripted import ScriptedBackend

        return ScriptedBackend()
    if spec.provider == "hf":
        from personalign.llm.backends.hf import HFBackend

        return HFBackend(spec)
    if spec.provider == "anthropic":
        from personalign.llm.backends.anthropic import AnthropicBackend

        return AnthropicBackend(spec)
    if spec.base_url:
        from personalign.llm.backends.openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(spec)
    raise ConfigError(f"no backend for {spec}")


class ModelFactory:
    """Builds `Model`s that share one cache, one usage tracker and one price table.

    The same spec string always returns the same `Model`, so roles that name the same model
    share its concurrency limit.
    """

    def __init__(
        self,
        *,
        cache: CallCache | None,
        tracker: UsageTracker | None = None,
        prices: PriceTable | None = None,
        backends: dict[str, Backend] | None = None,
    ) -> None:
        self.cache = cache
        self.tracker = tracker or UsageTracker()
        self.prices = prices or PriceTable.load()
        self._backends = backends or {}
        self._models: dict[str, Model] = {}
        self._gates: dict[tuple[str, str], EndpointGate | None] = {}

    def get(self, spec: str | ModelSpec) -> Model:
        parsed = parse_model_spec(spec) if isinstance(spec, str) else spec
        key = json.dumps(parsed.to_record(), sort_keys=True)
        if key not in self._models:
            backend = self._backends.get(str(parsed)) or build_backend(parsed)
            if self.tracker.max_cost_usd is not None and self.prices.price_for(parsed) is None:
                raise ConfigError(
                    f"a budget cap is set but the price table ({self.prices.source}) has no price for "
                    f"{parsed.label}; add it with --prices FILE"
                )
            self._models[key] = Model(
                parsed,
                backend,
                cache=self.cache,
                tracker=self.tracker,
                prices=self.prices,
                gate=self._gate(parsed),
            )
        return self._models[key]

    def _gate(self, spec: ModelSpec) -> EndpointGate | None:
        """The one gate of the spec's endpoint (provider + base URL), shared by its models; its
        ceiling is the largest ``concurrency=`` among them (each model keeps its own as well)."""
        if spec.base_url is None:
            return None
        key = (spec.provider, spec.base_url)
        if key not in self._gates:
            self._gates[key] = endpoint_gate(spec)
        gate = self._gates[key]
        if gate is not None:
            gate.controller.ceiling = max(gate.controller.ceiling, spec.concurrency)
        return gate

    async def aclose(self) -> None:
        """Close every backend and commit the cache's pending writes (the cache stays open)."""
        for model in self._models.values():
            await model.aclose()
        if self.cache is not None:
            self.cache.flush()
