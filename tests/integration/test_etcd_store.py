"""The etcd store on real etcd members (mininet_labs.etcd, loopback, no root): it gives back
what SqliteStore gives back after the same commits; a commit larger than etcd's request limit
is one atomic commit; staged parts no log entry names are ignored, then deleted; compaction
changes nothing load() gives back; a deposed leader's commit changes nothing; a cluster that
lost one member of three still commits; a cluster that lost all of them fails the commit
within the timeout; a follower sees the batches committed after its load.

Two clusters (1 and 3 members) serve the whole module; each test has a prefix of its own."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from aetcd import rpc
from hypothesis import HealthCheck, given, settings

from controller.core.records import (
    RESTORED_EVENTS,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    Restored,
    RoutingStep,
    SwitchGeneration,
    SwitchGenerations,
    replay,
)
from controller.daemon import store_codec
from controller.daemon.etcd_channel import EtcdEndpoints, parse
from controller.daemon.etcd_store import EtcdStore, StoreFenced, follow
from controller.daemon.store import SqliteStore, StoreCorrupt, StoreError
from mininet_labs.etcd import EtcdCluster, etcd_path
from railfabric.v1 import admin_pb2
from tests.unit.core.record_strategies import batches

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
]

_prefixes = itertools.count()
DIGEST = "v2:" + "0123456789abcdef" * 4


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(1, tmp_path_factory.mktemp("etcd1")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(3, tmp_path_factory.mktemp("etcd3")) as cluster:
        yield cluster


def endpoints_of(cluster: EtcdCluster) -> EtcdEndpoints:
    return parse(f"{cluster.url}/test-{next(_prefixes)}-{time.monotonic_ns()}")


class Keys:
    """Direct access to the store's keys, as the election and an operator have it."""

    def __init__(self, endpoints: EtcdEndpoints) -> None:
        self.endpoints = endpoints
        self.leader = endpoints.key("leader")
        self._channel = endpoints.channel()
        self.kv: Any = rpc.KVStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def elect(self) -> int:
        """A new leader key (the election's, without a lease); its term."""
        self.kv.DeleteRange(rpc.DeleteRangeRequest(key=self.leader), timeout=5)
        answer = self.kv.Put(rpc.PutRequest(key=self.leader, value=b"test"), timeout=5)
        return int(answer.header.revision)

    def names(self, under: str) -> list[str]:
        start = self.endpoints.key(under)
        end = start[:-1] + bytes([start[-1] + 1])
        answer = self.kv.Range(
            rpc.RangeRequest(key=start, range_end=end, keys_only=True), timeout=5
        )
        return [bytes(kv.key)[len(start) :].decode() for kv in answer.kvs]


@pytest.fixture
def keys(one: EtcdCluster) -> Iterator[Keys]:
    k = Keys(endpoints_of(one))
    yield k
    k.close()


def leader_store(k: Keys, **options: Any) -> tuple[EtcdStore, int]:
    store = EtcdStore.open(k.endpoints, **options)
    store.load()
    term = k.elect()
    store.fence(k.leader, term)
    return store, term


def sqlite_after(batches: Sequence[Sequence[Record]]) -> Restored:
    store = SqliteStore.open(":memory:")
    try:
        for batch in batches:
            store.commit(batch)
        return store.load()
    finally:
        store.close()


def loaded(endpoints: EtcdEndpoints) -> Restored:
    store = EtcdStore.open(endpoints)
    try:
        return store.load()
    finally:
        store.close()


def generations(n: int, generation: int = 1) -> SwitchGenerations:
    return SwitchGenerations(
        tuple(SwitchGeneration(f"tor-r{i // 32}-b{i % 32}", generation, DIGEST) for i in range(n))
    )


