"""Adaptive concurrency per endpoint: AIMD on 429s, pacing from rate-limit headers and budgets.

`RateController` is the pure logic (every method takes the time as an argument, so tests
drive it with a fake clock); `EndpointGate` puts it in front of an asyncio event loop, with
the same priority order as `PrioritySlots` (a started instance's follow-up calls go first).

What decides when a call may start, all per endpoint (provider + base URL):

- a window of calls in flight, additive increase (+1 per success until the first decrease,
  then +1/limit, i.e. +1 per window of successes) and multiplicative decrease (x0.5 on a 429,
  at most once per window of calls), between 1 and the spec's ``concurrency=`` ceiling;
- pacing from the provider's rate-limit headers: the remaining requests (tokens) and the time
  until the limit is full again give the refill rate ``(limit - remaining) / reset``; a local
  copy of the provider's bucket, corrected by every response, lets a call start only while it
  holds at least one request (its token estimate); without a limit header, remaining = 0
  pauses the endpoint until the reset time;
- a 429's ``retry-after`` (``retry-after-ms``) pauses the endpoint for that long;
- optional ``rpm=`` / ``tpm=`` budgets from the spec, as token buckets of one second's burst.

With ``adaptive=false`` only the budgets apply: no window, no header pacing.
"""

from __future__ import annotations

import asyncio
import email.utils
import heapq
import itertools
import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)

# The first calls of an endpoint we know nothing about: enough to reach a local server's
# ceiling within one round of answers (+1 per success doubles the window per round), few
# enough that a provider's one-second burst allowance is not overrun on the first round.
INITIAL_LIMIT = 32
DECREASE_FACTOR = 0.5
# The derived refill rate is used with a small margin: remaining counts are whole numbers and
# reset times are rounded, and pacing exactly at the provider's rate invites stray 429s.
RATE_MARGIN = 0.97
# Share of the provider's limit kept unused in the local copy of its bucket: a reading counts
# the refill since the call *started*, but the provider counted it on *arrival* (later, by as
# much as a new connection's setup), so readings overstate what is left by a little. A fixed
# reserve costs only a moment at the start, not throughput.
HEADER_RESERVE = 0.1
RATE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "retry-after")

_DURATION = re.compile(
    r"^(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m(?!s))?(?:(?P<s>\d+(?:\.\d+)?)s)?"
    r"(?:(?P<ms>\d+(?:\.\d+)?)ms)?$"
)


def rate_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The rate-limit headers of a response (lower-case names), the only ones the model layer keeps."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith(RATE_HEADER_PREFIXES)}


def parse_duration(value: str) -> float | None:
    """Seconds in an OpenAI reset value (``1m30s``, ``6ms``, ``0.5s``, ``2h0m0s``) or a plain number."""
    text = value.strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    match = _DURATION.match(text)
    if match is None or not any(match.groupdict().values()):
        return None
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    return (
        parts.get("h", 0.0) * 3600
        + parts.get("m", 0.0) * 60
        + parts.get("s", 0.0)
        + parts.get("ms", 0.0) / 1000
    )


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def parse_reset(value: str | None, wall_now: float) -> float | None:
    """Seconds until a reset: a duration (OpenAI) or an RFC 3339 time (Anthropic); None if unreadable."""
    if not value:
        return None
    seconds = parse_duration(value)
    if seconds is not None:
        return seconds
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - wall_now)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class LimitReading:
    """One dimension (requests or tokens) of a response's rate-limit headers."""

    limit: int | None
    remaining: int | None
    reset: float | None  # seconds until the limit is full again

    @property
    def rate(self) -> float | None:
        """Units per second the provider refills, derived as ``(limit - remaining) / reset``."""
        if self.limit is None or self.remaining is None or not self.reset or self.remaining >= self.limit:
            return None
        return (self.limit - self.remaining) / self.reset


@dataclass(frozen=True)
class RateHeaders:
    requests: LimitReading
    tokens: LimitReading
    retry_after: float | None

    @property
    def empty(self) -> bool:
        return self.requests.remaining is None and self.tokens.remaining is None and self.retry_after is None


