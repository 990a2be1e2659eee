"""Path prediction reproduces bmv2's measured member choices (200 vectors, all live and with a
member down), agrees with the routes under failures, and `railctl path` prints it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path as FsPath

import pytest

from controller.cli import railctl
from controller.fabric import parse_ipv4
from controller.intent import load_fabric, load_fabric_text
from controller.path import Flow, PathError, predict_path
from controller.routing import FabricRouting, Group, LinkEvent
from railfabric import ecmp

pytestmark = pytest.mark.unit

REPO = FsPath(__file__).resolve().parents[3]
VECTORS = json.loads((REPO / "tests/data/bmv2_ecmp_crc32_vectors.json").read_text())

# tor-a holds 10.1.0.1 and has 4 uplinks on ports 2..5 (the vectors' group); tor-b 10.2.0.9.
VECTOR_FABRIC = (
    """\
name: vectors
rails: 1
switches:
  - {name: tor-a, role: tor, rail: 1, prefix: 10.0.0.0/15}
  - {name: tor-b, role: tor, rail: 1, prefix: 10.2.0.0/24}
  - {name: spine-1, role: spine}
  - {name: spine-2, role: spine}
  - {name: spine-3, role: spine}
  - {name: spine-4, role: spine}
links:
"""
    + "".join(
        f'  - {{a: "tor-{t}:{i + 1}", b: "spine-{i}:{j}", speed: 100G, length_m: 10}}\n'
        for j, t in ((1, "a"), (2, "b"))
        for i in range(1, 5)
    )
    + """\
hosts:
  - name: src
    nics: [{name: nic1, rail: 1, ipv4: 10.1.0.1, switch: tor-a, port: 1, speed: 100G, length_m: 2}]
  - name: dst
    nics: [{name: nic1, rail: 1, ipv4: 10.2.0.9, switch: tor-b, port: 1, speed: 100G, length_m: 2}]
