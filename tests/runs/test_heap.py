"""The collector helpers leave the collector as they found it and keep frozen objects collectable."""

from __future__ import annotations

import gc
import weakref

from personalign.runs.heap import YOUNG_THRESHOLD, collector_paused, long_lived_frozen


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


def test_collector_paused_disables_then_restores_the_previous_state() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before, so it stays off
    finally:
        gc.enable()


def test_frozen_objects_are_skipped_inside_and_collectable_after() -> None:
    node = Node()
    ref = weakref.ref(node)
    before = gc.get_threshold()
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (max(before[0], YOUNG_THRESHOLD), *before[1:])
        del node
        gc.collect()
        assert ref() is not None  # frozen: the collector does not look at it
        fresh = Node()
        fresh_ref = weakref.ref(fresh)
        del fresh
        gc.collect()
        assert fresh_ref() is None  # objects made inside are collected as usual
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    gc.collect()
    assert ref() is None
