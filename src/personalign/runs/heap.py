"""Keeping Python's cyclic garbage collector off the objects a run holds for its whole length.

A run keeps its dataset (tens of thousands of small pydantic objects for a full CUPID split)
alive from start to end. Each full collection traverses every tracked object again, so
without care a 756-instance run spends ~0.3 s of its event loop in the collector, re-visiting
data that cannot be garbage. Objects here are freed by reference counting as usual; only the
cycle detector's repeated scans are avoided.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def building_long_lived() -> Iterator[None]:
    """Build long-lived data (e.g. load a dataset) with the cyclic collector paused.

    On success everything alive is frozen (`gc.freeze`): otherwise the first collection after
    re-enabling would traverse every object just built (~0.1 s for 756 CUPID instances). Use it
    inside `long_lived_frozen()`, whose exit hands the frozen objects back to the collector. On
    an exception nothing is frozen.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


YOUNG_THRESHOLD = 10_000


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Move everything alive now to the collector's permanent generation until exit.

    Objects created inside are collected normally, though the youngest generation is collected
    after `YOUNG_THRESHOLD` net allocations instead of 700: an event loop with hundreds of
    calls in flight keeps thousands of young objects alive (tasks, futures, prompts), and
    re-scanning them every 700 allocations cost ~0.1 s per 1,000 calls. On exit the threshold
    is restored and the frozen objects return to the oldest generation, so they are collected
    again once unreachable.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