"""
)


def vector_creation_order(switch: str, group: Group) -> Sequence[int]:
    if switch == "tor-a":
        return [m["port"] for m in VECTORS["members_in_creation_order"]]
    return group.ports


@pytest.mark.parametrize("port3_down", [False, True], ids=["all-live", "port3-down"])
def test_prediction_reproduces_the_bmv2_vectors(port3_down: bool) -> None:
    fabric = load_fabric_text(VECTOR_FABRIC, "vectors.yaml")
    down = [LinkEvent("tor-a", 3, up=False)] if port3_down else []
    routing = FabricRouting(fabric, down=down)
    assert [m["port"] for m in VECTORS["members_in_creation_order"]] == [4, 2, 5, 3]
    key = "egress_port_with_port3_down" if port3_down else "egress_port_all_live"
    assert len(VECTORS["flows"]) == 200
    for v in VECTORS["flows"]:
        flow = Flow(parse_ipv4(v["src"]), parse_ipv4(v["dst"]), v["proto"], v["sport"], v["dport"])
        args = (flow.src_ip, flow.dst_ip, flow.proto, flow.sport, flow.dport)
        assert ecmp.hash_input(*args).hex() == v["hash_input_hex"]
        path = predict_path(routing, flow, vector_creation_order)
        assert path.hash == v["crc32"]
        first = path.hops[0]
        assert (first.switch, first.ingress_port) == ("tor-a", 1)
        assert first.egress_port == v[key], v
        assert first.live_members == (3 if port3_down else 4)
        assert path.delivered_to == "dst/nic1"


def test_paths_follow_routes_and_avoid_failed_links() -> None:
    fabric = load_fabric(REPO / "examples/lab-2rail.yaml")
    healthy = FabricRouting(fabric)
    failed = FabricRouting(fabric, down=[LinkEvent("tor-r1-b1", 3, up=False)])
    src, dst = parse_ipv4("10.0.0.2"), parse_ipv4("10.0.0.18")  # rail 1, block 1 -> block 2
    used: set[int] = set()
    for sport in range(49152, 49152 + 64):
        flow = Flow(src, dst, 17, sport, 4791)
        path = predict_path(healthy, flow)
        assert path.hops[0].switch == "tor-r1-b1"
        assert path.delivered_to == "srv-b2-s1/nic1"
        assert len(path.hops) == 3
        used.add(path.hops[0].egress_port)
        # The member chosen is the data plane's choice over ascending ports.
        first = path.hops[0]
        assert first.egress_port == ecmp.choose_member(
            flow.hash(ecmp.HashFields.FIVE_TUPLE), [3, 4]
        )
        after = predict_path(failed, flow)
        assert after.hops[0].egress_port == 4
        assert after.delivered_to == "srv-b2-s1/nic1"
    assert used == {3, 4}, "consecutive RoCEv2 source ports spread over both uplinks"


def test_same_tor_flow_crosses_one_switch() -> None:
    fabric = load_fabric(REPO / "examples/lab-2rail.yaml")
    path = predict_path(
        FabricRouting(fabric), Flow(parse_ipv4("10.0.0.2"), parse_ipv4("10.0.0.3"), 17, 1, 4791)
    )
    assert [(h.switch, h.ingress_port, h.egress_port) for h in path.hops] == [("tor-r1-b1", 1, 2)]


def test_unreachable_and_bad_flows_say_why() -> None:
    fabric = load_fabric(REPO / "examples/lab-2rail.yaml")
    routing = FabricRouting(fabric)
    with pytest.raises(PathError, match=r"source 10\.9\.9\.9 is not a NIC of the fabric"):
        predict_path(routing, Flow(parse_ipv4("10.9.9.9"), parse_ipv4("10.0.0.3"), 17, 1, 1))
    with pytest.raises(PathError, match=r"source port 70000 is outside 0\.\.65535"):
        Flow(1, 2, 17, 70000, 1)
    path = predict_path(routing, Flow(parse_ipv4("10.0.0.2"), parse_ipv4("192.168.0.1"), 17, 1, 1))
    assert path.delivered_to is None
    assert path.error == "tor-r1-b1 has no route to 192.168.0.1: dropped"


def test_railctl_path_prints_hops(capsys: pytest.CaptureFixture[str]) -> None:
    lab = str(REPO / "examples/lab-2rail.yaml")
    rc = railctl.main(
        [
            "--json",
            "path",
            lab,
            "10.0.0.2",
            "10.0.0.18",
            "--sport",
            "49152",
            "--down",
            "tor-r1-b1:3",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["delivered_to"] == "srv-b2-s1/nic1"
    assert data["hops"][0]["switch_name"] == "tor-r1-b1" and data["hops"][0]["egress_port"] == 4
    rc = railctl.main(["path", lab, "10.0.0.2", "10.0.0.18", "--sport", "49152", "--qp", "17"])
    out = capsys.readouterr().out
    assert (
        rc == 0 and "tor-r1-b1" in out and "delivered to srv-b2-s1/nic1" in out and "qp 17" in out
    )
    rc = railctl.main(["path", lab, "10.0.0.2", "10.0.0.18", "--sport", "1", "--down", "nope:1"])
    assert rc == 1
    assert "unknown switch 'nope'" in capsys.readouterr().err


def test_railctl_path_wants_fabric_src_dst(capsys: pytest.CaptureFixture[str]) -> None:
    lab = str(REPO / "examples/lab-2rail.yaml")
    assert railctl.main(["path", lab, "10.0.0.2", "10.0.0.3", "extra", "--sport", "1"]) == 2
    assert "expected [FABRIC] SRC DST" in capsys.readouterr().err


def test_weighted_group_counts_member_copies() -> None:
    from tests.unit.controller.test_routing import WEIGHTED  # noqa: PLC0415

    fabric = load_fabric_text(WEIGHTED, "weighted.yaml")
    routing = FabricRouting(fabric)
    seen: dict[int, int] = {}
    for sport in range(300):
        flow = Flow(parse_ipv4("10.1.0.2"), parse_ipv4("10.2.0.5"), 17, sport, 4791)
        path = predict_path(routing, flow)
        hop = path.hops[0]
        assert hop.live_members == 3  # port 2 once, the 800G port 3 twice
        assert hop.egress_port == [2, 3, 3][flow.hash(ecmp.HashFields.FIVE_TUPLE) % 3]
        seen[hop.egress_port] = seen.get(hop.egress_port, 0) + 1
    assert seen[3] > seen[2]
