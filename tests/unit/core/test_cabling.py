"""LLDP against the cabling plan: swapped cables are reported naming both ends, a server NIC in
the wrong place names where it is and where the plan has it, and real lldpd frames from a
correctly cabled server raise nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.lldp import NeighborTable
from controller.core.cabling import (
    CablingCheck,
    CablingPlan,
    Outcome,
    ServerLldp,
    lldp_peer,
    lldp_status,
)
from railfabric.v1 import admin_pb2, control_pb2, state_pb2
from tests.unit.core.harness import LAB, Harness

pytestmark = pytest.mark.unit

S = 1_000_000_000
FRAMES = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "lldpd_1.0.16_frames.json").read_text()
)["frames"]
SWITCH, HOST = state_pb2.PEER_KIND_SWITCH, state_pb2.PEER_KIND_HOST


def nic_mac(server: int, nic: int) -> int:
    return (0x06 << 40) | (server << 16) | nic


def plan() -> CablingPlan:
    """leaf-r3-b1: uplinks 7, 8 to spine-2, spine-3. Five rail ToRs tor-rR-b1, each with
    srv-b1-s1's nicR on port 1 and srv-b1-s2's on port 2 (srv-b1-s1 nic1's MAC is the one in
    the lldpd captures)."""
    states = [
        state_pb2.DesiredState(
            switch_name="leaf-r3-b1",
            neighbors=[
                state_pb2.Neighbor(port=7, kind=SWITCH, peer_name="spine-2", peer_port=3),
                state_pb2.Neighbor(port=8, kind=SWITCH, peer_name="spine-3", peer_port=3),
            ],
        ),
        state_pb2.DesiredState(
            switch_name="spine-2",
            neighbors=[
                state_pb2.Neighbor(port=3, kind=SWITCH, peer_name="leaf-r3-b1", peer_port=7)
            ],
        ),
        state_pb2.DesiredState(switch_name="spine-3"),
    ]
    for rail in range(1, 6):
        states.append(
            state_pb2.DesiredState(
                switch_name=f"tor-r{rail}-b1",
                neighbors=[
                    state_pb2.Neighbor(
                        port=s,
                        kind=HOST,
                        peer_name=f"srv-b1-s{s}/nic{rail}",
                        peer_mac=nic_mac(s, rail),
                    )
                    for s in (1, 2)
                ],
            )
        )
    return CablingPlan(states)


def hears(port: int, system_name: str, port_id: str) -> control_pb2.LldpNeighbor:
    return control_pb2.LldpNeighbor(
        port=port, chassis_id=system_name, system_name=system_name, port_id=port_id
    )


class Fabric:
    """A check and the active alarms, driven the way the decision core drives them."""

    def __init__(self, servers: ServerLldp | None = None) -> None:
        self.check = CablingCheck(plan(), servers or ServerLldp())
        self.active: dict[str, str] = {}
        self.now = 0

    def report(self, switch: str, *neighbors: control_pb2.LldpNeighbor) -> Outcome:
        out = self.check.report(switch, neighbors, self.now, self.active)
        for f in out.raised:
            self.active.setdefault(f.alarm_id, f.message)
        for c in out.cleared:
            del self.active[c.alarm_id]
        return out


# -- switch to switch, as before -------------------------------------------------------------


def test_correct_switch_cabling_raises_nothing() -> None:
    f = Fabric()
    out = f.report("leaf-r3-b1", hears(7, "spine-2", "3"), hears(8, "spine-3", "3"))
    assert out.raised == [] and f.active == {}


def test_wrong_peer_port_names_both_ends() -> None:
    f = Fabric()
    (m,) = f.report("leaf-r3-b1", hears(7, "spine-2", "5")).raised
    assert (m.alarm_id, m.severity, m.kind, m.port) == (
        "miswire:leaf-r3-b1:7",
        "critical",
        "miswire",
        7,
    )
    assert m.message == "leaf-r3-b1 port 7 expected spine-2 port 3, sees spine-2 port 5"


def test_swapped_cables_flag_both_ports_and_unplanned_ports_too() -> None:
    f = Fabric()
    out = f.report(
        "leaf-r3-b1", hears(7, "spine-3", "3"), hears(8, "spine-2", "3"), hears(9, "spine-4", "x")
    )
    assert [m.message for m in out.raised] == [
        "leaf-r3-b1 port 7 expected spine-2 port 3, sees spine-3 port 3",
        "leaf-r3-b1 port 8 expected spine-3 port 3, sees spine-2 port 3",
        "leaf-r3-b1 port 9 is not cabled in the plan, sees spine-4 port 'x'",
    ]


def test_a_switch_link_alarm_stays_while_the_port_hears_nothing() -> None:
    f = Fabric()
    f.report("leaf-r3-b1", hears(7, "spine-3", "3"))
    assert f.report("leaf-r3-b1").cleared == []
    assert list(f.active) == ["miswire:leaf-r3-b1:7"]
    f.report("leaf-r3-b1", hears(7, "spine-2", "3"))
    assert f.active == {}


# -- servers -----------------------------------------------------------------------------------


def lldpd(name: str, port: int) -> control_pb2.LldpNeighbor:
    """What an agent reports for a captured lldpd frame heard on `port`."""
    table = NeighborTable()
    table.receive(port, bytes.fromhex(FRAMES[name]["frame"]), 1, 1)
    (neighbor,) = table.report(1).neighbors
    return neighbor


@pytest.mark.parametrize("frame", ["lab", "local", "default"])
def test_real_lldpd_frames_from_a_correctly_cabled_server_raise_nothing(frame: str) -> None:
    """lab: system name srv-b1-s1, port id `nic1` (ifname); local: the same as locally
    assigned ids; default: lldpd as installed, system name 'vm', port id the NIC's MAC."""
    f = Fabric()
    heard = lldpd(frame, 1)
    assert lldp_peer(heard, f.check.plan) == admin_pb2.Peer(kind=HOST, name="srv-b1-s1", nic="nic1")
    assert f.report("tor-r1-b1", heard).raised == []
    assert f.active == {}


