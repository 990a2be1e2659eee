"""Finishing what offload left undone: partial checksums, GSO super-frames cut into segments,
stripped VLAN tags re-inserted."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from softswitch.offload import (
    AUXDATA,
    GSO_TCPV4,
    PACKET_AUXDATA,
    SOL_PACKET,
    TP_STATUS_CSUMNOTREADY,
    TP_STATUS_VLAN_VALID,
    VNET_F_NEEDS_CSUM,
    VNET_HDR,
    complete_l4_checksum,
    finish_vnet,
    fix_received,
)

pytestmark = pytest.mark.unit


def _pseudo_sum(pkt: Ether) -> int:
    ip = pkt[IP]
    l4_len = ip.len - ip.ihl * 4
    words = (*struct.unpack("!4H", bytes(ip)[12:20]), int(ip.proto), int(l4_len))
    total: int = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


@pytest.mark.parametrize("l4", [UDP(sport=1, dport=4791), TCP(sport=5, dport=80, flags="S")])
@pytest.mark.parametrize("payload", [b"", b"x", b"hello world" * 37])
def test_partial_checksum_is_completed(l4: UDP | TCP, payload: bytes) -> None:
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / l4 / payload
    good = bytes(pkt)
    partial = Ether(good)
    layer = partial[UDP] if UDP in partial else partial[TCP]
    layer.chksum = _pseudo_sum(partial)
    assert complete_l4_checksum(bytes(partial)) == good


def test_non_ip_and_icmp_frames_are_untouched() -> None:
    arp_like = bytes(Ether(type=0x0806) / (b"\x00" * 28))
    assert complete_l4_checksum(arp_like) == arp_like
    icmp = bytes(Ether() / IP(proto=1) / b"\x08\x00\x00\x00")
    assert complete_l4_checksum(icmp) == icmp
    assert complete_l4_checksum(b"\x00" * 5) == b"\x00" * 5


def test_stripped_vlan_tag_is_put_back() -> None:
    inner = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP())
    aux = AUXDATA.pack(TP_STATUS_VLAN_VALID, len(inner), len(inner), 0, 0, 42, 0)
    fixed = fix_received(inner, [(SOL_PACKET, PACKET_AUXDATA, aux)])
    assert Ether(fixed)[Dot1Q].vlan == 42
    assert Ether(fixed)[UDP].dport == Ether(inner)[UDP].dport


def test_auxdata_without_flags_changes_nothing() -> None:
    frame = bytes(Ether() / IP() / UDP())
    aux = AUXDATA.pack(0, len(frame), len(frame), 0, 0, 0, 0)
    assert fix_received(frame, [(SOL_PACKET, PACKET_AUXDATA, aux)]) == frame
    aux = AUXDATA.pack(TP_STATUS_CSUMNOTREADY, len(frame), len(frame), 0, 0, 0, 0)
    assert Ether(fix_received(frame, [(SOL_PACKET, PACKET_AUXDATA, aux)]))[UDP].chksum


def test_gso_super_frame_is_cut_like_a_nic() -> None:
    payload = bytes(range(256)) * 20  # 5120 bytes
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.1.1", dst="10.0.2.1", id=100, flags="DF")
        / TCP(sport=40000, dport=5001, seq=1000, ack=5, flags="PA")
        / payload
    )
    super_frame = Ether(bytes(pkt))
    super_frame[TCP].chksum = _pseudo_sum(super_frame)  # left to offload, like the kernel
    hdr = VNET_HDR.pack(VNET_F_NEEDS_CSUM, GSO_TCPV4, 66, 1448, 34, 16)
    segments = [Ether(s) for s in finish_vnet(hdr + bytes(super_frame))]
    assert [len(s[TCP].payload) for s in segments] == [1448, 1448, 1448, 776]
    assert b"".join(bytes(s[TCP].payload) for s in segments) == payload
    assert [s[TCP].seq for s in segments] == [1000, 2448, 3896, 5344]
    assert [s[IP].id for s in segments] == [100, 101, 102, 103]
    assert [str(s[TCP].flags) for s in segments] == ["A", "A", "A", "PA"]
    for seg in segments:
        ip_sum, tcp_sum = seg[IP].chksum, seg[TCP].chksum
        del seg[IP].chksum, seg[TCP].chksum, seg[IP].len
        rebuilt = Ether(bytes(seg))
        assert (rebuilt[IP].chksum, rebuilt[TCP].chksum) == (ip_sum, tcp_sum)


def test_vnet_partial_checksum_and_plain_frames() -> None:
    good = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=7, dport=9) / b"data")
    partial = Ether(good)
    partial[UDP].chksum = _pseudo_sum(partial)
    hdr = VNET_HDR.pack(VNET_F_NEEDS_CSUM, 0, 0, 0, 34, 6)
    assert finish_vnet(hdr + bytes(partial)) == [good]
    assert finish_vnet(VNET_HDR.pack(0, 0, 0, 0, 0, 0) + good) == [good]
