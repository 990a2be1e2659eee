"""Three controller processes on one real etcd cluster (3 members on loopback): one leads, the
followers send agents to it, and faults of the leader or of etcd never cost a switch a write it
did not need nor leave routes wrong:
- the leader killed with SIGKILL: a follower takes over and pushes nothing to agents that hold
  the right state; a clean stop hands over without waiting for the lease;
- the leader killed while a cable is cut: the new leader handles the cut, and every switch ends
  with the state a controller computing from scratch gives it;
- one etcd member down (the one leading etcd, twice over): nothing changes, and a cut is
  still handled;
- etcd's quorum lost: the leader steps down (exit 3), nobody decides, agents keep what they
  hold; when quorum returns a leader is elected and pushes nothing;
- the leader cut off from etcd (no route left to the loopback address it reaches etcd at): it
  steps down and a follower takes over.

The agents are the real agent's controller session (agent/session.py: every controller
listed, redirects followed, terms checked) over a switch that applies every state at once: no
P4 target, so what is counted is what the controller sends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from bench.ha import HOLD_DOWN_S, Switch, leading, quiet, running, until
from bench.swarm.plan import Plan, make_plan
from mininet_labs.etcd import EtcdCluster, Writers, replicas_missing
from mininet_labs.netlinks import LabError, unroutable
from railfabric.redirect import follower_revision_of, leader_of
from railfabric.v1 import admin_pb2, admin_pb2_grpc
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(replicas_missing() is not None, reason=str(replicas_missing())),
]

TTL_S = 2
RAILCTL = str(Path(sys.executable).parent / "railctl")
EXIT_DEPOSED = 3
# A loopback address only this module uses: the partitioned leader reaches etcd through it.
CUT_OFF = "127.77.0.1"


@dataclass
class Fabric:
    """The controllers (address -> process), the plan and the agents."""

    processes: Processes
    store: str
    addresses: list[str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    plan: Plan = field(default_factory=lambda: make_plan(LAB, None, 1, 1))
    switches: list[Switch] = field(default_factory=list)

    def start(self, address: str, store: str | None = None) -> None:
        self.procs[address] = self.processes.start(
            [
                CONTROLLER,
                "--fabric",
                str(LAB),
                *pki.controller_flags(),
                "--listen",
                address,
                "--store",
                store or self.store,
                "--lease-ttl-s",
                str(TTL_S),
                "--hold-down-s",
                str(HOLD_DOWN_S),
            ]
        )

    async def leader(self, among: list[str] | None = None, timeout_s: float = 30) -> str:
        return await leading(among or self.addresses, pki.operator(), timeout_s)

    def agents(self) -> list[Switch]:
        self.switches = [
            Switch(spec, self.addresses, pki.switch(spec.name)) for spec in self.plan.agents
        ]
        return self.switches

    async def settled_on(self, address: str) -> int:
        """Until every switch holds a state from `address` and nothing more comes; the pushes
        so far."""
        await until(
            lambda: all(s.generation and s.on(address) for s in self.switches),
            30,
            f"every switch applied a state from {address}",
        )
        return await quiet(self.switches, 1.0, 30)

    def pushes(self) -> int:
        return sum(len(s.pushes) for s in self.switches)

    def cut(self) -> None:
        """Both ends of the plan's cable report it down."""
        link = self.plan.cuts[0].link
        by_name = {s.spec.name: s for s in self.switches}
        assert by_name[link.a].carrier(link.a_port, False)
        assert by_name[link.b].carrier(link.b_port, False)

    def routes(self) -> dict[str, dict[tuple[int, int], tuple[tuple[int, int, int], ...]]]:
        return {s.spec.name: s.routes() for s in self.switches}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    # etcd's authentication on, as in production: the controllers' certificate is the writer.
    writers = Writers("/ha", (str(pki.CONTROLLER),))
    with EtcdCluster(
        3, tmp_path / "etcd", also_on=(CUT_OFF,), pki=pki.ca_dir(), writers=writers
    ) as members:
        yield members


@pytest.fixture
def fabric(cluster: EtcdCluster, processes: Processes, free_port: Callable[[], int]) -> Fabric:
    # The cluster first: torn down after the controllers, which would otherwise log it.
    return Fabric(processes, f"{cluster.url}/ha", [f"127.0.0.1:{free_port()}" for _ in range(3)])


@contextlib.asynccontextmanager
async def _three(fabric: Fabric) -> AsyncIterator[str]:
    """Every controller started and every agent running; the first leader."""
    for address in fabric.addresses:
        fabric.start(address)
    first = await fabric.leader()
    async with running(fabric.agents()):
        await fabric.settled_on(first)
        yield first


def _exits(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout_s} s") from None