def test_a_nic_in_the_wrong_rail_names_where_it_is_and_where_the_plan_has_it() -> None:
    f = Fabric()
    (m,) = f.report("tor-r5-b1", hears(1, "srv-b1-s1", "nic3")).raised
    assert m.alarm_id == "miswire:tor-r5-b1:1"
    assert m.message == (
        "srv-b1-s1 nic3 is cabled to tor-r5-b1 port 1; the plan says tor-r3-b1 port 1"
    )


def test_two_swapped_nics_raise_one_alarm_each_and_clear_when_put_back() -> None:
    f = Fabric(ServerLldp(expect=True, ttl_ns=30 * S))
    f.report("tor-r1-b1", hears(1, "srv-b1-s1", "nic1"), hears(2, "srv-b1-s2", "nic1"))
    f.report("tor-r2-b1", hears(1, "srv-b1-s1", "nic2"), hears(2, "srv-b1-s2", "nic2"))
    assert f.active == {}
    # The swap: both ports lose carrier (the agents forget the neighbours), then each ToR
    # hears the other NIC.
    f.now += S
    f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1"))
    f.report("tor-r2-b1", hears(2, "srv-b1-s2", "nic2"))
    f.now += S
    f.report("tor-r1-b1", hears(1, "srv-b1-s1", "nic2"), hears(2, "srv-b1-s2", "nic1"))
    f.report("tor-r2-b1", hears(1, "srv-b1-s1", "nic1"), hears(2, "srv-b1-s2", "nic2"))
    expected = {
        "miswire:tor-r1-b1:1": "srv-b1-s1 nic2 is cabled to tor-r1-b1 port 1; the plan says "
        "tor-r2-b1 port 1",
        "miswire:tor-r2-b1:1": "srv-b1-s1 nic1 is cabled to tor-r2-b1 port 1; the plan says "
        "tor-r1-b1 port 1",
    }
    assert f.active == expected
    # Reports repeat every second, long past any TTL: the same two, and no silent port (each
    # planned NIC is heard, if elsewhere).
    for _ in range(2):
        f.now += 60 * S
        f.report("tor-r1-b1", hears(1, "srv-b1-s1", "nic2"), hears(2, "srv-b1-s2", "nic1"))
        f.report("tor-r2-b1", hears(1, "srv-b1-s1", "nic1"), hears(2, "srv-b1-s2", "nic2"))
    assert f.active == expected
    f.report("tor-r1-b1", hears(1, "srv-b1-s1", "nic1"), hears(2, "srv-b1-s2", "nic1"))
    f.report("tor-r2-b1", hears(1, "srv-b1-s1", "nic2"), hears(2, "srv-b1-s2", "nic2"))
    assert f.active == {}


