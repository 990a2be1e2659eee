"""The controller store keeps what a restart needs, across a close and reopen of the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.daemon import store as store_mod
from controller.daemon.store import AlarmRecord, EventRecord, LinkRecord, Store

pytestmark = pytest.mark.unit


def test_everything_written_is_read_back_after_reopening(tmp_path: Path) -> None:
    s = Store.in_dir(tmp_path / "state")
    s.set_meta("intent_digest", "abc")
    s.set_desired("tor-r0-b0", 4, "d4")
    s.set_applied("tor-r0-b0", 3)
    s.set_link(LinkRecord("tor-r0-b0:3~spine-0:1", "down", 17, 2))
    s.add_event(EventRecord(5, "link_down", "tor-r0-b0", 3, "carrier lost", 4))
    alarm = AlarmRecord("miswire:tor-r0-b0:3", "critical", "miswire", "tor-r0-b0", 3, "m", 9)
    assert s.raise_alarm(alarm)
    assert not s.raise_alarm(alarm)  # already active
    s.close()

    s = Store.in_dir(tmp_path / "state")
    assert s.get_meta("intent_digest") == "abc"
    assert s.get_meta("missing") is None
    rec = s.switches()["tor-r0-b0"]
    assert (rec.generation, rec.digest, rec.applied_generation) == (4, "d4", 3)
    assert s.links()["tor-r0-b0:3~spine-0:1"] == LinkRecord("tor-r0-b0:3~spine-0:1", "down", 17, 2)
    assert [e.kind for e in s.events(10)] == ["link_down"]
    assert s.alarms() == [alarm]
    assert s.clear_alarm(alarm.id)
    assert s.alarms() == []


def test_events_come_newest_last_and_old_ones_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "MAX_EVENTS", 1500)
    s = Store(tmp_path / "c.sqlite3")
    for i in range(3000):
        s.add_event(EventRecord(i, "e", "s", 0, str(i), 0))
    assert [e.wall_ns for e in s.events(3)] == [2997, 2998, 2999]
    assert len(s.events(10_000)) <= 2500  # pruned every 1000 inserts down to MAX_EVENTS
