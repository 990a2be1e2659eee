"""softswitch's action selector reproduces every flow bmv2 chose (tests/data vectors): members
created in the vector's order, the group listing them in another order, with all members live
and with port 3's carrier lost (watch_port), through the whole pipeline model."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import finsy as fy
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import fabric_p4 as p4
from softswitch.pipeline import Pipeline
from tests.unit.softswitch.conftest import Apply

pytestmark = pytest.mark.unit

VECTORS = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "bmv2_ecmp_crc32_vectors.json").read_text()
)
ROUTER_MAC = "00:00:00:00:aa:01"


def _hop_mac(port: int) -> str:
    return f"00:00:00:00:bb:{port:02x}"


def _install_vector_group(apply: Apply) -> None:
    members = [
        fy.P4ActionProfileMember(
            p4.ECMP_SELECTOR,
            member_id=m["member_id"],
            action=fy.P4TableAction(
                p4.SET_NEXTHOP,
                port=m["port"],
                smac=ROUTER_MAC,
                dmac=_hop_mac(m["port"]),
            ),
        )
        for m in VECTORS["members_in_creation_order"]
    ]
    port_of = {m["member_id"]: m["port"] for m in VECTORS["members_in_creation_order"]}
    group = fy.P4ActionProfileGroup(
        p4.ECMP_SELECTOR,
        group_id=7,
        members=[
            fy.P4Member(mid, weight=(1, port_of[mid]))
            for mid in VECTORS["group_member_ids_as_written"]
        ],
    )
    route = fy.P4TableEntry(
        p4.ROUTING_V4,
        match=fy.P4TableMatch(ipv4_dst="10.0.0.0/8"),
        action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=100),
    )
    nxt = fy.P4TableEntry(
        p4.NEXT,
        match=fy.P4TableMatch(next_id=100),
        action=fy.P4IndirectAction(group_id=7),
    )
    codes = apply(*(+m for m in members), +group, +route, +nxt)
    assert all(c == 0 for c in codes), codes


def _frame(flow: dict[str, Any]) -> bytes:
    assert flow["proto"] == 17
    return bytes(
        Ether(dst=ROUTER_MAC, src="00:00:00:00:cc:01")
        / IP(src=flow["src"], dst=flow["dst"], ttl=64)
        / UDP(sport=flow["sport"], dport=flow["dport"])
        / (b"\x00" * 12 + b"payload")
    )


def test_vectors_are_for_this_hash() -> None:
    flow = VECTORS["flows"][0]
    packed = (
        ipaddress.IPv4Address(flow["src"]).packed
        + ipaddress.IPv4Address(flow["dst"]).packed
        + bytes([flow["proto"]])
        + flow["sport"].to_bytes(2, "big")
        + flow["dport"].to_bytes(2, "big")
    )
    assert packed.hex() == flow["hash_input_hex"]


def test_every_vector_all_members_live(pipeline: Pipeline, apply: Apply) -> None:
    _install_vector_group(apply)
    for port in (2, 3, 4, 5):
        pipeline.set_carrier(port, True)
    assert len(VECTORS["flows"]) == 200
    for flow in VECTORS["flows"]:
        out = pipeline.process(_frame(flow), 1)
        assert out is not None, flow
        assert out.port == flow["egress_port_all_live"], flow


def test_every_vector_with_port3_down(pipeline: Pipeline, apply: Apply) -> None:
    _install_vector_group(apply)
    pipeline.set_carrier(3, False)
    moved = 0
    for flow in VECTORS["flows"]:
        out = pipeline.process(_frame(flow), 1)
        assert out is not None, flow
        assert out.port == flow["egress_port_with_port3_down"], flow
        moved += flow["egress_port_all_live"] != flow["egress_port_with_port3_down"]
    assert moved > 0
    # Carrier back: the original choice returns with no write.
    pipeline.set_carrier(3, True)
    for flow in VECTORS["flows"][:20]:
        out = pipeline.process(_frame(flow), 1)
        assert out is not None and out.port == flow["egress_port_all_live"]


def test_forwarded_frame_is_rewritten_with_valid_checksum(pipeline: Pipeline, apply: Apply) -> None:
    _install_vector_group(apply)
    flow = VECTORS["flows"][0]
    out = pipeline.process(_frame(flow), 1)
    assert out is not None
    pkt = Ether(bytes(out.frame))
    assert pkt.src == ROUTER_MAC
    assert pkt.dst == _hop_mac(out.port)
    assert pkt[IP].ttl == 63
    checksum = pkt[IP].chksum
    del pkt[IP].chksum
    assert Ether(bytes(pkt))[IP].chksum == checksum


def test_every_vector_through_a_one_shot_action_set(pipeline: Pipeline, apply: Apply) -> None:
    """The same choices from a one-shot set listing the actions in creation order, with
    watch_port on each action (P4Runtime ActionProfileAction.watch_port)."""
    action_set = [
        (
            (1, m["port"]),
            fy.P4TableAction(
                p4.SET_NEXTHOP,
                port=m["port"],
                smac=ROUTER_MAC,
                dmac=_hop_mac(m["port"]),
            ),
        )
        for m in VECTORS["members_in_creation_order"]
    ]
    route = fy.P4TableEntry(
        p4.ROUTING_V4,
        match=fy.P4TableMatch(ipv4_dst="10.0.0.0/8"),
        action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=100),
    )
    nxt = fy.P4TableEntry(
        p4.NEXT,
        match=fy.P4TableMatch(next_id=100),
        action=fy.P4IndirectAction(action_set),
    )
    assert apply(+route, +nxt) == [0, 0]
    for flow in VECTORS["flows"]:
        out = pipeline.process(_frame(flow), 1)
        assert out is not None and out.port == flow["egress_port_all_live"], flow
    pipeline.set_carrier(3, False)
    for flow in VECTORS["flows"]:
        out = pipeline.process(_frame(flow), 1)
        assert out is not None and out.port == flow["egress_port_with_port3_down"], flow