def test_a_nic_moved_to_an_unplanned_port_alarms_there_and_clears_once_unplugged() -> None:
    f = Fabric(ServerLldp(expect=True, ttl_ns=30 * S))
    f.report("tor-r3-b1", hears(9, "srv-b1-s1", "nic3"), hears(2, "srv-b1-s2", "nic3"))
    assert f.active == {
        "miswire:tor-r3-b1:9": "srv-b1-s1 nic3 is cabled to tor-r3-b1 port 9; the plan says "
        "tor-r3-b1 port 1"
    }
    # Its planned port stays quiet: the NIC is heard, just elsewhere.
    f.now += 100 * S
    f.report("tor-r3-b1", hears(9, "srv-b1-s1", "nic3"), hears(2, "srv-b1-s2", "nic3"))
    assert list(f.active) == ["miswire:tor-r3-b1:9"]
    (cleared,) = f.report("tor-r3-b1", hears(2, "srv-b1-s2", "nic3")).cleared
    assert cleared.alarm_id == "miswire:tor-r3-b1:9"
    assert f.active == {}


def test_a_server_or_a_switch_the_plan_does_not_have_is_named_as_it_names_itself() -> None:
    f = Fabric()
    out = f.report("tor-r1-b1", hears(1, "vm", "06:00:00:09:00:09"), hears(2, "spine-9", "4"))
    assert [m.message for m in out.raised] == [
        "tor-r1-b1 port 1 expected srv-b1-s1 nic1, sees vm port '06:00:00:09:00:09'",
        "tor-r1-b1 port 2 expected srv-b1-s2 nic1, sees spine-9 port 4",
    ]


def test_a_qualified_host_name_still_names_its_server() -> None:
    f = Fabric()
    assert f.report("tor-r1-b1", hears(1, "srv-b1-s1.cluster.example", "nic1")).raised == []


def test_silent_server_ports_alarm_only_when_expected_and_after_the_ttl() -> None:
    quiet = Fabric()
    for _ in range(3):
        quiet.now += 1000 * S
        assert quiet.report("tor-r1-b1").raised == []
    f = Fabric(ServerLldp(expect=True, ttl_ns=30 * S))
    f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1"))
    f.now += 29 * S
    assert f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1")).raised == []
    f.now += S
    (m,) = f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1")).raised
    assert (m.alarm_id, m.severity, m.kind) == ("lldp_silent:tor-r1-b1:1", "warning", "lldp_silent")
    assert (
        m.message
        == "tor-r1-b1 port 1 has heard no LLDP from srv-b1-s1 nic1, planned there, for 30 s"
    )
    (c,) = f.report("tor-r1-b1", lldpd("lab", 1), hears(2, "srv-b1-s2", "nic1")).cleared
    assert (c.alarm_id, c.why) == ("lldp_silent:tor-r1-b1:1", "LLDP heard from the planned NIC")
    assert f.active == {}


def test_no_silence_is_counted_while_the_switch_does_not_report() -> None:
    f = Fabric(ServerLldp(expect=True, ttl_ns=30 * S))
    f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1"))
    f.now += 300 * S  # no report meanwhile (the agent's session was down)
    assert f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1")).raised == []
    f.now += 30 * S
    assert [m.alarm_id for m in f.report("tor-r1-b1", hears(2, "srv-b1-s2", "nic1")).raised] == [
        "lldp_silent:tor-r1-b1:1"
    ]


