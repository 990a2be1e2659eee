"""Undo what checksum, segmentation and VLAN offload leave in frames received on a raw socket.

A host in a namespace sending UDP/TCP through a veth leaves work to "hardware" that a veth
never does: the L4 checksum (CHECKSUM_PARTIAL: only the pseudo-header sum is in the field) and,
for TCP, segmentation (one GSO super-frame of up to 64 KB instead of MTU-sized segments). A
real switch only ever sees finished, MTU-sized frames, so the data plane finishes them before
the pipeline sees them (bmv2 does not, which is why bmv2 labs turn offloads off):
- with PACKET_VNET_HDR, each frame comes with a virtio_net_hdr saying what is left to do
  (checksum start/offset, GSO type and segment size): `finish_vnet` does it;
- without it, PACKET_AUXDATA's TP_STATUS_CSUMNOTREADY marks a partial checksum of an IPv4
  TCP/UDP frame: `complete_l4_checksum`;
- a VLAN tag the kernel stripped into the auxdata is put back (`fix_received`).
"""

from __future__ import annotations

import struct

from railfabric.checksum import internet_checksum

SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_CSUMNOTREADY = 1 << 3
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
FIXABLE_STATUS = TP_STATUS_CSUMNOTREADY | TP_STATUS_VLAN_VALID
PACKET_VNET_HDR = 15
VNET_HDR = struct.Struct("=BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
VNET_HDR_LEN = VNET_HDR.size
VNET_F_NEEDS_CSUM = 1
GSO_NONE = 0
GSO_TCPV4 = 1
GSO_ECN = 0x80
TCP_FIN, TCP_PSH, TCP_CWR = 0x01, 0x08, 0x80
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
    # The field holds the pseudo-header sum; summing over it finishes the checksum.
    checksum = internet_checksum(frame[l4:end])
    pos = l4 + offset
    return frame[:pos] + checksum.to_bytes(2, "big") + frame[pos + 2 :]


def complete_checksum(frame: bytes, start: int, offset: int) -> bytes:
    """Finish a CHECKSUM_PARTIAL frame: the sum from `start` to the end, written at
    start + offset, where the sender left the pseudo-header sum."""
    pos = start + offset
    if start < 0 or pos + 2 > len(frame):
        return frame
    checksum = internet_checksum(frame[start:])
    return frame[:pos] + checksum.to_bytes(2, "big") + frame[pos + 2 :]


def segment_tcp4(frame: bytes, mss: int) -> list[bytes]:
    """Cut an IPv4/TCP GSO super-frame into segments of `mss` payload bytes, as a NIC does:
    sequence numbers, IP ids and lengths advanced, FIN/PSH only on the last, CWR only on the
    first, both checksums computed."""
    if len(frame) < 54 or frame[12:14] != b"\x08\x00" or mss <= 0:
        return [frame]
    ihl = (frame[14] & 0x0F) * 4
    tcp = 14 + ihl
    if len(frame) < tcp + 20 or frame[23] != 6:
        return [frame]
    doff = (frame[tcp + 12] >> 4) * 4
    payload = frame[tcp + doff :]  # a super-frame is never padded
    if len(payload) <= mss:
        return [complete_checksum(frame, tcp, 16)]
    ip_header = frame[14:tcp]
    tcp_header = frame[tcp : tcp + doff]
    seq = int.from_bytes(tcp_header[4:8], "big")
    ip_id = int.from_bytes(ip_header[4:6], "big")
    flags = tcp_header[13]
    addresses = ip_header[12:20]
    segments = []
    for index, off in enumerate(range(0, len(payload), mss)):
        chunk = payload[off : off + mss]
        seg_flags = flags if off + mss >= len(payload) else flags & ~(TCP_FIN | TCP_PSH)
        if index:
            seg_flags &= ~TCP_CWR
        iph = bytearray(ip_header)
        iph[2:4] = (ihl + doff + len(chunk)).to_bytes(2, "big")
        iph[4:6] = ((ip_id + index) & 0xFFFF).to_bytes(2, "big")
        iph[10:12] = b"\x00\x00"
        iph[10:12] = internet_checksum(bytes(iph)).to_bytes(2, "big")
        tcph = bytearray(tcp_header)
        tcph[4:8] = ((seq + off) & 0xFFFFFFFF).to_bytes(4, "big")
        tcph[13] = seg_flags
        tcph[16:18] = b"\x00\x00"
        pseudo = addresses + b"\x00\x06" + (doff + len(chunk)).to_bytes(2, "big")
        tcph[16:18] = internet_checksum(pseudo + bytes(tcph) + chunk).to_bytes(2, "big")
        segments.append(frame[:14] + bytes(iph) + bytes(tcph) + chunk)
    return segments


def finish_vnet(data: bytes) -> list[bytes]:
    """The finished frames of one received buffer that starts with a virtio_net_hdr."""
    flags, gso_type, _hdr_len, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(data)
    frame = data[VNET_HDR_LEN:]
    if gso_type & ~GSO_ECN == GSO_TCPV4:
        return segment_tcp4(frame, gso_size)
    if flags & VNET_F_NEEDS_CSUM:
        return [complete_checksum(frame, csum_start, csum_offset)]
    # Other GSO types (TCP over IPv6, UDP GSO): fabric.p4 drops IPv6, and hosts rarely use
    # UDP GSO; such frames go on as they are.
    return [frame]


def fix_received(frame: bytes, ancdata: list[tuple[int, int, bytes]], vnet: bool = False) -> bytes:
    """Apply what PACKET_AUXDATA says about `frame`: re-insert a stripped VLAN tag, and
    (without `vnet`, which handles it) complete a checksum left to offload."""
    for level, kind, data in ancdata:
        if level != SOL_PACKET or kind != PACKET_AUXDATA or len(data) < AUXDATA.size:
            continue
        status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(data)
        if status & TP_STATUS_CSUMNOTREADY and not vnet:
            frame = complete_l4_checksum(frame)
        if status & TP_STATUS_VLAN_VALID:
            tag_type = tpid if status & TP_STATUS_VLAN_TPID_VALID and tpid else ETH_P_8021Q
            frame = frame[:12] + struct.pack("!HH", tag_type, tci) + frame[12:]
    return frame
