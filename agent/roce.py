"""RoCEv2 NAKs the switch copies to the agent (fabric.p4 RoceSignals: at most one per sampled
port per interval), parsed into `NakSample`s and kept until the next counter report. Pure.

The frame is parsed here, by its offsets, as fabric.p4's parser does: Ethernet, IPv4 without
options, UDP to 4791, the BTH, and for an Acknowledge the AETH. What is not such a NAK is not a
sample (the packet-in may be LLDP, or a frame from an older program).
"""

from __future__ import annotations

import struct
from typing import Final

from railfabric import ecmp
from railfabric.fabric_counters import NAK_KINDS, roce_kind
from railfabric.v1 import control_pb2

# At most this many samples ride in one counter report; more are counted as dropped.
MAX_NAK_SAMPLES: Final = 256

_ETH_TYPE = 12
_IPV4 = 14
_UDP = _IPV4 + 20
_BTH = _UDP + 8
_AETH = _BTH + 12
_MIN_LEN = _AETH + 4
_IPV4_AND_UDP = struct.Struct("!BB6xBB2xII")  # version/ihl, dscp/ecn, ..., ttl, proto, src, dst
_PORTS = struct.Struct("!HH")


def parse_nak(frame: bytes, port: int, wall_ns: int) -> control_pb2.NakSample | None:
    """The NAK `frame` is, as a NakSample, or None when it is not a RoCEv2 NAK."""
    if len(frame) < _MIN_LEN or frame[_ETH_TYPE : _ETH_TYPE + 2] != b"\x08\x00":
        return None
    vihl, tos, _ttl, proto, src, dst = _IPV4_AND_UDP.unpack_from(frame, _IPV4)
    if vihl != 0x45 or proto != ecmp.UDP_PROTOCOL:
        return None
    sport, dport = _PORTS.unpack_from(frame, _UDP)
    if dport != ecmp.ROCEV2_UDP_PORT:
        return None
    syndrome = frame[_AETH]
    kind = roce_kind(frame[_BTH], syndrome)
    if kind not in NAK_KINDS:
        return None
    return control_pb2.NakSample(
        port=port,
        src_ipv4=src,
        dst_ipv4=dst,
        udp_sport=sport,
        dst_qp=int.from_bytes(frame[_BTH + 5 : _BTH + 8], "big"),
        psn=int.from_bytes(frame[_BTH + 9 : _BTH + 12], "big"),
        kind=control_pb2.RoceKind.ValueType(kind),
        syndrome=syndrome,
        dscp=tos >> 2,
        wall_ns=wall_ns,
    )


class NakSamples:
    """The samples received since the last report, at most MAX_NAK_SAMPLES of them."""

    def __init__(self) -> None:
        self.samples: list[control_pb2.NakSample] = []
        self.dropped = 0
        # Since the agent started (its metrics): every sample, and those not reported.
        self.received = 0
        self.dropped_total = 0

    def add(self, sample: control_pb2.NakSample) -> None:
        self.received += 1
        if len(self.samples) < MAX_NAK_SAMPLES:
            self.samples.append(sample)
        else:
            self.dropped += 1
            self.dropped_total += 1

    def take(self, report: control_pb2.Counters) -> None:
        """Move what was kept into `report`, and start again."""
        report.nak_samples.extend(self.samples)
        report.nak_samples_dropped = self.dropped
        self.samples = []
        self.dropped = 0
