"""Cost from a user-editable price table (USD per million tokens)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from personalign.errors import ConfigError
from personalign.llm.spec import ModelSpec
from personalign.llm.types import Usage

FREE_PROVIDERS = {"local", "scripted"}


# Batch APIs (OpenAI Batch, Anthropic Message Batches) bill half the direct price, unless the
# table gives an entry's own ``batch_input`` / ``batch_output`` or a ``_batch_multiplier``.
BATCH_MULTIPLIER = 0.5


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    batch_input: float | None = None
    batch_output: float | None = None

    def cost(self, usage: Usage, *, batch: bool = False, multiplier: float = BATCH_MULTIPLIER) -> float:
        rate_in, rate_out = self.input, self.output
        if batch:
            rate_in = self.batch_input if self.batch_input is not None else self.input * multiplier
            rate_out = self.batch_output if self.batch_output is not None else self.output * multiplier
        return (usage.prompt_tokens * rate_in + usage.completion_tokens * rate_out) / 1_000_000


class PriceTable:
    def __init__(
        self, prices: dict[str, Price], source: str, batch_multiplier: float = BATCH_MULTIPLIER
    ) -> None:
        self._prices = prices
        self.source = source
        self.batch_multiplier = batch_multiplier

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """Load `path`, else `$PERSONALIGN_PRICES`, else the bundled table."""
        chosen = path or os.environ.get("PERSONALIGN_PRICES")
        if chosen:
            source = str(chosen)
            try:
                text = Path(chosen).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"price table {source}: {exc.strerror}") from None
        else:
            source = "bundled"
            text = resources.files("personalign.llm").joinpath("prices.json").read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"price table {source}: not valid JSON ({exc.msg})") from None
        prices: dict[str, Price] = {}
        for key, value in data.items():
            if key.startswith("_"):
                continue
            try:
                batch = {f: float(value[f]) for f in ("batch_input", "batch_output") if f in value}
                prices[key] = Price(float(value["input"]), float(value["output"]), **batch)
            except (TypeError, KeyError, ValueError):
                raise ConfigError(
                    f"price table {source}: entry {key!r} needs numeric 'input' and 'output' "
                    "(and numeric 'batch_input'/'batch_output' where given)"
                ) from None
        multiplier = data.get("_batch_multiplier", BATCH_MULTIPLIER)
        if (
            isinstance(multiplier, bool)
            or not isinstance(multiplier, (int, float))
            or not 0 < multiplier <= 1
        ):
            raise ConfigError(f"price table {source}: '_batch_multiplier' must be a number in (0, 1]")
        return cls(prices, source, float(multiplier))

    def price_for(self, spec: ModelSpec) -> Price | None:
        if spec.provider in FREE_PROVIDERS:
            return Price(0.0, 0.0)
        return self._prices.get(spec.label) or self._prices.get(spec.model)

    def cost(self, spec: ModelSpec, usage: Usage, *, batch: bool = False) -> float | None:
        """USD for `usage`; `batch` = answered through the provider's batch API (half price by default)."""
        price = self.price_for(spec)
        return None if price is None else price.cost(usage, batch=batch, multiplier=self.batch_multiplier)
