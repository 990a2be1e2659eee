"""records.replay gives back what SqliteStore gives back after the same commits, batch after
batch, and records.as_records (a store's snapshot) replays into the same state from empty."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core.records import (
    RESTORED_EVENTS,
    EventRecord,
    Record,
    Restored,
    StoredSwitch,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
    as_records,
    replay,
)
from controller.daemon.store import SqliteStore
from railfabric.v1 import admin_pb2
from tests.unit.core.record_strategies import batches

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(batches(), st.integers(0, 6))
def test_replay_is_what_sqlite_gives_back(batches: list[list[Record]], max_events: int) -> None:
    store = SqliteStore.open(":memory:", max_events=max_events)
    replayed = Restored()
    try:
        for batch in batches:
            store.commit(batch)
            # load() gives back at most RESTORED_EVENTS of the events the file keeps.
            replay(replayed, batch, min(max_events, RESTORED_EVENTS))
            assert store.load() == replayed
    finally:
        store.close()


@SETTINGS
@given(batches())
def test_as_records_replays_into_the_same_state(batches: list[list[Record]]) -> None:
    restored = Restored()
    for batch in batches:
        replay(restored, batch, RESTORED_EVENTS)
    again = Restored()
    replay(again, as_records(restored), RESTORED_EVENTS)
    assert again == restored
    # And a store given the snapshot as one commit gives the state back too.
    store = SqliteStore.open(":memory:")
    try:
        store.commit(as_records(restored))
        assert store.load() == restored
    finally:
        store.close()


def test_applied_generation_of_an_unknown_switch_and_back() -> None:
    restored = Restored()
    replay(restored, [SwitchApplied("tor-r1-b1", 7)], RESTORED_EVENTS)
    assert restored.switches == {"tor-r1-b1": StoredSwitch(0, "", 7)}
    replay(
        restored,
        [SwitchGenerations((SwitchGeneration("tor-r1-b1", 8, "v2:x"),))],
        RESTORED_EVENTS,
    )
    assert restored.switches == {"tor-r1-b1": StoredSwitch(8, "v2:x", 7)}


def test_only_the_newest_restored_events_come_back() -> None:
    events: list[Record] = [
        EventRecord(admin_pb2.Event(wall_ns=i, message=f"event {i}"))
        for i in range(RESTORED_EVENTS + 5)
    ]
    store = SqliteStore.open(":memory:")
    try:
        store.commit(events)
        replayed = Restored()
        replay(replayed, events, RESTORED_EVENTS)
        assert [e.wall_ns for e in replayed.events] == list(range(5, RESTORED_EVENTS + 5))
        assert store.load() == replayed
    finally:
        store.close()