def event(i: int) -> EventRecord:
    return EventRecord(admin_pb2.Event(wall_ns=i, kind="port_down", message=f"event {i}"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(max_batches=6))
def test_commit_then_load_gives_back_what_sqlite_does(
    one: EtcdCluster, batches: list[list[Record]]
) -> None:
    k = Keys(endpoints_of(one))
    store, _ = leader_store(k)
    try:
        for batch in batches:
            store.commit(batch)
        assert loaded(k.endpoints) == sqlite_after(batches)
    finally:
        store.close()
        k.close()


def test_a_commit_above_the_request_limit_is_staged_and_atomic(keys: Keys) -> None:
    store, _ = leader_store(keys)
    big = generations(20_000)
    assert len(store_codec.encode_batch([big])) > 1.5 * 2**20  # etcd's request limit
    try:
        store.commit([Meta("topology", "a")])
        store.commit([big, LinkRecord("l-1", "down", 5, 1)])
        assert loaded(keys.endpoints) == sqlite_after(
            [[Meta("topology", "a")], [big, LinkRecord("l-1", "down", 5, 1)]]
        )
        stagings = {name.rsplit("/", 1)[0] for name in keys.names("stage/")}
        assert len(stagings) == 1 and len(keys.names("stage/")) == 2  # parts of 1 MiB
        assert keys.names("log/") == [f"{seq:020d}" for seq in (1, 2)]
    finally:
        store.close()


def test_parts_of_a_commit_that_never_happened_are_ignored_then_deleted(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = leader_store(keys)
    first: list[Record] = [Meta("topology", "a")]
    try:
        store.commit(first)

        def crash(*_args: object) -> bool:
            raise StoreError("the writer died between staging and committing")

        monkeypatch.setattr(store, "_txn_entry", crash)
        with pytest.raises(StoreError, match="died"):
            store.commit([generations(20_000)])
        assert keys.names("stage/"), "the parts were staged"
    finally:
        store.close()
    assert loaded(keys.endpoints) == sqlite_after([first])
    # The next leader deletes them with its first commit.
    successor, _ = leader_store(keys)
    try:
        successor.commit([Meta("routing", "b")])
    finally:
        successor.close()
    assert keys.names("stage/") == []
    assert loaded(keys.endpoints) == sqlite_after([first, [Meta("routing", "b")]])


def test_what_does_not_decode_stops_the_load_naming_the_key(keys: Keys) -> None:
    store, _ = leader_store(keys)
    try:
        store.commit([Meta("a", "1")])
        store.commit([generations(20_000)])
    finally:
        store.close()
    part = keys.endpoints.key("stage/" + keys.names("stage/")[0])
    keys.kv.DeleteRange(rpc.DeleteRangeRequest(key=part), timeout=5)
    with pytest.raises(StoreCorrupt, match=r"log/0+2: .*manifest names 2 staged parts, 1 found"):
        loaded(keys.endpoints)
    entry = keys.endpoints.key(f"log/{1:020d}")
    keys.kv.Put(rpc.PutRequest(key=entry, value=b"\xffnot a batch"), timeout=5)
    with pytest.raises(StoreCorrupt) as caught:
        loaded(keys.endpoints)
    assert str(caught.value).startswith(f"{keys.endpoints.url} key {entry.decode()}: ")
    assert "etcdctl del --prefix" in str(caught.value)


def test_compaction_changes_nothing_load_gives_back(keys: Keys) -> None:
    store, _ = leader_store(keys, compact_entries=4)
    done: list[list[Record]] = []
    try:
        for i in range(11):
            batch: list[Record] = [
                LinkRecord(f"l-{i % 3}", "down" if i % 2 else "up", i, i),
                RoutingStep(f"l-{i % 3}", bool(i % 2), joined=i % 4 == 1),
                event(i),
            ]
            if i == 5:
                batch.append(generations(20_000, generation=i))  # a staged snapshot after it
            store.commit(batch)
            done.append(batch)
        assert store.compactions == 2
        # Snapshots after the 4th commit (seq 5) and the 8th (seq 10, staged); only the last
        # and what followed it remain, and of staged parts only the snapshot's (not those of
        # the 6th commit, seq 7).
        assert keys.names("log/") == [f"{seq:020d}" for seq in (10, 11, 12, 13)]
        assert {name.split("/")[0] for name in keys.names("stage/")} == {f"{10:020d}"}
        assert loaded(keys.endpoints) == sqlite_after(done)
    finally:
        store.close()


def test_a_deposed_leader_writes_nothing_and_its_successor_carries_on(keys: Keys) -> None:
    old, term = leader_store(keys)
    successor = EtcdStore.open(keys.endpoints, compact_entries=1)
    successor.load()  # a warm replica, loaded before the old leader's last commit
    try:
        old.commit([Meta("a", "1")])
        new_term = keys.elect()
        assert new_term > term
        for records in ([Meta("a", "2")], [generations(20_000)]):  # inline and staged
            with pytest.raises(StoreFenced, match=rf"no longer the leader \(term {term}\)"):
                old.commit(records)
        with pytest.raises(StoreFenced):  # and it stays refused
            old.commit([Meta("a", "3")])
        assert loaded(keys.endpoints) == sqlite_after([[Meta("a", "1")]])
        assert keys.names("stage/") == []
        successor.fence(keys.leader, new_term)
        successor.commit([Meta("b", "1")])
        # Its snapshot (compact_entries=1) is made from memory: it read the old leader's entry.
        assert successor.compactions == 1
        assert loaded(keys.endpoints) == sqlite_after([[Meta("a", "1")], [Meta("b", "1")]])
    finally:
        old.close()
        successor.close()


def test_a_commit_before_fence_is_refused(keys: Keys) -> None:
    store = EtcdStore.open(keys.endpoints)
    try:
        store.load()
        with pytest.raises(StoreError, match="only the elected leader writes"):
            store.commit([Meta("a", "1")])
        with pytest.raises(StoreFenced, match="is gone"):
            store.fence(keys.leader, 12345)
    finally:
        store.close()
    assert keys.names("log/") == []


def test_three_members_one_killed_still_commit_and_load(three: EtcdCluster) -> None:
    k = Keys(endpoints_of(three))
    store, _ = leader_store(k)
    try:
        store.commit([Meta("before", "1")])
        # Member 0 is the one the channel talks to (the first listed).
        three.kill(0)
        # If it was etcd's own leader the other two elect one first (1 s election timeout, more
        # on a loaded machine: a commit in CI once outlived its 5 s deadline meanwhile).
        three.wait_ready()
        store.commit([Meta("after", "1"), generations(2_000)])
        assert loaded(k.endpoints) == sqlite_after(
            [[Meta("before", "1")], [Meta("after", "1"), generations(2_000)]]
        )
    finally:
        store.close()
        k.close()
        three.start(0)


def test_all_members_down_fails_the_commit_within_the_timeout(one: EtcdCluster) -> None:
    k = Keys(endpoints_of(one))
    store, _ = leader_store(k, timeout_s=1.0)
    try:
        store.commit([Meta("a", "1")])
        one.kill(0)
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            store.commit([Meta("a", "2")])
        took = time.monotonic() - started
        assert took < 2.5, took
        message = str(caught.value)
        assert message.startswith(k.endpoints.url) and "etcd unreachable" in message
        # Its outcome unknown, the store writes no more (the controller steps down).
        with pytest.raises(StoreError, match="outcome of an earlier one is unknown"):
            store.commit([Meta("a", "3")])
        with pytest.raises(StoreError, match="etcd unreachable"):
            store.load()
    finally:
        store.close()
        one.start(0)
        k.close()


async def test_a_follower_sees_what_is_committed_after_its_load(keys: Keys) -> None:
    store, _ = leader_store(keys, compact_entries=3)
    try:
        store.commit([Meta("a", "1")])
        reader = EtcdStore.open(keys.endpoints)
        mirror = reader.load()
        reader.close()
        batches: list[list[Record]] = [
            [event(1), Meta("a", "2")],
            [generations(20_000)],  # staged
            [event(2)],  # the third since the snapshot: a snapshot follows it
        ]
        for batch in batches:
            store.commit(batch)
        assert store.compactions == 1
        seen = 0
        snapshots = 0
        stream = follow(keys.endpoints, reader.revision)
        async with asyncio.timeout(10):
            async for revision, records, snapshot in stream:
                assert revision > reader.revision
                if snapshot:
                    mirror = Restored()
                    snapshots += 1
                replay(mirror, records, RESTORED_EVENTS)
                seen += 1
                if seen == len(batches) + 1:
                    break
        await stream.aclose()
        assert snapshots == 1
        assert mirror == loaded(keys.endpoints)
        assert mirror == sqlite_after([[Meta("a", "1")], *batches])
    finally:
        store.close()


async def test_a_follower_of_a_compacted_revision_is_told_to_load_again(keys: Keys) -> None:
    store, _ = leader_store(keys)
    try:
        store.commit([Meta("a", "1")])
        store.commit([Meta("a", "2")])
        answer = keys.kv.Compact(rpc.CompactionRequest(revision=store.revision), timeout=5)
        assert answer is not None
        with pytest.raises(StoreError, match="compacted"):
            async with asyncio.timeout(10):
                async for _ in follow(keys.endpoints, 1):
                    pass
    finally:
        store.close()