def test_alarms_of_a_previous_plan_are_looked_at_again() -> None:
    """A restored alarm on a port the plan no longer uses clears at the switch's next report."""
    old = CablingCheck(plan(), ServerLldp())
    check = CablingCheck(plan(), ServerLldp(), flagged=[("tor-r1-b1", 7)], carry=old)
    active = {"miswire:tor-r1-b1:7": "tor-r1-b1 port 7 is not cabled in the plan, sees x"}
    (c,) = check.report("tor-r1-b1", [], 0, active).cleared
    assert c.alarm_id == "miswire:tor-r1-b1:7"


def test_lldp_status() -> None:
    nic = admin_pb2.Peer(kind=HOST, name="srv-b1-s1", nic="nic1")
    other = admin_pb2.Peer(kind=HOST, name="srv-b1-s1", nic="nic2")
    assert lldp_status(nic, nic) == admin_pb2.LLDP_STATUS_OK
    assert lldp_status(nic, other) == admin_pb2.LLDP_STATUS_MISWIRED
    assert lldp_status(nic, None) == admin_pb2.LLDP_STATUS_SILENT
    assert lldp_status(None, other) == admin_pb2.LLDP_STATUS_UNPLANNED


# -- in the decision core ------------------------------------------------------------------


def _server_ports(h: Harness, tor: str) -> dict[int, tuple[str, str]]:
    """port -> (server, NIC) the plan cables there."""
    out: dict[int, tuple[str, str]] = {}
    for n in h.core.views[tor].state.neighbors:
        if n.kind == HOST:
            server, _, nic = n.peer_name.partition("/")
            out[n.port] = (server, nic)
    return out


def _report(h: Harness, tor: str, heard: dict[int, tuple[str, str]]) -> None:
    msg = control_pb2.Neighbors(neighbors=[hears(p, s, n) for p, (s, n) in heard.items()])
    h.run(h.core.neighbors(tor, msg, h.now))


def test_the_core_raises_nothing_for_correct_servers_and_one_alarm_per_swapped_nic() -> None:
    h = Harness()
    tors = ("tor-r1-b1", "tor-r2-b1")
    planned = {tor: _server_ports(h, tor) for tor in tors}
    for tor in tors:
        _report(h, tor, planned[tor])
    assert h.core.alarms.active == {}
    # nic1 and nic2 of the server on port 1 trade places.
    port = 1
    server, nic1 = planned["tor-r1-b1"][port]
    _, nic2 = planned["tor-r2-b1"][port]
    _report(h, "tor-r1-b1", {**planned["tor-r1-b1"], port: (server, nic2)})
    _report(h, "tor-r2-b1", {**planned["tor-r2-b1"], port: (server, nic1)})
    assert {a.id: (a.kind, a.severity, a.message) for a in h.core.alarms.active.values()} == {
        "miswire:tor-r1-b1:1": (
            "miswire",
            "critical",
            f"{server} {nic2} is cabled to tor-r1-b1 port 1; the plan says tor-r2-b1 port 1",
        ),
        "miswire:tor-r2-b1:1": (
            "miswire",
            "critical",
            f"{server} {nic1} is cabled to tor-r2-b1 port 1; the plan says tor-r1-b1 port 1",
        ),
    }
    for tor in tors:
        _report(h, tor, planned[tor])
    assert h.core.alarms.active == {}


def test_the_intent_turns_silent_server_alarms_on(tmp_path: Path) -> None:
    fabric = tmp_path / "lab.yaml"
    fabric.write_text(LAB.read_text() + "lldp: {expect_servers: true, server_ttl_s: 20}\n")
    h = Harness(fabric)
    tor = "tor-r1-b1"
    planned = _server_ports(h, tor)
    quiet = min(planned)
    heard = {p: peer for p, peer in planned.items() if p != quiet}
    _report(h, tor, heard)
    h.advance(19 * S)
    _report(h, tor, heard)
    assert h.core.alarms.active == {}
    h.advance(S)
    _report(h, tor, heard)
    (alarm,) = h.core.alarms.active.values()
    assert alarm.id == f"lldp_silent:{tor}:{quiet}"
    _report(h, tor, planned)
    assert h.core.alarms.active == {}
