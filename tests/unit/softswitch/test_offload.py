"""Completing checksums left to offload and re-inserting stripped VLAN tags."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from softswitch.offload import (
    AUXDATA,
    PACKET_AUXDATA,
    SOL_PACKET,
    TP_STATUS_CSUMNOTREADY,
    TP_STATUS_VLAN_VALID,
    complete_l4_checksum,
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
