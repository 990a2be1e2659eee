"""Small intent-level states shared by the agent's tests."""

from __future__ import annotations

from railfabric.digest import state_digest
from railfabric.v1 import state_pb2

SPINE_MACS = {1: 0x02_00_00_00_10_01, 2: 0x02_00_00_00_10_02}
HOST_MAC = 0x02_00_00_00_20_03


def port_mac(port: int) -> int:
    return 0x02_AA_00_00_00_00 | port


def tor_state(generation: int = 1) -> state_pb2.DesiredState:
    """A ToR with two uplinks (ports 1, 2) and one host (port 3)."""
    state = state_pb2.DesiredState(switch_name="tor-r0-b0", generation=generation)
    for port in (1, 2, 3):
        state.ports.add(port=port, mac=port_mac(port), speed_mbps=400_000, cable_length_m=3)
    for port, mac in SPINE_MACS.items():
        state.neighbors.add(
            port=port,
            kind=state_pb2.PEER_KIND_SWITCH,
            peer_name=f"spine-{port}",
            peer_port=1,
            peer_mac=mac,
        )
    state.neighbors.add(
        port=3,
        kind=state_pb2.PEER_KIND_HOST,
        peer_name="srv-b0-s0/nic0",
        peer_mac=HOST_MAC,
        peer_ipv4=0x0A000003,
    )
    up = state.groups.add(id=1)
    for port, mac in sorted(SPINE_MACS.items()):
        up.next_hops.add(port=port, dmac=mac, weight=1)
    host = state.groups.add(id=2)
    host.next_hops.add(port=3, dmac=HOST_MAC, weight=1)
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0, length=0), group_id=1)
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000003, length=32), group_id=2)
    state.dscp_map.add(dscp=26, traffic_class=3)
    state.dscp_map.add(dscp=48, traffic_class=6)
    state.ecn.add(port=1, traffic_class=3, kmin_bytes=100_000, kmax_bytes=400_000, pmax_ppm=200_000)
    state.pfc.add(port=1, priority=3, xoff_bytes=300_000, xon_bytes=200_000, headroom_bytes=90_000)
    state.digest = state_digest(state)
    return state


def with_matrix(state: state_pb2.DesiredState) -> state_pb2.DesiredState:
    """`state` (a ToR's) with a traffic matrix: its host port 3 counted, two destination
    classes (its own prefix and another ToR's)."""
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.matrix.source_ports.append(3)
    out.matrix.classes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000000, length=29), dst_class=0)
    out.matrix.classes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000008, length=29), dst_class=1)
    out.digest = state_digest(out)
    return out


def with_nak_sampling(
    state: state_pb2.DesiredState, interval_us: int = 10_000
) -> state_pb2.DesiredState:
    """`state` (a ToR's) with its host port 3's NAKs sampled every `interval_us`."""
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.nak_sampling.ports.append(3)
    out.nak_sampling.interval_us = interval_us
    out.digest = state_digest(out)
    return out
