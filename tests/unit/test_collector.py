"""railfabric/collector.py: what start-up built leaves the collector's scans; its garbage goes."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from railfabric.collector import freeze_start_up, full_collections, held_off

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


async def test_full_collections_come_on_the_clock_at_a_quiet_moment() -> None:
    """No automatic full collection while the task runs; one per period, after the inputs
    have paused, or after the wait for a pause when they never do; thresholds restored."""
    before = gc.get_threshold()
    busy_until = time.monotonic() + 0.3  # inputs for the first 0.3 s
    collected: list[float] = []
    done = asyncio.Event()

    def last_input() -> float:
        now = time.monotonic()
        return now if now < busy_until else busy_until

    def collect() -> None:
        collected.append(time.monotonic())
        if len(collected) == 2:
            done.set()

    started = time.monotonic()
    task = asyncio.create_task(
        full_collections(last_input, every_s=0.05, quiet_s=0.02, quiet_wait_s=60, collect=collect)
    )
    await asyncio.sleep(0)
    assert gc.get_threshold()[2] > 1_000_000  # the allocation-driven full collections are off
    assert gc.get_threshold()[:2] == before[:2]
    async with asyncio.timeout(30):
        await done.wait()
    assert collected[0] - started >= 0.3, "a full collection came while inputs ran"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gc.get_threshold() == before

    # Inputs that never pause: the collection comes after the wait for a pause.
    never_quiet: list[float] = []
    task = asyncio.create_task(
        full_collections(
            time.monotonic,
            every_s=0.01,
            quiet_s=0.01,
            quiet_wait_s=0.05,
            collect=lambda: never_quiet.append(time.monotonic()),
        )
    )
    async with asyncio.timeout(30):
        while not never_quiet:  # noqa: ASYNC110  (polls what the task under test records)
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gc.get_threshold() == before


def test_held_off_stops_automatic_collection_inside_and_restores_it() -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with held_off():
            assert not gc.isenabled()
            junk = [[_Node() for _ in range(10)] for _ in range(20_000)]  # sets off many
            del junk
            assert not collections
        assert gc.isenabled()
        # Off on the way in: off on the way out.
        gc.disable()
        try:
            with held_off():
                pass
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)
