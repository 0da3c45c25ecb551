"""Run-wide accounting of calls, tokens, cache hits, errors and cost, with an optional budget cap."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from personalign.errors import BudgetExceeded
from personalign.llm.ratelimit import EndpointStats
from personalign.llm.types import Usage


@dataclass
class ModelTally:
    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens, where the provider reports it
    cached_prompt_tokens: int = 0  # part of prompt_tokens the backend reused instead of evaluating
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    batch_calls: int = 0  # answered through a provider's batch API (part of calls)


@dataclass
class UsageTracker:
    """Counts every call; `max_cost_usd` stops new (uncached) calls once reached."""

    max_cost_usd: float | None = None
    per_model: dict[str, ModelTally] = field(default_factory=dict)
    # What adaptive concurrency did per endpoint (`llm.ratelimit`), filled in by the gates.
    endpoints: dict[str, EndpointStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def register_endpoint(self, name: str, stats: EndpointStats) -> None:
        self.endpoints.setdefault(name, stats)

    def _tally(self, model: str) -> ModelTally:
        return self.per_model.setdefault(model, ModelTally())

    def check_budget(self) -> None:
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            raise BudgetExceeded(f"budget of ${self.max_cost_usd:.4f} reached (spent ${self.cost_usd:.4f})")

    def record_call(
        self, model: str, usage: Usage, cost: float | None, retries: int, *, batch: bool = False
    ) -> None:
        with self._lock:
            t = self._tally(model)
            t.calls += 1
            t.batch_calls += batch
            t.retries += retries
            t.prompt_tokens += usage.prompt_tokens
            t.completion_tokens += usage.completion_tokens
            t.reasoning_tokens += usage.reasoning_tokens
            t.cached_prompt_tokens += usage.cached_prompt_tokens
            if cost is None:
                t.unpriced_calls += 1
            else:
                t.cost_usd += cost

    def record_cache_hit(self, model: str) -> None:
        with self._lock:
            self._tally(model).cache_hits += 1

    def record_error(self, model: str, retries: int) -> None:
        with self._lock:
            t = self._tally(model)
            t.errors += 1
            t.retries += retries

    def _sum(self, name: str) -> Any:
        return sum(getattr(t, name) for t in self.per_model.values())

    @property
    def calls(self) -> int:
        return int(self._sum("calls"))

    @property
    def cache_hits(self) -> int:
        return int(self._sum("cache_hits"))

    @property
    def errors(self) -> int:
        return int(self._sum("errors"))

    @property
    def tokens(self) -> int:
        return int(self._sum("prompt_tokens") + self._sum("completion_tokens"))

    @property
    def reasoning_tokens(self) -> int:
        return int(self._sum("reasoning_tokens"))

    @property
    def cost_usd(self) -> float:
        return float(self._sum("cost_usd"))

    def to_record(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "errors": self.errors,
            "tokens": self.tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "max_cost_usd": self.max_cost_usd,
            "per_model": {k: _tally_record(v) for k, v in sorted(self.per_model.items())},
            # Only endpoints that made calls: runs on scripted/local models keep their old record.
            **(
                {"rate_limits": {k: v.to_record() for k, v in sorted(self.endpoints.items()) if v.calls}}
                if any(v.calls for v in self.endpoints.values())
                else {}
            ),
        }


def _tally_record(tally: ModelTally) -> dict[str, Any]:
    record = vars(tally).copy()
    if not record["batch_calls"]:  # records of runs without batch calls stay as they were
        del record["batch_calls"]
    return record
