"""Undo what checksum and VLAN offload leave in frames received on a raw socket.

A host in a namespace sending UDP/TCP through a veth leaves the L4 checksum to "hardware"
(CHECKSUM_PARTIAL): the frame reaches our AF_PACKET socket with only the pseudo-header sum in
the checksum field and TP_STATUS_CSUMNOTREADY in its PACKET_AUXDATA. A real switch would
forward a finished frame, so the data plane completes the checksum before the pipeline sees
the frame (bmv2 does not, which is why bmv2 labs turn offloads off). A VLAN tag the kernel
stripped into the auxdata is put back the same way.
"""

from __future__ import annotations

import struct

SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_CSUMNOTREADY = 1 << 3
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
FIXABLE_STATUS = TP_STATUS_CSUMNOTREADY | TP_STATUS_VLAN_VALID
AUXDATA = struct.Struct("=IIIHHHH")  # tp_status, len, snaplen, mac, net, vlan_tci, vlan_tpid
ETH_P_8021Q = 0x8100

_L4_CSUM_OFFSET = {6: 16, 17: 6}  # TCP, UDP


def complete_l4_checksum(frame: bytes) -> bytes:
    """`frame` with its IPv4 TCP/UDP checksum computed from the pseudo-header sum the sender
    left in the field; unchanged when it is not such a frame."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return frame
    ihl = (frame[14] & 0x0F) * 4
    l4 = 14 + ihl
    offset = _L4_CSUM_OFFSET.get(frame[23])
    total = (frame[16] << 8) | frame[17]
    end = 14 + total
    if offset is None or ihl < 20 or end > len(frame) or l4 + offset + 2 > end:
        return frame
    segment = frame[l4:end]
    if len(segment) % 2:
        segment += b"\x00"
    # One's complement sum of the 16-bit words (the field holds the pseudo-header sum):
    # 2**16 == 1 (mod 0xFFFF), so the big integer modulo 0xFFFF is that sum.
    folded = int.from_bytes(segment, "big") % 0xFFFF
    checksum = 0xFFFF - folded  # 0 is sent as 0xFFFF, as UDP requires
    pos = l4 + offset
    return frame[:pos] + checksum.to_bytes(2, "big") + frame[pos + 2 :]


def fix_received(frame: bytes, ancdata: list[tuple[int, int, bytes]]) -> bytes:
    """Apply what PACKET_AUXDATA says about `frame`: re-insert a stripped VLAN tag, complete a
    checksum left to offload."""
    for level, kind, data in ancdata:
        if level != SOL_PACKET or kind != PACKET_AUXDATA or len(data) < AUXDATA.size:
            continue
        status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(data)
        if status & TP_STATUS_CSUMNOTREADY:
            frame = complete_l4_checksum(frame)
        if status & TP_STATUS_VLAN_VALID:
            tag_type = tpid if status & TP_STATUS_VLAN_TPID_VALID and tpid else ETH_P_8021Q
            frame = frame[:12] + struct.pack("!HH", tag_type, tci) + frame[12:]
    return frame
