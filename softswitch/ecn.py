"""ECN marking for the traffic manager: where a frame's IPv4 ECN bits are, the RED-like marking
decision (`fabric_p4.ECN_MARKING`'s semantics) and the CE rewrite that keeps the IPv4 header
checksum right.

Thresholds are bytes of queue depth at enqueue; pmax is parts per million:
probability 0 below kmin, rising linearly to pmax at kmax, 1 above kmax. The comparison is the
one fabric.p4 makes (`r * (kmax - kmin) < pmax * (depth - kmin)`, r uniform in [0, 1e6)), so
the two targets mark alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PPM = 1_000_000

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_VLAN = 0x8100

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

_ETH_HLEN = 14
_VLAN_HLEN = 4
_IPV4_MIN_HLEN = 20


@dataclass(frozen=True, slots=True)
class EcnThresholds:
    """Marking thresholds of one (port, traffic class) queue."""

    kmin: int
    kmax: int
    pmax_ppm: int

    def __post_init__(self) -> None:
        if not 0 <= self.kmin <= self.kmax:
            raise ValueError(f"ECN thresholds: need 0 <= kmin <= kmax, got {self!r}")
        if not 0 <= self.pmax_ppm <= PPM:
            raise ValueError(f"ECN thresholds: pmax_ppm must be in 0..{PPM}, got {self!r}")


def ipv4_offset(frame: bytes | bytearray) -> int:
    """Offset of the IPv4 header in an Ethernet frame (untagged or one 802.1Q tag), or -1 when
    the frame carries no (complete) IPv4 header."""
    if len(frame) < _ETH_HLEN + _IPV4_MIN_HLEN:
        return -1
    ethertype = (frame[12] << 8) | frame[13]
    offset = _ETH_HLEN
    if ethertype == ETHERTYPE_VLAN:
        ethertype = (frame[16] << 8) | frame[17]
        offset += _VLAN_HLEN
    if ethertype != ETHERTYPE_IPV4 or len(frame) < offset + _IPV4_MIN_HLEN:
        return -1
    if frame[offset] >> 4 != 4:
        return -1
    return offset


def ect_ipv4_offset(frame: bytes | bytearray) -> int:
    """Offset of the IPv4 header when the frame is ECN-capable (ECT(0) or ECT(1)), else -1.
    CE frames are already marked and non-ECT frames must never be."""
    offset = ipv4_offset(frame)
    if offset < 0:
        return -1
    ecn = frame[offset + 1] & 0x3
    return offset if ecn in (ECN_ECT0, ECN_ECT1) else -1


def mark_ce(frame: bytes | bytearray, offset: int) -> bytes:
    """A copy of `frame` whose IPv4 header at `offset` has ECN = CE and a checksum updated
    incrementally (RFC 1624: HC' = ~(~HC + ~m + m'), m the header's first 16-bit word)."""
    old_word = (frame[offset] << 8) | frame[offset + 1]
    new_word = old_word | ECN_CE
    checksum = (frame[offset + 10] << 8) | frame[offset + 11]
    total = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    checksum = ~total & 0xFFFF
    out = bytearray(frame)
    out[offset + 1] = new_word & 0xFF
    out[offset + 10] = checksum >> 8
    out[offset + 11] = checksum & 0xFF
    return bytes(out)


def should_mark(depth: int, thresholds: EcnThresholds, rng: random.Random) -> bool:
    """The marking decision for an ECT frame arriving at a queue `depth` bytes deep."""
    if depth > thresholds.kmax:
        return True
    if depth < thresholds.kmin:
        return False
    span = thresholds.kmax - thresholds.kmin
    return rng.random() * PPM * span < thresholds.pmax_ppm * (depth - thresholds.kmin)
