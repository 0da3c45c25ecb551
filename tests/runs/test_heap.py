"""The collector helpers leave the collector as they found it and keep frozen objects collectable."""

from __future__ import annotations

import gc
import weakref

import pytest

from personalign.runs.heap import YOUNG_THRESHOLD, building_long_lived, long_lived_frozen


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


def test_building_pauses_the_collector_then_freezes_what_was_built() -> None:
    assert gc.isenabled()
    with long_lived_frozen():
        with building_long_lived():
            assert not gc.isenabled()
            built = [Node() for _ in range(1000)]
        assert gc.isenabled()
        # The new objects were frozen too: the generations the collector scans no longer hold them.
        # (Not a freeze-count delta: other threads may free frozen objects meanwhile.)
        scanned = {id(obj) for obj in gc.get_objects()}
        assert not any(id(node) in scanned for node in built)
        ref = weakref.ref(built[0])
        del built
        gc.collect()
        assert ref() is not None  # frozen: not collected during the run
    gc.collect()
    assert ref() is None and gc.get_freeze_count() == 0


def test_building_freezes_nothing_on_an_exception_and_restores_a_disabled_collector() -> None:
    gc.disable()
    try:
        with pytest.raises(ValueError), building_long_lived():
            raise ValueError("broken data")
        assert gc.get_freeze_count() == 0 and not gc.isenabled()
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