def parse_rate_headers(headers: Mapping[str, str] | None, wall_now: float | None = None) -> RateHeaders:
    """Read OpenAI (``x-ratelimit-*``) or Anthropic (``anthropic-ratelimit-*``) rate-limit headers
    and ``retry-after`` / ``retry-after-ms``; names must be lower case (as `rate_headers` keeps them)."""
    h = headers or {}
    wall = time.time() if wall_now is None else wall_now

    def reading(kind: str) -> LimitReading:
        if f"x-ratelimit-remaining-{kind}" in h or f"x-ratelimit-limit-{kind}" in h:
            return LimitReading(
                _int(h.get(f"x-ratelimit-limit-{kind}")),
                _int(h.get(f"x-ratelimit-remaining-{kind}")),
                parse_reset(h.get(f"x-ratelimit-reset-{kind}"), wall),
            )
        prefix = f"anthropic-ratelimit-{kind}-"
        return LimitReading(
            _int(h.get(prefix + "limit")),
            _int(h.get(prefix + "remaining")),
            parse_reset(h.get(prefix + "reset"), wall),
        )

    retry_after = None
    if "retry-after-ms" in h:
        ms = parse_duration(h["retry-after-ms"])
        retry_after = None if ms is None else ms / 1000
    if retry_after is None and "retry-after" in h:
        retry_after = parse_retry_after(h["retry-after"])
    return RateHeaders(reading("requests"), reading("tokens"), retry_after)


@dataclass
class Bucket:
    """A token bucket: `level` units, refilled at `rate` per second up to `capacity`."""

    rate: float
    capacity: float
    level: float
    stamp: float

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    reserve: float = 0.0  # units that must stay in the bucket

    def wait(self, amount: float, now: float) -> float:
        """Seconds until `amount` may be taken (a request larger than the bucket waits for a full one)."""
        self.refill(now)
        need = min(amount + self.reserve, self.capacity)
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate if self.rate > 0 else math.inf

    def take(self, amount: float, now: float) -> None:
        self.refill(now)
        self.level -= amount


@dataclass
class EndpointStats:
    """What adaptation did at one endpoint, for the usage record."""

    initial_limit: int
    min_limit: int
    max_limit: int
    final_limit: int
    decreases: int = 0
    rate_limited: int = 0  # responses with status 429
    paused_s: float = 0.0
    calls: int = 0

    def to_record(self) -> dict[str, Any]:
        return {
            "initial_limit": self.initial_limit,
            "min_limit": self.min_limit,
            "max_limit": self.max_limit,
            "final_limit": self.final_limit,
            "decreases": self.decreases,
            "http_429": self.rate_limited,
            "paused_s": round(self.paused_s, 3),
            "calls": self.calls,
        }


@dataclass(frozen=True)
class Ticket:
    """A started call: its place in the start order and what it took from the buckets."""

    seq: int  # number of calls started at this endpoint, this one included
    tokens: float
    tokens_started: float  # tokens taken by all calls started so far, this one included
    started_at: float


