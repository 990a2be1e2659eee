"""Faults of the controllers and of etcd on the lab fabric, with real packets (issue 16): 3
controller replicas on a 3-member etcd cluster (mutual TLS), softswitches and agents, a probe
flowing from a ToR across a spine.

- the leader killed right after a cable is cut: the agent repairs locally, the new leader
  handles the cut, and every switch forwards as a computation from scratch says and holds
  exactly its desired state;
- the etcd member that leads etcd killed, then a cable cut: the same leader handles it;
- etcd's quorum lost: the leader steps down and nobody leads, yet a cable cut meanwhile is
  repaired locally by the agent and the probe flows on; when quorum returns, a leader resumes
  from etcd and the routes equal a fresh computation;
- the leader cut off from etcd alone: it steps down, another replica leads, every agent moves
  to it, and the probe loses nothing.

The kill under traffic itself (no datagram lost, no write) is the controller-failover
scenario's (test_controller_failover.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from mininet_labs.etcd import replicas_missing
from mininet_labs.lab import Lab, LabOptions
from mininet_labs.netlinks import LabError
from mininet_labs.processes import REPO, make_target
from mininet_labs.scenarios.common import nics_on, tor_pair
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2
from tests.integration.e2e_fabric import (
    ProbeResult,
    SwitchReader,
    fresh_forwarding,
    groups_watching,
    probe,
    routing_problems,
    settled_states,
    switch_status,
    udp_flow,
    updates_written,
)

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(replicas_missing() is not None, reason=str(replicas_missing())),
]

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"
TTL_S = 2
PROBE_PPS = 500
# Local repair: the agent takes a dead port out of its groups in milliseconds; on a busy
# machine allow this much of the probe lost around a cut.
REPAIR_LOSS_S = 1.0


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    options = LabOptions(controllers=3, lease_ttl_s=TTL_S)
    with Lab(LAB_FABRIC, make_target("softswitch", 20.0), options) as running:
        yield running


@pytest.fixture(scope="module")
def reader(lab: Lab) -> Iterator[SwitchReader]:
    with SwitchReader(lab) as r:
        yield r


@pytest.fixture(autouse=True)
def whole_before_and_after(lab: Lab) -> Iterator[None]:
    """Every test starts with every replica and etcd member up and the fabric converged, and
    leaves it so."""
    _whole(lab)
    yield
    _whole(lab)


def _whole(lab: Lab) -> None:
    assert lab.etcd is not None
    for i in range(lab.etcd.size):
        lab.etcd.start(i)
    lab.find_leader()
    for i in range(len(lab.controller_addrs)):
        lab.start_replica(i)
    lab.wait_converged(timeout_s=60)


class ProbePath:
    """The probe's path: from the first NIC of a ToR to a NIC of a ToR in another block, and
    the cable it leaves its ToR on (the cut the agent repairs alone)."""

    def __init__(self, lab: Lab) -> None:
        src_tor, dst_tor = tor_pair(lab)
        self.src, self.dst = nics_on(lab, src_tor)[0], nics_on(lab, dst_tor)[0]
        path = lab.predict(udp_flow(0, self.src, self.dst, 40000))
        if len(path.hops) < 3 or not path.delivered_to:
            raise LabError(f"the probe has no 3-hop path: {path.error or path.hops}")
        self.tor, self.port = path.hops[0].switch_name, path.hops[0].egress_port
        self.cable = lab.topology.cable(self.tor, self.port).link.key


def _repaired_locally(result: ProbeResult) -> None:
    """The probe lost at most REPAIR_LOSS_S of datagrams, none in its last second: forwarding
    went on around the cut without anyone's help."""
    assert result.sent > 2 * PROBE_PPS and result.received, (result.sent, len(result.received))
    missing = result.missing
    print(f"probe across the cut: {len(result.received)}/{result.sent} datagrams received/sent")
    assert len(missing) <= REPAIR_LOSS_S * PROBE_PPS, (len(missing), result.sent)
    assert not missing or missing[-1] < result.sent - PROBE_PPS, (missing[-1], result.sent)


def _link_is(lab: Lab, key: str, state: int) -> bool | None:
    """The leader shows cable `key` in `state` and every switch connected and converged."""
    try:
        if lab.link_state(key) != state:
            return None
        status = switch_status(lab)
    except (grpc.RpcError, LabError):
        return None
    return True if all(s.connected and s.converged for s in status.values()) else None


def _all_connected(lab: Lab) -> bool | None:
    try:
        status = switch_status(lab)
    except (grpc.RpcError, LabError):
        return None
    return True if all(s.connected for s in status.values()) else None


def _routes_as_fresh(lab: Lab, reader: SwitchReader, down: tuple[str, ...]) -> None:
    """The leader's desired states forward as a fresh computation with `down` down, and every
    switch holds exactly its desired state (read back from its target)."""
    state = admin_pb2.LINK_STATE_DOWN if down else admin_pb2.LINK_STATE_UP
    for key in down:
        wait_for(
            f"{key} down and every switch converged",
            lambda key=key: _link_is(lab, key, state),  # type: ignore[misc]
            timeout_s=60,
        )
    states, held = wait_for(
        "a consistent view of desired and applied state",
        lambda: settled_states(lab, reader),
        timeout_s=30,
    )
    assert routing_problems(states, held, fresh_forwarding(lab, down)) == []


