"""Leader election on a real etcd (controller.daemon.election): one leader at a time, terms that
grow, a clean hand-over without waiting for the lease, and a leader that cannot reach etcd
knows it is deposed before its lease can expire there."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest

from controller.daemon.election import SAFETY_S, Election, Leader
from controller.daemon.etcd_channel import parse
from mininet_labs.etcd import EtcdCluster, etcd_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
]

TTL_S = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(1, tmp_path_factory.mktemp("etcd")) as members:
        yield members


def _url(cluster: EtcdCluster, name: str) -> str:
    return f"{cluster.url}/election-{name}-{time.monotonic_ns()}"


async def test_one_leader_then_a_clean_handover_with_a_higher_term(cluster: EtcdCluster) -> None:
    endpoints = parse(_url(cluster, "handover"))
    seen: list[Leader | None] = []
    async with (
        Election(endpoints, "a:1", TTL_S) as a,
        Election(endpoints, "b:2", TTL_S, on_leader=seen.append) as b,
    ):
        won = await asyncio.wait_for(a.campaign(), 10)
        lost: list[str] = []
        keeper = a.keep(lost.append)
        waiting = asyncio.create_task(b.campaign())
        # Longer than the TTL: the lease is kept alive, the follower waits and knows who leads.
        await asyncio.sleep(TTL_S * 1.5)
        assert not lost and not waiting.done()
        assert keeper.refreshes >= 2
        assert b.leader == won and seen[-1] == won
        started = time.monotonic()
        keeper.stop()
        await a.resign()
        second = await asyncio.wait_for(waiting, 10)
        handover_s = time.monotonic() - started
        print(f"hand-over after resign: {handover_s * 1000:.0f} ms")
        assert second.address == "b:2" and second.term > won.term
        # Well under the TTL: the follower watched the key, it did not wait for expiry.
        assert handover_s < TTL_S


async def test_a_leader_cut_off_from_etcd_steps_down_before_its_lease_expires(
    cluster: EtcdCluster,
) -> None:
    endpoints = parse(_url(cluster, "cut"))
    async with Election(endpoints, "a:1", TTL_S) as a:
        await asyncio.wait_for(a.campaign(), 10)
        loop = asyncio.get_running_loop()
        lost: asyncio.Future[str] = loop.create_future()

        def on_lost(why: str) -> None:
            loop.call_soon_threadsafe(lost.set_result, why)

        keeper = a.keep(on_lost)
        await asyncio.sleep(0.5)
        pid = cluster.pids()[0]
        os.kill(pid, signal.SIGSTOP)  # etcd frozen: no refresh is answered
        frozen = time.monotonic()
        try:
            why = await asyncio.wait_for(lost, TTL_S + 5)
            after_s = time.monotonic() - frozen
        finally:
            os.kill(pid, signal.SIGCONT)
            keeper.stop()
        print(f"stepped down {after_s:.2f} s after etcd froze: {why}")
        assert "not refreshed" in why
        # The last refresh answered was sent before the freeze, and the deadline counts from
        # that send: deposed within the TTL of the freeze (plus scheduling on a busy machine).
        assert after_s <= TTL_S - SAFETY_S + 1.0
