"""The controller's store: records survive a close and reopen, one commit is one transaction, a
round-1 file migrates, an unreadable file is refused with the operator's message, and the
writer thread groups commits and holds records while the store fails."""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from controller.core.records import (
    AlarmCleared,
    AlarmRecord,
    DrainCleared,
    DrainRecord,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    Restored,
    RoutingReset,
    RoutingStep,
    StoredSwitch,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.daemon.store import (
    FILE_NAME,
    MAX_EVENTS,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    SqliteStore,
    StoreCorrupt,
    StoreError,
)
from controller.daemon.store_writer import THREAD_NAME, StoreWriter
from railfabric.v1 import admin_pb2

pytestmark = pytest.mark.unit

LINK = "tor-r1-b1:65--spine-p1-r1-1:1"


def event(
    i: int, kind: admin_pb2.EventKind.ValueType = admin_pb2.EVENT_KIND_PORT_DOWN
) -> EventRecord:
    return EventRecord(
        admin_pb2.Event(
            wall_ns=1_000 + i,
            kind="port_down",
            switch_name="tor-r1-b1",
            port=65,
            message=f"event {i}",
            generation=i,
            type=kind,
            port_change=admin_pb2.PortChange(up=False, groups_repaired=i, detected_wall_ns=i),
        )
    )


def link(key: str, state: str = "down", flaps: int = 1) -> LinkRecord:
    return LinkRecord(key, state, 17, flaps)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def reopen(path: Path) -> Restored:
    store = SqliteStore.open(path)
    try:
        return store.load()
    finally:
        store.close()


# -- SqliteStore


def test_every_record_kind_is_read_back_after_reopening(tmp_path: Path) -> None:
    alarm = AlarmRecord("miswire:tor-r1-b1:3", "critical", "miswire", "tor-r1-b1", 3, "m", 9)
    other = AlarmRecord("link_down:x", "warning", "link_down", "tor-r1-b2", 4, "n", 5)
    store = SqliteStore.in_dir(tmp_path / "state")
    assert store.path == str(tmp_path / "state" / FILE_NAME)
    store.commit(
        [
            Meta("intent_digest", "abc"),
            SwitchGenerations(
                (SwitchGeneration("tor-r1-b1", 4, "v2:" + "a" * 64), SwitchGeneration("s2", 1, "d"))
            ),
            SwitchApplied("tor-r1-b1", 3),
            SwitchApplied("never-generated", 7),
            link(LINK),
            RoutingStep("gone", False),
            RoutingReset(),
            RoutingStep(LINK, False),
            RoutingStep("other", False),
            alarm,
            other,
            AlarmCleared("link_down:x"),
            event(1),
        ]
    )
    store.commit(
        [
            RoutingStep(LINK, True),
            RoutingStep("other", True, joined=True),
            event(2, admin_pb2.EVENT_KIND_LINK_DOWN),
        ]
    )
    assert (store.commits, store.records_written) == (2, 16)
    store.close()

    restored = reopen(tmp_path / "state" / FILE_NAME)
    assert restored.meta == {"intent_digest": "abc"}  # not the store's own schema key
    assert restored.switches == {
        "tor-r1-b1": StoredSwitch(4, "v2:" + "a" * 64, 3),
        "s2": StoredSwitch(1, "d", 0),
        # Applied before any generation was stored: kept, desired state unknown.
        "never-generated": StoredSwitch(0, "", 7),
    }
    assert restored.links == {LINK: link(LINK)}
    assert restored.routing_log == [
        RoutingStep(LINK, False),
        RoutingStep("other", False),
        RoutingStep(LINK, True),
        RoutingStep("other", True, joined=True),  # computed with the step before it
    ]
    assert restored.alarms == [alarm]
    assert restored.events == [event(1).event, event(2, admin_pb2.EVENT_KIND_LINK_DOWN).event]
    assert restored.events[0].port_change.groups_repaired == 1  # the typed detail, not text


def test_later_records_replace_state_and_alarm_clears_delete(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME)
    alarm = AlarmRecord("a", "info", "k", "s", 1, "first", 1)
    store.commit([link(LINK, "down", 1), alarm, Meta("k", "1")])
    store.commit(
        [
            link(LINK, "up", 2),
            AlarmRecord("a", "critical", "k", "s", 1, "second", 2),
            Meta("k", "2"),
            SwitchGenerations((SwitchGeneration("s", 1, "d1"),)),
        ]
    )
    store.commit([SwitchGenerations((SwitchGeneration("s", 2, "d2"),)), SwitchApplied("s", 2)])
    store.commit([AlarmCleared("a"), AlarmCleared("never-raised")])
    restored = store.load()
    assert restored.links[LINK] == link(LINK, "up", 2)
    assert restored.meta == {"k": "2"}
    assert restored.switches == {"s": StoredSwitch(2, "d2", 2)}
    assert restored.alarms == []


def test_a_failure_in_the_middle_of_a_commit_leaves_nothing_of_it(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME)
    store.commit([link("before")])
    too_big = LinkRecord("bad", "down", 2**63, 0)  # SQLite integers are 64-bit signed
    with pytest.raises(StoreError, match=re.escape(store.path)):
        store.commit([link("x"), event(1), RoutingStep("x", False), too_big, link("y")])
    assert (store.commits, store.records_written) == (1, 1)
    restored = store.load()
    assert restored.links == {"before": link("before")}
    assert restored.events == []
    assert restored.routing_log == []
    store.commit([link("after")])  # the connection is usable again
    store.close()
    assert set(reopen(tmp_path / FILE_NAME).links) == {"before", "after"}


def test_a_locked_database_fails_the_commit_with_its_cause(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    store = SqliteStore.open(path, busy_timeout_s=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked") as caught:
            store.commit([link(LINK)])
        assert str(path) in str(caught.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.commit([link(LINK)])
    assert store.load().links == {LINK: link(LINK)}


def test_the_store_refuses_its_own_meta_key(tmp_path: Path) -> None:
    store = SqliteStore.open(":memory:")
    with pytest.raises(StoreError, match="store's own"):
        store.commit([Meta(SCHEMA_KEY, "1")])


def test_events_are_pruned_to_the_newest_and_load_gives_back_a_thousand(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME, max_events=50)
    for i in range(30):
        store.commit([event(i)])
    store.commit([event(i) for i in range(30, 120)])
    events = store.load().events
    assert [e.generation for e in events] == list(range(70, 120))
    store.close()

    store = SqliteStore.open(tmp_path / "big.sqlite3")
    store.commit([event(i) for i in range(1_500)])
    events = store.load().events
    assert len(events) == 1_000
    assert (events[0].generation, events[-1].generation) == (500, 1_499)  # oldest first


ROUND1_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS switches (
    name TEXT PRIMARY KEY, generation INTEGER NOT NULL, digest TEXT NOT NULL,
    applied_generation INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS links (
    key TEXT PRIMARY KEY, state TEXT NOT NULL, since_ns INTEGER NOT NULL, flaps INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, wall_ns INTEGER NOT NULL, kind TEXT NOT NULL,
    switch TEXT NOT NULL, port INTEGER NOT NULL, message TEXT NOT NULL,
    generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS routing_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT, link TEXT NOT NULL, usable INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS alarms (
    id TEXT PRIMARY KEY, severity TEXT NOT NULL, kind TEXT NOT NULL, switch TEXT NOT NULL,
    port INTEGER NOT NULL, message TEXT NOT NULL, raised_wall_ns INTEGER NOT NULL);
"""


def round1_store(path: Path) -> None:
    """A file as the round-1 Store left it: its schema, no version, events as text."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(ROUND1_SCHEMA)
    db.execute("INSERT INTO meta VALUES ('intent_digest', 'abc')")
    db.execute("INSERT INTO switches VALUES ('tor-r1-b1', 4, 'd4', 3)")
    db.execute(f"INSERT INTO links VALUES ('{LINK}', 'down', 17, 2)")
    db.execute(
        "INSERT INTO events (wall_ns, kind, switch, port, message, generation) "
        "VALUES (5, 'link_down', 'tor-r1-b1', 65, 'carrier lost', 4)"
    )
    db.execute(f"INSERT INTO routing_log (link, usable) VALUES ('{LINK}', 0)")
    db.execute("INSERT INTO alarms VALUES ('miswire:x', 'critical', 'miswire', 'x', 3, 'm', 9)")
    db.close()


def test_a_round1_store_is_migrated_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    round1_store(path)
    store = SqliteStore.open(path)
    restored = store.load()
    assert restored.meta == {"intent_digest": "abc"}
    assert restored.switches == {"tor-r1-b1": StoredSwitch(4, "d4", 3)}
    assert restored.links == {LINK: LinkRecord(LINK, "down", 17, 2)}
    assert restored.routing_log == [RoutingStep(LINK, False)]
    assert restored.alarms == [AlarmRecord("miswire:x", "critical", "miswire", "x", 3, "m", 9)]
    old = admin_pb2.Event(
        wall_ns=5,
        kind="link_down",
        switch_name="tor-r1-b1",
        port=65,
        message="carrier lost",
        generation=4,
    )
    assert restored.events == [old]
    assert old.type == admin_pb2.EVENT_KIND_UNSPECIFIED
    store.commit([event(1)])
    store.close()

    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_KEY,)).fetchone() == (
        str(SCHEMA_VERSION),
    )
    columns = {row[1] for row in db.execute("PRAGMA table_info(events)")}
    db.close()
    assert {"type", "event"} <= columns
    assert reopen(path).events == [old, event(1).event]  # opens again without migrating


def test_a_schema_3_store_gains_joined_routing_steps(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    SqliteStore.open(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE routing_log DROP COLUMN joined")
    db.execute(f"INSERT INTO routing_log (link, usable) VALUES ('{LINK}', 0)")
    db.execute("UPDATE meta SET value = '3' WHERE key = ?", (SCHEMA_KEY,))
    db.commit()
    db.close()
    assert reopen(path).routing_log == [RoutingStep(LINK, False, joined=False)]
    db = sqlite3.connect(path, isolation_level=None)
    assert db.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_KEY,)).fetchone() == (
        str(SCHEMA_VERSION),
    )
    # A file of this version without the column is not a store this controller wrote.
    db.execute("ALTER TABLE routing_log DROP COLUMN joined")
    db.close()
    with pytest.raises(StoreCorrupt, match="routing_log lacks joined"):
        SqliteStore.open(path)


def test_drains_are_kept_oldest_first_and_cleared(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    store = SqliteStore.open(path)
    other = "tor-r1-b1:66--spine-p1-r1-2:1"
    store.commit(
        [
            DrainRecord(other, "operator/bob", "", 20, "tor-r1-b1", True),
            DrainRecord(LINK, "operator/alice", "optic swap", 10, "tor-r1-b1:65", False),
        ]
    )
    store.close()
    assert reopen(path).drains == [
        DrainRecord(LINK, "operator/alice", "optic swap", 10, "tor-r1-b1:65", False),
        DrainRecord(other, "operator/bob", "", 20, "tor-r1-b1", True),
    ]
    store = SqliteStore.open(path)
    store.commit([DrainCleared(other)])
    store.close()
    assert [d.link for d in reopen(path).drains] == [LINK]


def test_a_version2_store_gains_the_drains_table(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    store = SqliteStore.open(path)
    store.commit([event(1)])
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE drains")
    db.execute("UPDATE meta SET value = '2' WHERE key = ?", (SCHEMA_KEY,))
    db.close()
    store = SqliteStore.open(path)
    assert store.load().drains == [] and store.load().events == [event(1).event]
    store.commit([DrainRecord(LINK, "insecure", "", 1, "tor-r1-b1:65", False)])
    store.close()
    assert len(reopen(path).drains) == 1
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_KEY,)).fetchone() == (
        str(SCHEMA_VERSION),
    )
    db.close()
    # A file of this version without it is not a store this controller wrote.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE drains")
    db.close()
    with pytest.raises(StoreCorrupt, match="table drains is missing"):
        SqliteStore.open(path)


def test_a_store_of_a_newer_controller_is_refused_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    store = SqliteStore.open(path)
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE meta SET value = '9' WHERE key = ?", (SCHEMA_KEY,))
    db.close()
    with pytest.raises(StoreError, match="newer controller") as caught:
        SqliteStore.open(path)
    assert not isinstance(caught.value, StoreCorrupt)


def corrupt_message(path: Path, cause: str) -> str:
    return (
        f"{path}: the controller's store cannot be read ({cause}). Either move it aside to "
        f"start with an empty store (mv {path} {path}.corrupt) — the controller then "
        "recomputes routes from the intent and agents resync — or restore a backup of the "
        "state directory."
    )


def filled_store(path: Path) -> None:
    store = SqliteStore.open(path)
    store.commit([event(i) for i in range(2_000)] + [link(f"l{i}") for i in range(500)])
    store.close()


def assert_corrupt(path: Path, cause: str) -> None:
    before = path.read_bytes()
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore.open(path)
    message = str(caught.value)
    assert message == corrupt_message(path, caught.value.cause), message
    assert re.search(cause, caught.value.cause), caught.value.cause
    assert path.read_bytes() == before  # never reset, never "repaired"


def test_a_foreign_sqlite_database_is_refused_with_the_operators_message(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore.open(path)
    assert str(caught.value) == (
        f"{path}: the controller's store cannot be read (a SQLite database without the "
        f"controller's tables: users). Either move it aside to start with an empty store "
        f"(mv {path} {path}.corrupt) — the controller then recomputes routes from the intent "
        "and agents resync — or restore a backup of the state directory."
    )


@pytest.mark.parametrize(
    ("damage", "cause"),
    [
        ("truncated", "truncated|malformed"),
        ("truncated_header", "truncated"),
        ("garbage_header", "not a SQLite database"),
        ("text_file", "not a SQLite database"),
        ("empty_file", "empty"),
        ("garbage_pages", "integrity check failed|malformed"),
        (
            "damaged_index",
            r"integrity check failed: \*\*\* in database main \*\*\* Page \d+: ",
        ),
        ("missing_table", "tables missing: alarms"),
    ],
)
def test_an_unreadable_store_is_refused_with_the_operators_message(
    tmp_path: Path, damage: str, cause: str
) -> None:
    path = tmp_path / FILE_NAME
    if damage == "text_file":
        path.write_text("intent_digest = abc\n" * 100)
    elif damage == "empty_file":
        path.write_bytes(b"")
    elif damage == "damaged_index":
        # An invalid page type on an index's root page: the file opens, quick_check reports it.
        filled_store(path)
        db = sqlite3.connect(path)
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_links_1'"
        ).fetchone()
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        db.close()
        damaged = bytearray(path.read_bytes())
        damaged[(root - 1) * page_size] = 0x07
        path.write_bytes(bytes(damaged))
    elif damage == "missing_table":
        filled_store(path)
        db = sqlite3.connect(path)
        db.execute("DROP TABLE alarms")
        db.commit()
        db.close()
    else:
        filled_store(path)
        data = path.read_bytes()
        if damage == "truncated":
            data = data[: len(data) // 2]
        elif damage == "truncated_header":
            data = data[:60]
        elif damage == "garbage_header":
            data = b"\x8f\x12garbage header" + data[16:]
        elif damage == "garbage_pages":
            page = 4096
            data = data[: 2 * page] + bytes(range(256)) * (page // 16) + data[6 * page :]
        path.write_bytes(data)
    assert_corrupt(path, cause)


def test_a_wal_left_without_its_database_is_not_replayed_into_a_new_store(
    tmp_path: Path,
) -> None:
    # Another store's WAL, full of committed frames, copied while that store is open.
    other = SqliteStore.open(tmp_path / "other.sqlite3")
    other.commit([link(f"l{i}") for i in range(100)])
    wal = Path(f"{other.path}-wal").read_bytes()
    other.close()
    path = tmp_path / "state" / FILE_NAME
    path.parent.mkdir()
    Path(f"{path}-wal").write_bytes(wal)  # the database beside it was moved aside
    store = SqliteStore.open(path)
    assert store.load() == Restored()
    store.close()
    assert Path(f"{path}-wal.orphan").read_bytes() == wal  # kept, not deleted


# -- StoreWriter


class FlakyStore(SqliteStore):
    """Fault injector: a real SqliteStore whose commit fails while `failing` is set. Unit tests
    need a failure they switch on and off in microseconds; as root no permission makes a file
    unwritable, and the real failure (disk full on a tmpfs) is the integration test's."""

    failing = False
    error: Exception = StoreError("injected failure")

    def __init__(self, db: sqlite3.Connection, path: str, max_events: int = MAX_EVENTS) -> None:
        super().__init__(db, path, max_events)
        self.attempts: list[list[Record]] = []

    def commit(self, records: Sequence[Record]) -> None:
        self.attempts.append(list(records))
        if self.failing:
            raise self.error
        super().commit(records)


class GatedStore(SqliteStore):
    """Holds its first commit until `release` is set, so submits pile up behind it."""

    def __init__(self, db: sqlite3.Connection, path: str, max_events: int = MAX_EVENTS) -> None:
        super().__init__(db, path, max_events)
        self.entered = threading.Event()
        self.release = threading.Event()

    def commit(self, records: Sequence[Record]) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10)
        super().commit(records)


def test_group_commit_writes_what_piled_up_in_one_transaction(tmp_path: Path) -> None:
    store = GatedStore.open(tmp_path / FILE_NAME)
    writer = StoreWriter(store)
    first = writer.submit([RoutingStep("l0", False), event(0)])
    assert store.entered.wait(10)
    assert any(t.name == THREAD_NAME for t in threading.enumerate())
    futures = [writer.submit([RoutingStep(f"l{i}", i % 2 == 0), event(i)]) for i in range(1, 100)]
    store.release.set()
    assert first.result(10) is True
    assert all(f.result(10) is True for f in futures)
    assert store.commits == 2  # the first input, then the 99 that waited for it
    assert writer.stats.commits == 2
    writer.close()
    restored = reopen(tmp_path / FILE_NAME)
    assert restored.routing_log == [RoutingStep("l0", False)] + [
        RoutingStep(f"l{i}", i % 2 == 0) for i in range(1, 100)
    ]
    assert [e.generation for e in restored.events] == list(range(100))


def test_order_is_preserved_across_inputs_and_commits(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME)
    writer = StoreWriter(store)
    futures = []
    expected: list[RoutingStep] = []
    for i in range(300):
        records: list[Record] = [RoutingStep(f"l{i}", False), event(i), link(LINK, flaps=i)]
        expected.append(RoutingStep(f"l{i}", False))
        if i % 97 == 96:
            records.append(RoutingReset())
            expected.clear()
        futures.append(writer.submit(records))
    assert all(f.result(10) for f in futures)
    writer.close()
    restored = reopen(tmp_path / FILE_NAME)
    assert restored.routing_log == expected
    assert [e.generation for e in restored.events] == list(range(300))
    assert restored.links[LINK].flaps == 299


def test_while_the_store_fails_records_are_merged_and_flushed_on_recovery(
    tmp_path: Path,
) -> None:
    store = FlakyStore.open(tmp_path / FILE_NAME)
    health: list[tuple[bool, str]] = []
    writer = StoreWriter(store, retry_s=0.05, on_health=lambda ok, why: health.append((ok, why)))
    assert writer.submit([link("before")]).result(10) is True
    store.failing = True
    inputs: list[list[Record]] = [
        [link(LINK, "down", 1), RoutingStep("a", False), event(1)],
        [SwitchGenerations((SwitchGeneration("s1", 1, "d1"), SwitchGeneration("s2", 1, "d1")))],
        [RoutingStep("b", False), RoutingReset(), RoutingStep("c", False)],
        [link(LINK, "hold_down", 2), SwitchGenerations((SwitchGeneration("s1", 2, "d2"),))],
        [SwitchApplied("s1", 2), Meta("k", "v"), AlarmRecord("x", "info", "k", "s", 1, "m", 1)],
        [RoutingStep("d", True), AlarmCleared("x"), link(LINK, "up", 3), event(2)],
    ]
    answers = [writer.submit(records).result(10) for records in inputs]
    assert answers == [False] * len(inputs)
    wait_until(lambda: len(health) == 1)
    stats = writer.stats
    assert not stats.available
    assert stats.last_error == "injected failure"
    # reset, c, d, switches s1 and s2, link, applied s1, meta, alarm x (cleared), two events.
    wait_until(lambda: writer.stats.pending_records == 11)
    wait_until(lambda: len(store.attempts) >= 4)  # it keeps retrying
    store.failing = False
    wait_until(lambda: writer.stats.available)
    flushed = store.attempts[-1]
    assert [r for r in flushed if isinstance(r, LinkRecord)] == [link(LINK, "up", 3)]
    assert writer.stats.pending_records == 0
    writer.close()

    restored = reopen(tmp_path / FILE_NAME)
    assert restored.links == {"before": link("before"), LINK: link(LINK, "up", 3)}
    assert restored.routing_log == [RoutingStep("c", False), RoutingStep("d", True)]
    assert restored.switches == {"s1": StoredSwitch(2, "d2", 2), "s2": StoredSwitch(1, "d1", 0)}
    assert restored.meta == {"k": "v"}
    assert restored.alarms == []
    assert [e.generation for e in restored.events] == [1, 2]
    assert health == [(False, "injected failure"), (True, "")]


def test_events_beyond_the_bound_are_shed_oldest_first_and_counted(tmp_path: Path) -> None:
    store = FlakyStore.open(tmp_path / FILE_NAME)
    store.failing = True
    writer = StoreWriter(store, retry_s=0.05, max_pending_events=5)
    assert [writer.submit([event(i)]).result(10) for i in range(12)] == [False] * 12
    for i in range(3):
        writer.submit([link(f"l{i}")])  # state records are never shed
    assert writer.stats.events_shed == 7
    store.failing = False
    wait_until(lambda: writer.stats.available)
    writer.close()
    restored = reopen(tmp_path / FILE_NAME)
    assert [e.generation for e in restored.events] == [7, 8, 9, 10, 11]
    assert set(restored.links) == {"l0", "l1", "l2"}


def test_health_is_reported_once_per_change_and_any_exception_is_a_failure(
    tmp_path: Path,
) -> None:
    store = FlakyStore.open(tmp_path / FILE_NAME)
    store.error = RuntimeError("not a StoreError")
    store.failing = True
    health: list[tuple[bool, str]] = []

    def on_health(ok: bool, why: str) -> None:
        health.append((ok, why))
        raise ValueError("a broken callback must not kill the writer")

    writer = StoreWriter(store, retry_s=0.02, on_health=on_health)
    assert writer.submit([link(LINK)]).result(10) is False
    wait_until(lambda: len(store.attempts) >= 5)
    assert len(health) == 1
    store.failing = False
    wait_until(lambda: writer.stats.available)
    assert writer.submit([link("next")]).result(10) is True
    writer.close()
    assert health == [(False, f"{store.path}: RuntimeError: not a StoreError"), (True, "")]
    assert writer.stats.failed_commits >= 5


def test_an_empty_input_is_a_barrier_behind_the_commit_in_flight(tmp_path: Path) -> None:
    store = GatedStore.open(tmp_path / FILE_NAME)
    writer = StoreWriter(store)
    first = writer.submit([link(LINK)])
    assert store.entered.wait(10)
    barrier = writer.submit([])
    assert not barrier.done()
    store.release.set()
    assert barrier.result(10) is True
    assert first.done()
    assert writer.stats.commits == 1
    writer.close()


def test_close_flushes_what_is_pending(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME)
    writer = StoreWriter(store)
    futures = [writer.submit([link(f"l{i}"), event(i)]) for i in range(200)]
    writer.close()
    assert all(f.result(0) for f in futures)
    assert writer.submit([link("late")]).result(0) is False  # after close: refused, not raised
    restored = reopen(tmp_path / FILE_NAME)
    assert len(restored.links) == 200
    assert len(restored.events) == 200


def test_close_while_unavailable_tries_once_more_then_logs_what_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore.open(tmp_path / FILE_NAME)
    store.failing = True
    writer = StoreWriter(store, retry_s=60)
    writer.submit([link("a"), link("b"), event(1), RoutingStep("a", False)])
    wait_until(lambda: not writer.stats.available)
    attempts = len(store.attempts)
    with caplog.at_level(logging.ERROR):
        writer.close(timeout_s=10)
    assert len(store.attempts) == attempts + 1  # the last try, not waiting a minute
    assert (
        "4 records could not be written at close and are lost "
        "(1 EventRecord, 2 LinkRecord, 1 RoutingStep)" in caplog.text
    )


def test_a_record_that_is_not_a_store_record_is_refused_without_raising(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / FILE_NAME)
    writer = StoreWriter(store)
    bad: list[Record] = [link("a"), "not a record"]  # type: ignore[list-item]
    assert writer.submit(bad).result(10) is False
    assert writer.submit([link("b")]).result(10) is True
    writer.close()
    assert set(reopen(tmp_path / FILE_NAME).links) == {"b"}
