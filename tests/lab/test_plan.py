"""Pure parts of the labs: the topology plan, percentiles and the traffic tools' flow format
(the loss-window arithmetic: test_judging.py). No namespaces, no processes."""

from __future__ import annotations

import pytest

from controller.intent import load_fabric
from mininet_labs.lab import LAB_LINK_SPEED_MBPS, Lab, lab_fabric
from mininet_labs.netlinks import TAG_RE, Names, new_tag
from mininet_labs.network import WIRE, FabricTopo, SoftSwitch
from mininet_labs.processes import REPO, Softswitch
from mininet_labs.report import percentile
from mininet_labs.topology import LabTopology
from mininet_labs.traffic import FlowSpec

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


def test_the_mininet_topo_is_the_plan_with_cables_through_the_wire_node() -> None:
    lab = Lab(REPO / "examples" / "lab-2rail.yaml", Softswitch())  # planned, not started
    topo = FabricTopo(lab.topology, lab, SoftSwitch)
    assert sorted(topo.hosts()) == lab.topology.hosts and len(topo.hosts()) == 4
    assert sorted(topo.switches()) == sorted([*(sw.name for sw in FABRIC.switches), WIRE])
    # 8 host cables, and each of the 8 switch cables as two links through the wire node
    links = topo.links(withInfo=True)
    assert len(links) == 8 + 2 * 8
    through_wire = [info for a, b, info in links if WIRE in (a, b)]
    assert len(through_wire) == 16
    ends = {(a, info["intfName1"]) for a, _, info in links}
    ends |= {(b, info["intfName2"]) for _, b, info in links}
    assert len(ends) == 2 * len(links)  # every interface once on its node


def test_lab_fabric_only_changes_link_speeds() -> None:
    original = load_fabric(REPO / "examples" / "lab-2rail.yaml")
    assert {ln.speed_mbps for ln in FABRIC.links} == {LAB_LINK_SPEED_MBPS}
    assert {n.speed_mbps for n in FABRIC.nics} == {LAB_LINK_SPEED_MBPS}
    assert [(n.ipv4, n.mac, n.switch, n.port) for n in FABRIC.nics] == [
        (n.ipv4, n.mac, n.switch, n.port) for n in original.nics
    ]
    assert [ln.key for ln in FABRIC.links] == [ln.key for ln in original.links]


def test_percentile_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([float(x) for x in range(1, 11)], 99) == 10.0
    assert percentile([float(x) for x in range(1, 101)], 99) == 99.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_flow_spec_round_trips_and_rejects_bad_text() -> None:
    f = FlowSpec(7, "10.0.0.2", "10.0.0.18", 49152, 4791, 106)
    assert FlowSpec.parse(str(f)) == f
    with_qp = FlowSpec(7, "10.0.0.2", "10.0.0.18", 49152, 4791, 106, dst_qp=0xABCDEF)
    assert FlowSpec.parse(str(with_qp)) == with_qp
    assert with_qp.bth[5:8] == bytes.fromhex("abcdef") and len(with_qp.bth) == 12
    assert FlowSpec.parse("7,10.0.0.2,10.0.0.18,49152,4791,106") == f
    with pytest.raises(ValueError, match="expected FLOW,SRC,DST,SPORT,DPORT,TOS"):
        FlowSpec.parse("7,10.0.0.2,10.0.0.18")
    # An Acknowledge: opcode 0x11, then the AETH's syndrome and MSN after the BTH.
    nak = FlowSpec(7, "10.0.0.2", "10.0.0.18", 49152, 4791, 106, dst_qp=5, syndrome=0x60)
    assert FlowSpec.parse(str(nak)) == nak
    assert nak.bth[0] == 0x11 and nak.bth[5:8] == bytes([0, 0, 5])
    assert nak.bth[12:] == bytes([0x60, 0, 0, 1])
    with pytest.raises(ValueError, match="not a byte"):
        _ = FlowSpec(7, "10.0.0.2", "10.0.0.18", 49152, 4791, 106, syndrome=256).bth
