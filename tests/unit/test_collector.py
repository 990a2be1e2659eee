"""railfabric/collector.py: what start-up built leaves the collector's scans; its garbage goes."""

from __future__ import annotations

import gc
import weakref

import pytest

from railfabric.collector import freeze_start_up

pytestmark = pytest.mark.unit


class _Node:
    other: object = None


def test_start_up_is_frozen_and_its_garbage_collected_first() -> None:
    cycle = _Node()
    cycle.other = cycle  # reachable from nowhere once dropped: only the collector frees it
    gone = weakref.ref(cycle)
    del cycle
    kept = [_Node()]
    try:
        freeze_start_up()
        assert gone() is None, "start-up's garbage was frozen with it"
        # Frozen objects are in no generation: full collections do not walk them.
        assert gc.get_freeze_count() > 0
        assert not any(obj is kept for obj in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects(2))