@dataclass
class RateController:
    """The pure decision logic of one endpoint (see the module docstring); times are monotonic seconds."""

    name: str
    ceiling: int
    adaptive: bool = True
    rpm: float | None = None
    tpm: float | None = None
    now: float = 0.0
    limit: float = field(init=False)
    in_flight: int = field(init=False, default=0)
    paused_until: float = field(init=False, default=0.0)
    stats: EndpointStats = field(init=False)

    def __post_init__(self) -> None:
        self.limit = float(min(self.ceiling, INITIAL_LIMIT)) if self.adaptive else float(self.ceiling)
        start = int(self.limit)
        self.stats = EndpointStats(start, start, start, start)
        self._slow_start = self.adaptive
        self._started = 0
        self._tokens_started = 0.0
        self._no_decrease_before = 0  # calls started before this seq saw the last decrease already
        self._synced_seq = {"requests": 0, "tokens": 0}
        self._budget_req = self._budget(self.rpm)
        self._budget_tok = self._budget(self.tpm)
        self._hdr: dict[str, Bucket | None] = {"requests": None, "tokens": None}

    def _budget(self, per_minute: float | None) -> Bucket | None:
        if per_minute is None:
            return None
        rate = per_minute / 60
        capacity = max(1.0, rate)  # one second's worth: providers enforce minute limits in slices
        return Bucket(rate, capacity, capacity, self.now)

    # --- gating -----------------------------------------------------------------------------
    def delay(self, now: float, tokens: float) -> float:
        """Seconds until a call estimated at `tokens` may start: 0 = now, inf = when a call ends."""
        if self.in_flight >= max(1, int(self.limit)):
            return math.inf
        wait = self.paused_until - now
        for bucket, amount in (
            (self._budget_req, 1.0),
            (self._hdr["requests"], 1.0),
            (self._budget_tok, tokens),
            (self._hdr["tokens"], tokens),
        ):
            if bucket is not None:
                wait = max(wait, bucket.wait(amount, now))
        return max(0.0, wait)

    def start(self, now: float, tokens: float) -> Ticket:
        """Count a call as started (call only when `delay` said 0)."""
        self.in_flight += 1
        self._started += 1
        self._tokens_started += tokens
        for bucket, amount in (
            (self._budget_req, 1.0),
            (self._hdr["requests"], 1.0),
            (self._budget_tok, tokens),
            (self._hdr["tokens"], tokens),
        ):
            if bucket is not None:
                bucket.take(amount, now)
        return Ticket(self._started, tokens, self._tokens_started, now)

    def finish(
        self,
        ticket: Ticket,
        now: float,
        *,
        status: int | None,
        headers: Mapping[str, str] | None = None,
        used_tokens: int = 0,
        wall_now: float | None = None,
    ) -> None:
        """Account for a call that ended: `status` 200 for an answer, the HTTP status of an error
        response, None when no response came (timeout, reset) or the call was abandoned."""
        self.in_flight -= 1
        if status is not None:
            self.stats.calls += 1
        if used_tokens > 0:  # correct the estimate by what the provider counted
            refund = ticket.tokens - used_tokens
            for bucket in (self._budget_tok, self._hdr["tokens"]):
                if bucket is not None:
                    bucket.refill(now)
                    bucket.level = min(bucket.capacity, bucket.level + refund)
        if status == 429:
            self.stats.rate_limited += 1
        if not self.adaptive:
            return
        # Reset times count from when the provider saw the call, about when it started: an
        # absolute reset (Anthropic's) is read against the wall clock of that moment.
        wall_start = (time.time() if wall_now is None else wall_now) - (now - ticket.started_at)
        info = parse_rate_headers(headers, wall_start) if headers else None
        if status == 429:
            self._decrease(ticket, "HTTP 429")
            if info is not None and info.retry_after is not None:
                self._pause(now, now + info.retry_after, "retry-after")
        elif status == 200:
            self._increase()
        if info is not None:
            self._sync("requests", info.requests, ticket, now)
            self._sync("tokens", info.tokens, ticket, now)

    def _increase(self) -> None:
        if self.limit >= self.ceiling:
            return
        self.limit = min(float(self.ceiling), self.limit + (1.0 if self._slow_start else 1.0 / self.limit))
        self._record_limit()

    def _decrease(self, ticket: Ticket, why: str) -> None:
        self._slow_start = False
        if ticket.seq <= self._no_decrease_before:
            return  # started before the last decrease: the same overload, already answered
        old = self.limit
        self.limit = max(1.0, self.limit * DECREASE_FACTOR)
        self._no_decrease_before = self._started
        self.stats.decreases += 1
        self._record_limit()
        log.debug("%s: %s, calls in flight limited %d -> %d", self.name, why, int(old), int(self.limit))

    def _pause(self, now: float, until: float, why: str) -> None:
        if until <= self.paused_until:
            return
        self.stats.paused_s += until - max(now, self.paused_until)
        self.paused_until = until
        log.debug("%s: paused %.3fs (%s)", self.name, until - now, why)

    def _sync(self, kind: str, reading: LimitReading, ticket: Ticket, now: float) -> None:
        """Bring the local copy of the provider's bucket in line with a response's headers."""
        if reading.remaining is None:
            return
        bucket = self._hdr[kind]
        rate = reading.rate
        if rate is not None and reading.limit is not None:
            rate *= RATE_MARGIN
            if bucket is None:
                limit = float(reading.limit)
                bucket = self._hdr[kind] = Bucket(rate, limit, limit, now, HEADER_RESERVE * limit)
                log.debug("%s: pacing %s at %.2f/s (limit %d)", self.name, kind, rate, reading.limit)
            else:
                bucket.rate = rate
                bucket.capacity = float(reading.limit)
                bucket.reserve = HEADER_RESERVE * bucket.capacity
        if bucket is None:
            # No rate to pace by: an exhausted limit pauses until it resets, and shrinks the window.
            if reading.remaining <= 0 and reading.reset is not None:
                self._decrease(ticket, f"no {kind} remaining")
                self._pause(now, ticket.started_at + reading.reset, f"{kind} limit reset")
            return
        if ticket.seq < self._synced_seq[kind]:
            return  # a newer call's answer already set the level
        self._synced_seq[kind] = ticket.seq
        # The provider counted this call on arrival; everything started since came after it.
        since = (
            (self._started - ticket.seq)
            if kind == "requests"
            else (self._tokens_started - ticket.tokens_started)
        )
        bucket.refill(now)
        level = reading.remaining + bucket.rate * (now - ticket.started_at) - since
        # Only ever lowered: calls reach the provider in a slightly different order than they
        # started, so a reading can overstate what is left, and the local bucket already refills
        # at (a little under) the provider's rate.
        bucket.level = min(bucket.level, level)

    def _record_limit(self) -> None:
        current = int(self.limit)
        self.stats.min_limit = min(self.stats.min_limit, current)
        self.stats.max_limit = max(self.stats.max_limit, current)
        self.stats.final_limit = current


