"""Pure parts of the labs: the topology plan, the loss-window arithmetic, percentiles and the
traffic tools' flow format. No namespaces, no processes."""

from __future__ import annotations

import pytest

from controller.intent import load_fabric
from mininet_labs.lab import LAB_LINK_SPEED_MBPS, lab_fabric
from mininet_labs.netlinks import TAG_RE, Names, new_tag
from mininet_labs.processes import REPO
from mininet_labs.report import percentile
from mininet_labs.scenarios.failover import _loss
from mininet_labs.topology import LabTopology
from mininet_labs.traffic import FlowSpec, Packet

pytestmark = pytest.mark.unit

FABRIC = lab_fabric(load_fabric(REPO / "examples" / "lab-2rail.yaml"))


def test_plan_covers_every_port_with_short_unique_names() -> None:
    topo = LabTopology(FABRIC, Names(new_tag()))
    names: list[str] = []
    for sw in FABRIC.switches:
        ports = topo.switch_ports(sw.name)
        used = {n.port for n in FABRIC.nics if n.switch == sw.name}
        used |= {ln.a_port for ln in FABRIC.links if ln.a == sw.name}
        used |= {ln.b_port for ln in FABRIC.links if ln.b == sw.name}
        assert set(ports) == used
        names += ports.values()
    assert len(names) == len(set(names)) == 8 + 2 * 8  # host ports + both ends of 8 cables
    assert all(len(n) <= 15 and TAG_RE.match(n) for n in names)  # IFNAMSIZ; clean finds them
    assert len(topo.cables) == 8
    assert topo.topo.switches() and len(topo.topo.hosts()) == 4
    assert len(topo.topo.links()) == 8 + 8


def test_lab_fabric_only_changes_link_speeds() -> None:
    original = load_fabric(REPO / "examples" / "lab-2rail.yaml")
    assert {ln.speed_mbps for ln in FABRIC.links} == {LAB_LINK_SPEED_MBPS}
    assert {n.speed_mbps for n in FABRIC.nics} == {LAB_LINK_SPEED_MBPS}
    assert [(n.ipv4, n.mac, n.switch, n.port) for n in FABRIC.nics] == [
        (n.ipv4, n.mac, n.switch, n.port) for n in original.nics
    ]
    assert [ln.key for ln in FABRIC.links] == [ln.key for ln in original.links]


def _packets(seqs: list[int], interval_ns: int = 1_000_000) -> list[Packet]:
    return [Packet(0, s, s * interval_ns, s * interval_ns + 50_000, 0) for s in seqs]


def test_loss_window_is_the_lost_send_time() -> None:
    # 1 ms probe; datagrams 10..29 lost (20 ms), later 50..51 lost (2 ms).
    packets = _packets([*range(10), *range(30, 50), *range(52, 60)])
    assert _loss(packets, 0, 40_000_000, 1_000_000) == (20.0, 20)
    assert _loss(packets, 40_000_000, 60_000_000, 1_000_000) == (2.0, 2)
    assert _loss(packets, 0, 60_000_000, 1_000_000) == (22.0, 22)
    assert _loss(_packets(list(range(100))), 0, 10**9, 1_000_000) == (0.0, 0)


def test_percentile_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([float(x) for x in range(1, 11)], 99) == 10.0
    assert percentile([float(x) for x in range(1, 101)], 99) == 99.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_flow_spec_round_trips_and_rejects_bad_text() -> None:
    f = FlowSpec(7, "10.0.0.2", "10.0.0.18", 49152, 4791, 106)
    assert FlowSpec.parse(str(f)) == f
    with pytest.raises(ValueError, match="expected FLOW,SRC,DST,SPORT,DPORT,TOS"):
        FlowSpec.parse("7,10.0.0.2,10.0.0.18")
