"""Leader election on a real etcd (controller.daemon.election): one leader at a time, terms that
grow, a clean hand-over without waiting for the lease, and a leader that cannot reach etcd
holds its pushes before its lease can expire there, and steps down when etcd stays silent."""

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


async def test_a_leader_cut_off_from_etcd_holds_before_its_lease_expires_then_steps_down(
    cluster: EtcdCluster,
) -> None:
    endpoints = parse(_url(cluster, "cut"))
    grace_s = 1.0
    async with Election(endpoints, "a:1", TTL_S) as a:
        await asyncio.wait_for(a.campaign(), 10)
        loop = asyncio.get_running_loop()
        held: asyncio.Future[float] = loop.create_future()
        lost: asyncio.Future[tuple[str, float]] = loop.create_future()

        def on_hold(_why: str) -> None:
            loop.call_soon_threadsafe(held.set_result, time.monotonic())

        def on_lost(why: str) -> None:
            loop.call_soon_threadsafe(lost.set_result, (why, time.monotonic()))

        keeper = a.keep(on_lost, on_hold, grace_s=grace_s)
        await asyncio.sleep(0.5)
        pid = cluster.pids()[0]
        os.kill(pid, signal.SIGSTOP)  # etcd frozen: no refresh is answered
        frozen = time.monotonic()
        try:
            held_at = await asyncio.wait_for(held, TTL_S + 5)
            why, lost_at = await asyncio.wait_for(lost, grace_s + 5)
        finally:
            os.kill(pid, signal.SIGCONT)
            keeper.stop()
        print(
            f"pushes held {held_at - frozen:.2f} s after etcd froze, stepped down "
            f"{lost_at - frozen:.2f} s after: {why}"
        )
        assert "not refreshed" in why and keeper.resumes == 0
        # The last refresh answered was sent before the freeze, and the deadline counts from
        # that send: pushes held within the TTL of the freeze (plus scheduling on a busy
        # machine), before etcd could expire the lease; the step-down after the grace.
        assert held_at - frozen <= TTL_S - SAFETY_S + 1.0
        assert lost_at - held_at >= grace_s - 0.1
