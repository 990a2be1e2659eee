"""LLDPDUs we send parse back to what we sent; anything malformed is counted, never raised."""

from __future__ import annotations

import pytest
from scapy.contrib.lldp import LLDPDU  # noqa: F401  (registers LLDP with scapy)
from scapy.layers.l2 import Ether

from agent.lldp import LldpError, NeighborChange, NeighborTable, build_lldp, parse_lldp

pytestmark = pytest.mark.unit

MAC = 0x02AA00000007
S = 1_000_000_000


def test_round_trip_and_an_independent_decoder_agrees() -> None:
    frame = build_lldp("leaf-r3-b1", 7, MAC, ttl_s=4)
    info = parse_lldp(frame)
    assert (info.chassis_id, info.port_id, info.system_name, info.ttl_s, info.src_mac) == (
        "leaf-r3-b1",
        "7",
        "leaf-r3-b1",
        4,
        MAC,
    )
    decoded = Ether(frame)  # scapy, a second opinion on the wire format
    assert decoded.dst == "01:80:c2:00:00:0e"
    assert decoded.type == 0x88CC
    assert decoded.src == "02:aa:00:00:00:07"
    assert b"leaf-r3-b1" in bytes(decoded.payload)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "shorter than an Ethernet header"),
        (bytes(12) + b"\x08\x00" + bytes(40), "not LLDP"),
        (bytes.fromhex("0180c200000e02aa0000000188cc") + b"\x02\x06\x07tor", "malformed"),
        (bytes.fromhex("0180c200000e02aa0000000188cc") + b"\xff" * 10, "malformed"),
        (bytes.fromhex("0180c200000e02aa0000000188cc"), "malformed"),
    ],
)
def test_malformed_frames_raise_only_lldp_error(frame: bytes, message: str) -> None:
    with pytest.raises(LldpError, match=message):
        parse_lldp(frame)


def test_table_counts_bad_frames_and_tracks_change_and_expiry() -> None:
    table = NeighborTable()
    assert table.receive(1, b"\x00garbage", 0, 0) is None
    assert table.receive(1, build_lldp("spine-1", 3, MAC, 4)[:-40], 0, 0) is None
    assert table.malformed == 2
    assert table.receive(1, build_lldp("spine-1", 3, MAC, 4), 100, 10 * S) is NeighborChange.NEW
    assert table.receive(1, build_lldp("spine-1", 3, MAC, 4), 200, 11 * S) is (
        NeighborChange.REFRESHED
    )
    assert table.receive(2, build_lldp("spine-2", 5, MAC, 2), 300, 11 * S) is NeighborChange.NEW
    assert table.receive(2, build_lldp("spine-2", 6, MAC, 2), 300, 11 * S) is (
        NeighborChange.CHANGED
    )
    report = table.report(12 * S)
    assert [
        (n.port, n.chassis_id, n.port_id, n.ttl_s, n.last_seen_wall_ns) for n in report.neighbors
    ] == [(1, "spine-1", "3", 4, 200), (2, "spine-2", "6", 2, 300)]
    # 2 s TTL on port 2 runs out first: a one-way failure candidate.
    assert table.expired(13 * S + 1) == [2]
    assert [n.port for n in table.report(13 * S + 1).neighbors] == [1]
    table.forget([2])
    assert table.expired(20 * S) == [1]


def test_build_refuses_what_lldp_cannot_carry() -> None:
    with pytest.raises(ValueError, match="TTL 0 s"):
        build_lldp("x", 1, MAC, 0)
    with pytest.raises(ValueError, match="does not fit"):
        build_lldp("x" * 300, 1, MAC, 4)