async def test_killing_the_leader_hands_over_without_a_push(fabric: Fabric) -> None:
    async with _three(fabric) as first:
        switches = fabric.switches
        old_term = max(s.session.term for s in switches)
        assert old_term > 0 and all(s.session.term == old_term for s in switches)
        pushed = fabric.pushes()

        fabric.procs[first].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        others = [a for a in fabric.addresses if a != first]
        second = await fabric.leader(others, TTL_S + 10)
        elected_s = time.monotonic() - killed
        await until(lambda: all(s.on(second) for s in switches), 30, "sessions on the leader")
        reconnected_s = time.monotonic() - killed
        await asyncio.sleep(1.0)
        print(
            f"takeover: new leader {second} in {elected_s:.2f} s, {len(switches)} sessions on "
            f"it in {reconnected_s:.2f} s (lease TTL {TTL_S} s)"
        )
        assert fabric.pushes() == pushed, "the new leader pushed to switches holding their state"
        # The new leader announced its term: the killed one would be refused now.
        assert all(s.session.term > old_term for s in switches)
    # A clean stop of the new leader resigns: the last follower leads without waiting a TTL.
    fabric.procs[second].send_signal(signal.SIGTERM)
    assert _exits(fabric.procs[second], 20) == 0
    third = await fabric.leader([a for a in others if a != second], TTL_S + 10)
    assert third not in (first, second)


async def test_the_leader_killed_during_a_cut_the_next_one_routes_around_it(
    fabric: Fabric, free_port: Callable[[], int]
) -> None:
    async with _three(fabric) as first:
        pushed = fabric.pushes()
        fabric.cut()
        fabric.procs[first].send_signal(signal.SIGKILL)
        others = [a for a in fabric.addresses if a != first]
        second = await fabric.leader(others, TTL_S + 10)
        await fabric.settled_on(second)
        assert fabric.pushes() > pushed, "nobody routed around the cut"
        after = fabric.routes()
    # From scratch: one controller with an empty store, agents reporting the same cable down.
    alone = f"127.0.0.1:{free_port()}"
    fabric.start(alone, "memory:")
    fresh = Fabric(fabric.processes, "memory:", [alone], plan=fabric.plan)
    for switch, before in zip(fresh.agents(), fabric.switches, strict=True):
        switch.down = set(before.down)
    async with running(fresh.switches):
        await fresh.leader()
        await fresh.settled_on(alone)
        assert fresh.routes() == after
        link = fabric.plan.cuts[0].link
        # Not trivially equal: the cut changed what its ToR forwards.
        assert link.a_port not in {hop[0] for hops in after[link.a].values() for hop in hops}


async def test_one_etcd_member_down_changes_nothing_and_cuts_are_handled(
    fabric: Fabric, cluster: EtcdCluster
) -> None:
    async with _three(fabric) as first:
        term = fabric.switches[0].session.term
        # The member that leads etcd goes, twice: the lease cannot be refreshed until etcd has
        # elected another (about as long as the lease), and the leader leads on.
        for _ in range(1):
            killed = cluster.leader_member()
            cluster.kill(killed)
            await asyncio.sleep(2 * TTL_S)
            assert await fabric.leader(timeout_s=5) == first
            assert all(p.poll() is None for p in fabric.procs.values())
            await asyncio.to_thread(cluster.start, killed)
        cluster.kill(cluster.leader_member())
        pushed = fabric.pushes()
        fabric.cut()
        await until(lambda: fabric.pushes() > pushed, 20, "the cut handled")
        assert all(s.on(first) and s.session.term == term for s in fabric.switches), [
            (s.spec.name, s.session.address, s.session.connected.is_set(), s.session.term, term)
            for s in fabric.switches
        ]


async def test_without_quorum_nobody_decides_and_the_fabric_resumes_as_it_was(
    fabric: Fabric, cluster: EtcdCluster
) -> None:
    async with _three(fabric) as first:
        generations = {s.spec.name: s.generation for s in fabric.switches}
        pushed = fabric.pushes()
        term = fabric.switches[0].session.term
        cluster.kill(1)
        cluster.kill(2)
        lost = time.monotonic()
        # The lease cannot be refreshed: the leader stops deciding and exits for a restart.
        assert _exits(fabric.procs[first], TTL_S + 10) == EXIT_DEPOSED
        print(f"leader stepped down {time.monotonic() - lost:.2f} s after quorum was lost")
        await asyncio.sleep(TTL_S)
        others = [a for a in fabric.addresses if a != first]
        with pytest.raises(TimeoutError):
            await fabric.leader(others, 1.0)
        assert fabric.pushes() == pushed
        assert {s.spec.name: s.generation for s in fabric.switches} == generations
        cluster.start(1)
        cluster.start(2)
        second = await fabric.leader(others, 30)
        await until(lambda: all(s.on(second) for s in fabric.switches), 30, "sessions back")
        await asyncio.sleep(1.0)
        assert fabric.pushes() == pushed, "the store came back other than it was"
        assert all(s.session.term > term for s in fabric.switches)


