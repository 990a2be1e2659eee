"""Hypothesis strategies of store records (controller.core.records), shared by the replay and
codec tests. Keys come from small sets, so upserts, clears and resets meet the keys they
replace; values span what both stores hold (SQLite's signed 64-bit integers, protobuf's field
widths, UTF-8 text)."""

from __future__ import annotations

from hypothesis import strategies as st

from controller.core.records import (
    AlarmCleared,
    AlarmRecord,
    DrainCleared,
    DrainRecord,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    RoutingReset,
    RoutingStep,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
)
from railfabric.v1 import admin_pb2

# Every text a protobuf string and a SQLite TEXT both keep: no lone surrogates.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Unsigned in the proto, signed 64-bit in SQLite.
COUNT = st.integers(0, 2**63 - 1)
PORT = st.integers(0, 2**32 - 1)

SWITCHES = st.sampled_from(["tor-r1-b1", "tor-r1-b2", "spine-p1-1", "sw-ü"])
LINKS = st.sampled_from(["tor-r1-b1:65--spine-p1-1:1", "tor-r1-b2:65--spine-p1-1:2", "l-3"])
ALARM_IDS = st.sampled_from(["store_unavailable", "link_down:l-3", "a-ß"])
META_KEYS = st.sampled_from(["topology_digest", "routing_baseline", "k"])
DIGESTS = st.sampled_from(["", "v2:" + "ab" * 32, "v2:" + "cd" * 32])
# Unknown values are kept too (open enums).
EVENT_KINDS = st.sampled_from([*admin_pb2.EventKind.values(), admin_pb2.EventKind.ValueType(999)])


@st.composite
def events(draw: st.DrawFn) -> admin_pb2.Event:
    event = admin_pb2.Event(
        wall_ns=draw(INT64),
        kind=draw(TEXT),
        switch_name=draw(TEXT),
        port=draw(PORT),
        message=draw(TEXT),
        generation=draw(COUNT),
        type=draw(EVENT_KINDS),
    )
    if draw(st.booleans()):
        event.drain.link = draw(LINKS)
        event.drain.who = draw(TEXT)
    return event


def records() -> st.SearchStrategy[Record]:
    generation = st.builds(SwitchGeneration, SWITCHES, COUNT, DIGESTS)
    kinds: list[st.SearchStrategy[Record]] = [
        st.builds(Meta, META_KEYS, TEXT),
        st.builds(SwitchGenerations, st.lists(generation, max_size=4).map(tuple)),
        st.builds(SwitchApplied, SWITCHES, COUNT),
        st.builds(LinkRecord, LINKS, st.sampled_from(["up", "down", "hold_down"]), INT64, COUNT),
        st.builds(RoutingStep, LINKS, st.booleans(), st.booleans()),
        st.just(RoutingReset()),
        st.builds(
            AlarmRecord,
            ALARM_IDS,
            st.sampled_from(["info", "warning", "critical"]),
            TEXT,
            TEXT,
            PORT,
            TEXT,
            # Few distinct times: alarms raised together are ordered by id.
            st.sampled_from([0, 5, 7, -(2**63), 2**63 - 1]),
        ),
        st.builds(AlarmCleared, ALARM_IDS),
        st.builds(EventRecord, events()),
        st.builds(DrainRecord, LINKS, TEXT, TEXT, st.sampled_from([0, 3, 9]), TEXT, st.booleans()),
        st.builds(DrainCleared, LINKS),
    ]
    return st.one_of(kinds)


def batches(max_batches: int = 10, max_records: int = 8) -> st.SearchStrategy[list[list[Record]]]:
    return st.lists(st.lists(records(), max_size=max_records), max_size=max_batches)
