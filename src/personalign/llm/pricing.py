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


@dataclass(frozen=True)
class Price:
    input: float
    output: float

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input + usage.completion_tokens * self.output) / 1_000_000


class PriceTable:
    def __init__(self, prices: dict[str, Price], source: str) -> None:
        self._prices = prices
        self.source = source

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
                prices[key] = Price(float(value["input"]), float(value["output"]))
            except (TypeError, KeyError, ValueError):
                raise ConfigError(
                    f"price table {source}: entry {key!r} needs numeric 'input' and 'output'"
                ) from None
        return cls(prices, source)

    def price_for(self, spec: ModelSpec) -> Price | None:
        if spec.provider in FREE_PROVIDERS:
            return Price(0.0, 0.0)
        return self._prices.get(spec.label) or self._prices.get(spec.model)

    def cost(self, spec: ModelSpec, usage: Usage) -> float | None:
        price = self.price_for(spec)
        return None if price is None else price.cost(usage)
