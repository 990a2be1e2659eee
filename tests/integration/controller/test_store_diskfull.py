"""A real disk-full: the store on a 1 MiB tmpfs filled to ENOSPC. The writer answers False,
reports the store unavailable, holds the records (links merged, events up to the bound), and
once space is back writes them all and reports it available; the file then holds them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.core.records import EventRecord, LinkRecord
from controller.daemon.store import FILE_NAME, SqliteStore
from controller.daemon.store_writer import StoreWriter
from railfabric.v1 import admin_pb2
from tests.integration.controller.diskfull import fill, tmpfs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]

KEYS = [f"tor-r1-b{i}:65--spine-p1-r1-1:{i}" for i in range(1, 21)]
ROUNDS = 5
EVENT_BOUND = 40
BEFORE = 10_000  # the event written before the disk fills


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted afterwards whatever happens."""
    with tmpfs(tmp_path / "tmpfs", "1m") as mnt:
        yield mnt


def event(n: int) -> EventRecord:
    return EventRecord(
        admin_pb2.Event(
            wall_ns=n,
            kind="link_down",
            type=admin_pb2.EVENT_KIND_LINK_DOWN,
            link_change=admin_pb2.LinkChange(link=KEYS[n % len(KEYS)], usable=False),
            generation=n,
        )
    )


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s")
        time.sleep(0.01)


def test_a_full_disk_makes_the_store_unavailable_and_nothing_is_lost_after(
    small_tmpfs: Path,
) -> None:
    path = small_tmpfs / FILE_NAME
    health: list[tuple[bool, str]] = []
    writer = StoreWriter(
        SqliteStore.open(path),
        retry_s=0.2,
        max_pending_events=EVENT_BOUND,
        on_health=lambda ok, why: health.append((ok, why)),
    )
    try:
        before = [LinkRecord(k, "up", 1, 0) for k in KEYS]
        assert writer.submit([*before, event(BEFORE)]).result(10) is True

        filler = small_tmpfs / "filler"
        fill(filler)
        answers = []
        n = 0
        for r in range(ROUNDS):
            for key in KEYS:
                state = "down" if r % 2 == 0 else "up"
                future = writer.submit([LinkRecord(key, state, 1_000 + r, r), event(n)])
                answers.append(future.result(10))
                n += 1
        assert answers == [False] * n
        # The health report may follow the answers (it is not part of them): wait for it.
        wait_until(lambda: len(health) >= 1, timeout_s=30)
        assert len(health) == 1
        assert not health[0][0]
        assert str(path) in health[0][1]
        assert "full" in health[0][1]
        stats = writer.stats
        assert not stats.available
        assert stats.pending_records == len(KEYS) + EVENT_BOUND  # links merged
        assert stats.events_shed == n - EVENT_BOUND

        filler.unlink()
        wait_until(lambda: writer.stats.available, timeout_s=30)
        assert health == [health[0], (True, "")]
        assert writer.stats.pending_records == 0
    finally:
        writer.close()

    store = SqliteStore.open(path)
    try:
        restored = store.load()
    finally:
        store.close()
    last = ROUNDS - 1
    assert restored.links == {
        k: LinkRecord(k, "down" if last % 2 == 0 else "up", 1_000 + last, last) for k in KEYS
    }
    assert [e.generation for e in restored.events] == [
        BEFORE,
        *range(n - EVENT_BOUND, n),
    ]
    assert restored.events[-1].link_change.link == KEYS[(n - 1) % len(KEYS)]