@contextlib.contextmanager
def _unroutable(address: str) -> Iterator[None]:
    """mininet_labs' partition, a skip where the route cannot be added."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(unroutable(address))
        except LabError as err:
            pytest.skip(f"cannot add a blackhole route for {address}: {err}")
        yield


@pytest.mark.skipif(shutil.which("ip") is None, reason="ip (iproute2) is not installed")
async def test_a_leader_cut_off_from_etcd_steps_down(fabric: Fabric, cluster: EtcdCluster) -> None:
    first, *others = fabric.addresses
    # The first controller reaches etcd only through CUT_OFF, and leads.
    fabric.start(first, f"{cluster.url_on(CUT_OFF)}/ha")
    assert await fabric.leader([first]) == first
    for address in others:
        fabric.start(address)
    async with running(fabric.agents()):
        pushed = await fabric.settled_on(first)
        with _unroutable(CUT_OFF):
            cut = time.monotonic()
            assert _exits(fabric.procs[first], TTL_S + 10) == EXIT_DEPOSED
            print(f"cut-off leader stepped down after {time.monotonic() - cut:.2f} s")
            second = await fabric.leader(others, TTL_S + 10)
            await until(lambda: all(s.on(second) for s in fabric.switches), 30, "sessions moved")
        await asyncio.sleep(1.0)
        assert fabric.pushes() == pushed


async def _admin_answers(
    address: str,
) -> tuple[dict[str, admin_pb2.LinkState.ValueType], dict[str, str]]:
    """(link key -> state, switch -> desired digest) as `address`'s admin API gives them."""
    async with pki.channel(address) as channel:
        stub = admin_pb2_grpc.FabricAdminStub(channel)
        links = await stub.ListLinks(admin_pb2.ListLinksRequest(page_size=1000), timeout=10)
        assert not links.next_page_token
        states = {
            f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}": x.state
            for x in links.links
        }
        digests = {}
        for name in ("tor-r1-b1", "spine-p1-1"):
            state = await stub.GetSwitchState(
                admin_pb2.GetSwitchStateRequest(switch_name=name), timeout=10
            )
            digests[name] = state.digest
    return states, digests


async def test_followers_answer_reads_from_their_warm_copy_and_send_changes_to_the_leader(
    fabric: Fabric,
) -> None:
    async with _three(fabric) as first:
        follower = next(a for a in fabric.addresses if a != first)
        leader_view = await _admin_answers(first)
        await until_async(lambda: _admin_answers(follower), leader_view, 20)
        # A cut the leader handles shows in the follower's copy too.
        fabric.cut()
        await quiet(fabric.switches, 1.0, 30)
        leader_view = await _admin_answers(first)
        assert any(s != admin_pb2.LINK_STATE_UP for s in leader_view[0].values())
        await until_async(lambda: _admin_answers(follower), leader_view, 20)
        # A follower's answer says so: its copy's etcd revision and the leader, in the trailing
        # metadata, and railctl repeats it; the leader's answer has neither.
        marks = {}
        for address in (first, follower):
            async with pki.channel(address) as channel:
                call = admin_pb2_grpc.FabricAdminStub(channel).ListAlarms(
                    admin_pb2.ListAlarmsRequest(), timeout=10
                )
                await call
                metadata = await call.trailing_metadata()
                marks[address] = (follower_revision_of(metadata), leader_of(metadata))
        assert marks[first] == (None, None)
        revision, named = marks[follower]
        assert revision is not None and revision > 0 and named == first, marks
        done = await asyncio.to_thread(
            subprocess.run,
            [RAILCTL, "--controller", follower, "links"],
            env={**os.environ, **pki.railctl_env()},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert f"answered by {follower}, a follower, from its copy of the store at etcd " in (
            done.stderr
        )
        assert f"the leader is {first}" in done.stderr
        # A change asked of a follower is the leader's: it names it.
        async with pki.channel(follower) as channel:
            stub = admin_pb2_grpc.FabricAdminStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Drain(admin_pb2.DrainRequest(target="tor-r1-b1:1"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert leader_of(refused.value.trailing_metadata()) == first


async def until_async(
    ask: Callable[[], Awaitable[object]], expected: object, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while (got := await ask()) != expected:
        assert time.monotonic() < deadline, (got, expected)
        await asyncio.sleep(0.2)
