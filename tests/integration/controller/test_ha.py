"""Three controller processes on one real etcd cluster (3 members on loopback): one leads, the
followers send agents to it, and when the leader is killed with SIGKILL a follower takes over
and, resuming from etcd, pushes nothing to agents that hold the right state.

The agents are the real agent's controller session (agent/session.py: every controller
listed, redirects followed, terms checked) over a switch that applies every state at once: no
P4 target, so what is counted is what the controller sends."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.ha import HOLD_DOWN_S, Switch, leading, quiet, running, until
from bench.swarm.plan import make_plan
from mininet_labs.etcd import EtcdCluster, etcd_path
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
]

TTL_S = 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    with EtcdCluster(3, tmp_path / "etcd") as members:
        yield members


async def test_killing_the_leader_hands_over_without_a_push(
    cluster: EtcdCluster, processes: Processes, free_port: Callable[[], int]
) -> None:
    # The cluster first: torn down after the controllers, which would otherwise log it.
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    procs = {
        address: processes.start(
            [
                CONTROLLER,
                "--fabric",
                str(LAB),
                *pki.controller_flags(),
                "--listen",
                address,
                "--store",
                f"{cluster.url}/ha-test",
                "--lease-ttl-s",
                str(TTL_S),
                "--hold-down-s",
                str(HOLD_DOWN_S),
            ]
        )
        for address in addresses
    }
    first = await leading(addresses, pki.operator(), 30)
    plan = make_plan(LAB, None, 1, 0)
    switches = [Switch(spec, addresses, pki.switch(spec.name)) for spec in plan.agents]
    async with running(switches):
        await until(
            lambda: all(s.generation and s.session.address == first for s in switches),
            30,
            "every switch applied a state from the first leader",
        )
        old_term = max(s.session.term for s in switches)
        assert old_term > 0 and all(s.session.term == old_term for s in switches)
        # Settled: every link up and out of hold-down, nothing more to push.
        await quiet(switches, 1.0, 30)

        procs[first].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        others = [a for a in addresses if a != first]
        second = await leading(others, pki.operator(), TTL_S + 10)
        elected_s = time.monotonic() - killed
        await until(
            lambda: all(s.on(second) for s in switches),
            30,
            "every switch's session moved to the new leader",
        )
        reconnected_s = time.monotonic() - killed
        await asyncio.sleep(1.0)
        print(
            f"takeover: new leader {second} in {elected_s:.2f} s, {len(switches)} sessions on "
            f"it in {reconnected_s:.2f} s (lease TTL {TTL_S} s)"
        )
        after = [(s.spec.name, p) for s in switches for p in s.pushes if p[0] != first]
        assert after == [], "the new leader pushed to switches that held the right state"
        assert all(s.session.term > old_term for s in switches)
    # A clean stop of the new leader resigns: the last follower leads without waiting a TTL.
    procs[second].send_signal(signal.SIGTERM)
    assert procs[second].wait(timeout=20) == 0
    third = await leading([a for a in others if a != second], pki.operator(), TTL_S + 10)
    assert third not in (first, second)
