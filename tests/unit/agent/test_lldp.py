"""LLDPDUs we send parse back to what we sent; anything malformed is counted, never raised."""

from __future__ import annotations

import json
from pathlib import Path

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


# -- what Debian's lldpd really sends (tests/data: captured from lldpd 1.0.16 on a veth) -------

FRAMES = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "lldpd_1.0.16_frames.json").read_text()
)["frames"]


@pytest.mark.parametrize(
    ("name", "chassis_id", "port_id", "system_name", "ttl_s"),
    [
        # As installed: MAC chassis id and port id, the host name, TTL 120, optional TLVs
        # (system description and capabilities, management addresses, 802.3 ones).
        ("default", "06:00:00:01:00:01", "06:00:00:01:00:01", "vm", 120),
        # The lab's configuration: system name set, `portidsubtype ifname`.
        ("lab", "06:00:00:01:00:01", "nic1", "srv-b1-s1", 4),
        # Locally assigned chassis and port ids.
        ("local", "srv-b1-s1", "nic1", "srv-b1-s1", 4),
        # lldpd stopping: a shutdown LLDPDU.
        ("shutdown", "06:00:00:01:00:01", "06:00:00:01:00:01", "", 0),
    ],
)
def test_real_lldpd_frames_parse_by_id_subtype(
    name: str, chassis_id: str, port_id: str, system_name: str, ttl_s: int
) -> None:
    info = parse_lldp(bytes.fromhex(FRAMES[name]["frame"]))
    assert (info.chassis_id, info.port_id, info.system_name, info.ttl_s) == (
        chassis_id,
        port_id,
        system_name,
        ttl_s,
    )
    assert info.src_mac == 0x060000010001


def _frame(chassis: tuple[int, bytes], port: tuple[int, bytes]) -> bytes:
    """An LLDPDU with these (subtype, value) ids, TTL 4 and no optional TLV."""
    pdu = b""
    for tlv_type, (subtype, value) in ((1, chassis), (2, port)):
        body = bytes([subtype]) + value
        pdu += (tlv_type << 9 | len(body)).to_bytes(2, "big") + body
    pdu += (3 << 9 | 2).to_bytes(2, "big") + (4).to_bytes(2, "big") + b"\x00\x00"
    return bytes.fromhex("0180c200000e02aa0000000188cc") + pdu


@pytest.mark.parametrize(
    ("chassis", "port", "expected"),
    [
        ((4, bytes.fromhex("0a0b0c0d0e0f")), (3, bytes.fromhex("f0e0d0c0b0a0")),
         ("0a:0b:0c:0d:0e:0f", "f0:e0:d0:c0:b0:a0")),
        ((5, bytes([1, 10, 0, 0, 2])), (4, bytes([2]) + bytes(15) + b"\x01"),
         ("10.0.0.2", "::1")),
        ((6, b"eth0"), (5, b"swp3"), ("eth0", "swp3")),
        ((2, b"uplink"), (1, b"to-spine"), ("uplink", "to-spine")),
        ((5, bytes([9, 1, 2])), (6, b"\x01\x02"), ("0x090102", "0x0102")),
        ((0, b"\xff"), (200, b"x"), ("0xff", "0x78")),
    ],
)  # fmt: skip
def test_ids_are_text_by_subtype(
    chassis: tuple[int, bytes], port: tuple[int, bytes], expected: tuple[str, str]
) -> None:
    info = parse_lldp(_frame(chassis, port))
    assert (info.chassis_id, info.port_id) == expected


def test_a_mac_id_of_the_wrong_length_is_malformed() -> None:
    with pytest.raises(LldpError, match="chassis id: a MAC address of 5 bytes"):
        parse_lldp(_frame((4, bytes(5)), (5, b"nic1")))


def test_a_shutdown_lldpdu_forgets_the_neighbour_at_once() -> None:
    table = NeighborTable()
    lab = bytes.fromhex(FRAMES["lab"]["frame"])
    assert table.receive(3, lab, 100, 10 * S) is NeighborChange.NEW
    assert table.receive(3, bytes.fromhex(FRAMES["shutdown"]["frame"]), 200, 11 * S) is (
        NeighborChange.GONE
    )
    assert table.report(11 * S).neighbors == []
    assert table.expired(100 * S) == []  # gone, not expired: no one-way failure
    assert table.receive(3, lab, 300, 12 * S) is NeighborChange.NEW
