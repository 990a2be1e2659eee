"""controller.object_wire against protobuf's own deterministic serialization: a digest hashes
each item's bytes, so the hand-written ones must be protobuf's to the byte."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from controller.object_wire import ObjectWire, route
from railfabric.v1 import state_pb2

pytestmark = pytest.mark.unit

UINT32 = st.integers(0, 2**32 - 1)
# MACs are 48 bits; a uint64 field takes any: across the 14-bit split both ways.
UINT64 = st.one_of(st.integers(0, 2**16), st.integers(0, 2**64 - 1))
NAMES = st.text(max_size=40)
# One encoder for every example: what it keeps from one item must not leak into the next.
WIRE = ObjectWire()


def _protobuf(
    msg: state_pb2.PortConfig | state_pb2.Neighbor | state_pb2.NextHopGroup | state_pb2.Route,
) -> bytes:
    return msg.SerializeToString(deterministic=True)


@given(UINT32, UINT64, UINT64, st.floats(allow_nan=False))
@example(0, 0, 0, 0.0)
@example(0, 0, 0, -0.0)  # protobuf writes -0.0: only +0.0 is the default
@example(1, 0x3FFF, 1, 1.0)
@example(1, 0x4000, 1, 1.0)
@example(511, 0x0200_0001_0000 | 511, 400_000, 30.0)
def test_ports_are_what_protobuf_writes(port: int, mac: int, speed: int, length: float) -> None:
    ours = WIRE.port(port, mac, speed, length)
    msg = state_pb2.PortConfig(port=port, mac=mac, speed_mbps=speed, cable_length_m=length)
    assert ours == _protobuf(msg)


@given(UINT32, NAMES, UINT32, UINT64)
@example(0, "", 0, 0)
@example(3, "spine-p1-1", 1, 0x020000050001)
@example(3, "é", 0x80, 0x4000)
def test_switch_neighbors_are_what_protobuf_writes(
    port: int, name: str, peer_port: int, peer_mac: int
) -> None:
    ours = WIRE.switch_neighbor(port, name, peer_port, peer_mac)
    msg = state_pb2.Neighbor(
        port=port,
        kind=state_pb2.PEER_KIND_SWITCH,
        peer_name=name,
        peer_port=peer_port,
        peer_mac=peer_mac,
    )
    assert ours == _protobuf(msg)


@given(UINT32, NAMES, UINT64, UINT32)
@example(0, "", 0, 0)
@example(1, "srv-b1-s1/nic1", 0x0A0000000002, 0x0A000002)
def test_host_neighbors_are_what_protobuf_writes(
    port: int, name: str, peer_mac: int, peer_ipv4: int
) -> None:
    ours = WIRE.host_neighbor(port, name, peer_mac, peer_ipv4)
    msg = state_pb2.Neighbor(
        port=port,
        kind=state_pb2.PEER_KIND_HOST,
        peer_name=name,
        peer_mac=peer_mac,
        peer_ipv4=peer_ipv4,
    )
    assert ours == _protobuf(msg)


HOPS = st.lists(st.tuples(UINT32, UINT64, UINT32), max_size=5)


@given(UINT32, HOPS)
@example(0, [])
@example(7, [(3, 0x020000050001, 1), (4, 0x020000060001, 1)])
@example(1, [(0, 0, 0)])  # a member of zeros is still a member: an empty entry
def test_groups_are_what_protobuf_writes(group_id: int, hops: list[tuple[int, int, int]]) -> None:
    ports, dmacs, weights = (tuple(h[i] for h in hops) for i in range(3))
    msg = state_pb2.NextHopGroup(id=group_id)
    for port, dmac, weight in hops:
        msg.next_hops.add(port=port, dmac=dmac, weight=weight)
    assert WIRE.group(group_id, ports, dmacs, weights) == _protobuf(msg)


@given(UINT32, st.integers(0, 32), UINT32)
@example(0, 0, 0)  # the default route: its prefix is set though empty
@example(0x0A000002, 32, 5)
def test_routes_are_what_protobuf_writes(address: int, length: int, group_id: int) -> None:
    msg = state_pb2.Route(group_id=group_id)
    msg.prefix.address, msg.prefix.length = address, length
    assert route(address, length, group_id) == _protobuf(msg)