def _restore(lab: Lab, reader: SwitchReader, key: str) -> None:
    lab.topology.restore(key)
    wait_for(
        f"{key} up again",
        lambda: _link_is(lab, key, admin_pb2.LINK_STATE_UP),
        timeout_s=60,
    )
    _routes_as_fresh(lab, reader, ())


def test_the_leader_killed_during_a_cut_the_new_one_routes_as_from_scratch(
    lab: Lab, reader: SwitchReader
) -> None:
    path = ProbePath(lab)
    first = lab.leader()
    with probe(lab, path.src, path.dst, "kill-cut", PROBE_PPS) as result:
        time.sleep(0.5)
        lab.topology.cut(path.cable)
        lab.kill_replica(lab.replica_of(first))
        others = [a for a in lab.controller_addrs if a != first]
        second = lab.find_leader(timeout_s=TTL_S + 15, among=others)
        time.sleep(1.5)
    _repaired_locally(result)
    # The cut reached no leader before the kill, or the old one only: the new one handles it.
    _routes_as_fresh(lab, reader, (path.cable,))
    assert lab.leader() == second
    # The repair shows in the switch itself: no group of the ToR holds the dead port.
    assert groups_watching(reader.pipeline(path.tor), path.port) == []
    _restore(lab, reader, path.cable)


def test_the_member_leading_etcd_killed_then_a_cut_the_same_leader_handles_it(
    lab: Lab, reader: SwitchReader
) -> None:
    assert lab.etcd is not None
    path = ProbePath(lab)
    first = lab.leader()
    restarts = len(lab.replica_restarts)
    lab.etcd.kill(lab.etcd.leader_member())
    with probe(lab, path.src, path.dst, "member-cut", PROBE_PPS) as result:
        time.sleep(0.5)
        lab.topology.cut(path.cable)
        time.sleep(2.0)
    _repaired_locally(result)
    _routes_as_fresh(lab, reader, (path.cable,))
    assert lab.leader() == first
    # It never stepped down: no replica exited.
    assert len(lab.replica_restarts) == restarts, lab.replica_restarts
    assert lab.replica_running(lab.replica_of(first))
    _restore(lab, reader, path.cable)


def test_without_quorum_agents_repair_locally_and_the_leader_resumes_as_from_scratch(
    lab: Lab, reader: SwitchReader
) -> None:
    assert lab.etcd is not None
    path = ProbePath(lab)
    first = lab.replica_of(lab.leader())
    restarts = len(lab.replica_restarts)
    killed = [m for m in range(lab.etcd.size) if m != lab.etcd.leader_member()]
    for m in killed:
        lab.etcd.kill(m)
    # Its lease cannot be refreshed: the leader holds its pushes, then steps down (exit 3).
    wait_for(
        "the leader to step down",
        lambda: True if not lab.replica_running(first) else None,
        timeout_s=TTL_S + 15,
    )
    assert [lab.serving(a) for a in lab.controller_addrs].count(True) == 0
    with probe(lab, path.src, path.dst, "quorum-cut", PROBE_PPS) as result:
        time.sleep(0.5)
        lab.topology.cut(path.cable)
        time.sleep(2.0)
        # Nobody decided meanwhile: no replica leads.
        assert [lab.serving(a) for a in lab.controller_addrs].count(True) == 0
    _repaired_locally(result)
    assert groups_watching(reader.pipeline(path.tor), path.port) == []

    for m in killed:
        lab.etcd.start(m, wait=False)
    lab.etcd.wait_ready()
    # A leader again (the stepped-down replica started again by the lab, its supervisor),
    # from what etcd holds: it learns the cut from the agents and routes as from scratch.
    lab.find_leader(timeout_s=TTL_S + 30)
    assert len(lab.replica_restarts) > restarts
    _routes_as_fresh(lab, reader, (path.cable,))
    _restore(lab, reader, path.cable)


def test_the_leader_cut_off_from_etcd_steps_down_and_agents_move_losing_nothing(
    lab: Lab, reader: SwitchReader
) -> None:
    path = ProbePath(lab)
    first = lab.leader()
    i = lab.replica_of(first)
    others = [a for a in lab.controller_addrs if a != first]
    with (
        probe(lab, path.src, path.dst, "partition", PROBE_PPS) as result,
        lab.cut_off_from_etcd(i),
    ):
        wait_for(
            "the cut-off leader to step down",
            lambda: True if not lab.replica_running(i) else None,
            timeout_s=TTL_S + 15,
        )
        second = lab.find_leader(timeout_s=TTL_S + 15, among=others)
        wait_for(
            f"every agent on {second}",
            lambda: _all_connected(lab),
            timeout_s=30,
        )
        time.sleep(1.0)  # a push, if any, applied and reported
        written = updates_written(lab)
    assert result.sent > 2 * PROBE_PPS and result.missing == [], (
        len(result.missing),
        result.sent,
    )
    assert lab.leader() == second
    assert written == dict.fromkeys(written, 0), written
    _routes_as_fresh(lab, reader, ())