class EndpointGate:
    """`RateController` on the event loop: `acquire` waits (highest priority first) until the
    controller lets a call start; `release` reports how it ended and wakes the next waiters."""

    def __init__(self, controller: RateController, clock: Any = time.monotonic) -> None:
        self.controller = controller
        self._clock = clock
        self._waiters: list[tuple[int, int, float, asyncio.Future[Ticket]]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    @property
    def name(self) -> str:
        return self.controller.name

    @property
    def stats(self) -> EndpointStats:
        return self.controller.stats

    async def acquire(self, priority: int = 0, tokens: float = 0.0) -> Ticket:
        now = self._clock()
        if not self._waiters and self.controller.delay(now, tokens) == 0.0:
            return self.controller.start(now, tokens)
        future: asyncio.Future[Ticket] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (-priority, next(self._order), tokens, future))
        self._pump()
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # started just as we were cancelled
                self.release(future.result(), status=None)
            raise

    def release(
        self,
        ticket: Ticket,
        *,
        status: int | None,
        headers: Mapping[str, str] | None = None,
        used_tokens: int = 0,
    ) -> None:
        self.controller.finish(ticket, self._clock(), status=status, headers=headers, used_tokens=used_tokens)
        if self._waiters:
            self._pump()

    def _pump(self) -> None:
        now = self._clock()
        while self._waiters:
            _, _, tokens, future = self._waiters[0]
            if future.done():  # cancelled while waiting
                heapq.heappop(self._waiters)
                continue
            wait = self.controller.delay(now, tokens)
            if wait == 0.0:
                heapq.heappop(self._waiters)
                future.set_result(self.controller.start(now, tokens))
                continue
            if wait < math.inf:
                self._wake_at(now + wait)
            return

    def _wake_at(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = when
        self._timer = loop.call_later(max(0.0, when - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._pump()


def endpoint_name(provider: str, base_url: str) -> str:
    """How an endpoint is named in logs and usage records (credentials in the URL redacted)."""
    from personalign.redact import redact_text

    return f"{provider}@{redact_text(base_url)}"
