"""Rate limits, metrics and structured logs of the gateway (pure bookkeeping, no I/O but logging).

Token buckets per API key; a Prometheus text exposition of counters and latency histograms;
JSON log lines that carry ids, sizes and timings, never a secret or a message's text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("personalign.serve")


@dataclass
class TokenBucket:
    """``rate`` tokens per second up to ``burst``; each request takes one."""

    rate: float
    burst: int
    tokens: float = -1.0
    stamp: float = 0.0

    def take(self, now: float) -> float:
        """0.0 if a token was taken, else the seconds until one is available."""
        if self.tokens < 0:
            self.tokens, self.stamp = float(self.burst), now
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class RateLimiter:
    """One token bucket per key id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def check(self, key_id: str, rate: float, burst: int) -> float:
        """0.0 when the request may go ahead; else the Retry-After in seconds."""
        with self._lock:
            bucket = self._buckets.get(key_id)
            if bucket is None or bucket.rate != rate or bucket.burst != burst:
                bucket = self._buckets[key_id] = TokenBucket(rate, burst)
            return bucket.take(self._clock())


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return "{" + body + "}"


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: float = 0.0
    n: int = 0


class Metrics:
    """Counters, gauges and histograms rendered in the Prometheus text format (version 0.0.4)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._hist: dict[str, dict[tuple[tuple[str, str], ...], _Histogram]] = {}
        self._gauges: dict[str, Callable[[], float]] = {}
        self._help: dict[str, str] = {}

    def describe(self, name: str, text: str) -> None:
        self._help[name] = text

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + value

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            h = self._hist.setdefault(name, {}).setdefault(key, _Histogram())
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    h.counts[i] += 1
            h.total += seconds
            h.n += 1

    def gauge(self, name: str, read: Callable[[], float]) -> None:
        self._gauges[name] = read

    def value(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._counters.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, series in sorted(self._counters.items()):
                lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} counter"]
                lines += [f"{name}{_labels(dict(k))} {v:g}" for k, v in sorted(series.items())]
            for name, hseries in sorted(self._hist.items()):
                lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} histogram"]
                for k, h in sorted(hseries.items()):
                    base = dict(k)
                    for bound, count in zip(LATENCY_BUCKETS, h.counts, strict=True):
                        lines.append(f"{name}_bucket{_labels({**base, 'le': f'{bound:g}'})} {count}")
                    lines.append(f"{name}_bucket{_labels({**base, 'le': '+Inf'})} {h.n}")
                    lines.append(f"{name}_sum{_labels(base)} {h.total:.6f}")
                    lines.append(f"{name}_count{_labels(base)} {h.n}")
        for name, read in sorted(self._gauges.items()):
            value = read()
            lines += [f"# HELP {name} {self._help.get(name, name)}", f"# TYPE {name} gauge"]
            lines.append(f"{name} {value:g}" if math.isfinite(value) else f"{name} NaN")
        return "\n".join(lines) + "\n"


def user_ref(tenant: str, user: str) -> str:
    """A short, stable pseudonym of a user for logs (the id itself is never logged)."""
    return hashlib.sha256(f"{len(tenant)}:{tenant}:{user}".encode("utf-8", "surrogatepass")).hexdigest()[:12]


def log_event(event: str, **fields: Any) -> None:
    """One JSON log line; callers pass ids, counts and timings only (no text, no secrets). Nothing
    is serialised when the logger would drop the line (the access line runs on every request)."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info(json.dumps({"event": event, "ts": round(time.time(), 3), **fields}, default=str))


class JsonFormatter(logging.Formatter):
    """Leaves JSON messages as they are; wraps anything else as {"event": "log", "message": ...}."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if message.startswith("{"):
            return message
        return json.dumps(
            {"event": "log", "level": record.levelname, "logger": record.name, "message": message}
        )
