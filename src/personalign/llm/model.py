"""`Model`: a backend wrapped with the cache, a concurrency limit, retries, usage and cost."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from personalign.errors import ModelCallError
from personalign.llm.backends import Backend
from personalign.llm.cache import CallCache, cache_key
from personalign.llm.pricing import PriceTable
from personalign.llm.ratelimit import EndpointGate, RateController, endpoint_name
from personalign.llm.spec import ModelSpec
from personalign.llm.types import (
    BackendResponse,
    Completion,
    GenerateConfig,
    Usage,
    normalize_finish_reason,
)
from personalign.llm.usage import UsageTracker
from personalign.types import Message


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter; a server's Retry-After wins when it is longer."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 300.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        backoff = rng.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))
        if retry_after is not None:
            return max(min(retry_after, self.max_retry_after), backoff)
        return backoff


# How often a process waiting for another process's identical call looks for its answer.
CLAIM_POLL_SECONDS = 0.2

# How far along its instance the current call is: calls of instances that are further along get
# a free slot first, so started work finishes before new work starts. Without it, every instance
# in flight can end up waiting for one shared follow-up call queued behind a long line of new
# instances' first calls, and the backend sits idle (seen as a dip in throughput).
_call_priority: ContextVar[int] = ContextVar("personalign_call_priority", default=0)


@contextmanager
def call_priority(priority: int) -> Iterator[None]:
    """Calls made inside (in this task) queue for a slot with `priority` (higher goes first)."""
    token = _call_priority.set(priority)
    try:
        yield
    finally:
        _call_priority.reset(token)


class PrioritySlots:
    """A counting semaphore whose freed slot goes to the highest-priority waiter (FIFO among equals)."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def acquire(self, priority: int = 0) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (-priority, next(self._order), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as we were cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():  # cancelled waiters are skipped here
                waiter.set_result(None)
                return
        self._free += 1

    @contextmanager
    def _held(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.release()


class Model:
    """The one way personalign calls a model: `await model.complete(messages, config)`."""

    def __init__(
        self,
        spec: ModelSpec,
        backend: Backend,
        *,
        cache: CallCache | None,
        tracker: UsageTracker,
        prices: PriceTable,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        gate: EndpointGate | None = None,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.cache = cache
        self.tracker = tracker
        self.prices = prices
        self.retry = retry or RetryPolicy(max_retries=spec.max_retries)
        self._slots = PrioritySlots(spec.concurrency)
        self._rng = rng or random.Random()
        self._inflight: dict[str, asyncio.Future[Completion]] = {}
        # Calls in flight at the endpoint adapt to its rate limits (shared by the models of one
        # endpoint when the factory builds them); the spec's concurrency stays this model's ceiling.
        self._gate = gate if gate is not None else endpoint_gate(spec)
        if self._gate is not None:
            tracker.register_endpoint(self._gate.name, self._gate.stats)

    @property
    def label(self) -> str:
        return self.spec.label

    async def complete(
        self, messages: Sequence[Message], config: GenerateConfig | None = None, *, refresh: bool = False
    ) -> Completion:
        """Answer from the cache, or call the backend with retries; raise `ModelCallError` on failure.

        `refresh` skips the cache read (the cached reply was rejected and evicted); the new reply
        is stored as usual.
        """
        config = config or GenerateConfig()
        key = self.key_for(messages, config)
        if self.cache is not None and not refresh:
            hit = self.cache.get(key)
            if hit is not None:
                return self._from_cache(key, hit)
        # Identical calls already in flight share one request (then one cache entry).
        pending = self._inflight.get(key)
        if pending is not None:
            shared = await asyncio.shield(pending)
            self.tracker.record_cache_hit(self.label)
            return shared.model_copy(
                update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0, "attempts": 0}
            )
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            completion = await self._claimed_call(key, messages, config)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        else:
            future.set_result(completion)
            return completion
        finally:
            del self._inflight[key]

    def key_for(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        """The call's cache key (also its batch ``custom_id``)."""
        # How a schema is sent changes what comes back, so it is part of the key; so are the spec
        # options that change the output (reasoning_effort, ...); the base URL is not.
        base = self.spec.identity
        identity = base if config.json_schema is None else f"{base}|{self.spec.schema_mode}"
        return cache_key(identity, messages, config)

    def cached(self, key: str) -> Completion | None:
        """The cached answer for `key` (counted as a cache hit), or None."""
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        return None if hit is None else self._from_cache(key, hit)

    def accept(
        self,
        key: str,
        response: BackendResponse,
        *,
        latency: float = 0.0,
        retries: int = 0,
        batch: bool = False,
    ) -> Completion:
        """Account for and cache one successful answer, as a `Completion`: the one path for direct
        calls and batch results alike (`batch` prices it at the provider's batch price)."""
        cost = self.prices.cost(self.spec, response.usage, batch=batch)
        self.tracker.record_call(self.label, response.usage, cost, retries, batch=batch)
        if self.cache is not None:
            self.cache.put(
                key,
                self.label,
                {
                    "text": response.text,
                    "usage": response.usage.model_dump(),
                    "finish_reason": response.finish_reason,
                    "raw": response.raw,
                },
            )
        return Completion(
            text=response.text,
            usage=response.usage,
            model=self.label,
            latency_s=latency,
            cost_usd=cost,
            attempts=retries + 1,
            finish_reason=response.finish_reason,
            cache_key=key,
            raw=response.raw,
        )

    def reject(self, completion: Completion) -> None:
        """Evict a reply that its step rejected (unparseable, truncated, empty), so that a re-run
        asks the model again instead of reading the same bad reply from the cache."""
        if self.cache is not None and completion.cache_key is not None:
            self.cache.delete(completion.cache_key)

    def _from_cache(self, key: str, hit: dict[str, Any]) -> Completion:
        self.tracker.record_cache_hit(self.label)
        raw = hit.get("raw")
        finish = hit.get("finish_reason")
        if finish is None and isinstance(raw, dict):  # entries stored before the field existed
            finish = normalize_finish_reason(raw.get("finish_reason") or raw.get("stop_reason"))
        # Built without re-validation: the entry was validated when it was stored.
        return Completion.model_construct(
            text=hit["text"],
            usage=Usage.model_construct(**hit["usage"]),
            model=self.label,
            cached=True,
            latency_s=0.0,
            cost_usd=0.0,
            attempts=0,
            finish_reason=finish,
            cache_key=key,
            raw=raw,
        )

    async def _claimed_call(
        self, key: str, messages: Sequence[Message], config: GenerateConfig
    ) -> Completion:
        """Call once this process holds the key's claim in the shared cache: while another
        process is making the same call, wait for its answer instead of paying for it again."""
        if self.cache is None:
            return await self._call(key, messages, config)
        ttl = (self.spec.timeout + 5) * (self.retry.max_retries + 1) + self.retry.max_delay
        while True:
            claimed = self.cache.claim(key, ttl)
            if isinstance(claimed, dict):
                return self._from_cache(key, claimed)
            if claimed:
                break
            await asyncio.sleep(CLAIM_POLL_SECONDS)
        try:
            return await self._call(key, messages, config)
        except BaseException:
            self.cache.release(key)
            raise

    async def _call(self, key: str, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        self.tracker.check_budget()
        attempt = 0
        started = time.perf_counter()
        gate = self._gate
        tokens = 0.0
        if gate is not None:  # the estimate a tokens-per-minute limit is paced by
            tokens = sum(len(m.content) for m in messages) / 4 + config.max_tokens
        while True:
            try:
                priority = _call_priority.get()
                await self._slots.acquire(priority)
                with self._slots._held():
                    if gate is None:
                        response = await asyncio.wait_for(
                            self.backend.generate(messages, config, timeout=self.spec.timeout),
                            timeout=self.spec.timeout + 5,
                        )
                    else:
                        response = await self._gated(gate, priority, tokens, messages, config)
                break
            except asyncio.TimeoutError:
                error = ModelCallError(
                    f"{self.label}: no answer within {self.spec.timeout:g}s", retryable=True
                )
            except ModelCallError as exc:
                error = exc
            if not error.retryable or attempt >= self.retry.max_retries:
                self.tracker.record_error(self.label, attempt)
                suffix = f" (after {attempt + 1} attempts)" if attempt else ""
                raise ModelCallError(
                    f"{error}{suffix}",
                    retryable=error.retryable,
                    retry_after=error.retry_after,
                    status_code=error.status_code,
                ) from error
            if gate is not None and gate.controller.adaptive and error.status_code == 429:
                # The gate already holds the endpoint for the server's retry-after and narrowed
                # the window; a short jitter is enough here, a long backoff would only idle it.
                await asyncio.sleep(self._rng.uniform(0, min(self.retry.base_delay, 0.1)))
            else:
                await asyncio.sleep(self.retry.delay(attempt, error.retry_after, self._rng))
            attempt += 1
        return self.accept(key, response, latency=time.perf_counter() - started, retries=attempt)

    async def _gated(
        self,
        gate: EndpointGate,
        priority: int,
        tokens: float,
        messages: Sequence[Message],
        config: GenerateConfig,
    ) -> BackendResponse:
        """One attempt through the endpoint's gate, reporting how it ended (status, headers, usage)."""
        ticket = await gate.acquire(priority, tokens)
        status: int | None = None
        headers: dict[str, str] | None = None
        used = 0
        try:
            response = await asyncio.wait_for(
                self.backend.generate(messages, config, timeout=self.spec.timeout),
                timeout=self.spec.timeout + 5,
            )
            status, headers, used = 200, response.headers, response.usage.total_tokens
            return response
        except ModelCallError as exc:
            status, headers = exc.status_code, exc.headers
            raise
        finally:
            gate.release(ticket, status=status, headers=headers, used_tokens=used)

    async def aclose(self) -> None:
        await self.backend.aclose()


def endpoint_gate(spec: ModelSpec, ceiling: int | None = None) -> EndpointGate | None:
    """A gate for the spec's endpoint: HTTP endpoints that adapt or have an rpm/tpm budget."""
    if spec.base_url is None or not (spec.adaptive or spec.rpm or spec.tpm):
        return None
    controller = RateController(
        endpoint_name(spec.provider, spec.base_url),
        ceiling=ceiling or spec.concurrency,
        adaptive=spec.adaptive,
        rpm=spec.rpm,
        tpm=spec.tpm,
        now=time.monotonic(),
    )
    return EndpointGate(controller)
