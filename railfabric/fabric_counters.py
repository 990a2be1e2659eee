"""How fabric.p4 lays out its counters indexed by more than the port, for the agent (which reads
them) and softswitch (which counts into them). The P4Info gives names and sizes
(railfabric/fabric_p4.py); the layout is in the program (p4/include/size.p4, define.p4) and
is written once more here, checked against the P4 sources by tests/unit/p4.

- `FabricIngress.drop_reason_counter`: index `port * DROP_REASONS_PER_PORT + reason`, one
  packet per frame dropped; `reason` is a `DropReason`, whose values are those of
  `railfabric.v1.DropReason` (proto/railfabric/v1/control.proto).
- `FabricIngress.roce_counter`: index `port * ROCE_CELLS_PER_PORT + traffic_class * ROCE_KINDS
  + kind`, one packet per RoCEv2 packet arriving; `kind` is a `RoceKind`, whose values are
  those of `railfabric.v1.RoceKind`.
- `FabricEgress.queue_depth_histogram`: index `port * QUEUE_DEPTH_LEVELS + level`, one packet
  per frame leaving the port, `level = min(deq_qdepth, QUEUE_DEPTH_LEVELS - 1)`.
"""

from __future__ import annotations

import enum
from typing import Final

PORTS: Final = 512  # PORT_COUNTER_SIZE: a port number is bit<9>
DROP_REASONS_PER_PORT: Final = 16  # drop_reason_t is bit<4>
QUEUE_DEPTH_LEVELS: Final = 64
ROCE_KINDS: Final = 8  # roce_kind_t is bit<3>
ROCE_CELLS_PER_PORT: Final = 64  # 8 traffic classes x ROCE_KINDS
# The clone session fabric.p4 copies sampled NAKs into (define.p4 NAK_SAMPLE_SESSION).
NAK_SAMPLE_SESSION: Final = 1


class DropReason(enum.IntEnum):
    """fabric.p4's drop_reason_t values (define.p4), equal to railfabric.v1.DropReason's."""

    UNSPECIFIED = 0
    NO_ROUTE = 1
    TTL_EXPIRED = 2
    ACL = 3
    NOT_IPV4 = 4
    NO_NEXT_HOP = 5
    MALFORMED = 6
    BAD_EGRESS_PORT = 7
    QUEUE_FULL = 8
    HEADROOM_FULL = 9
    PFC_WATCHDOG = 10
    KERNEL = 11


# What the program itself detects and counts (the rest is the target's to count, or not).
PIPELINE_REASONS: Final = (
    DropReason.NO_ROUTE,
    DropReason.TTL_EXPIRED,
    DropReason.ACL,
    DropReason.NOT_IPV4,
    DropReason.NO_NEXT_HOP,
    DropReason.MALFORMED,
)


class RoceKind(enum.IntEnum):
    """fabric.p4's roce_kind_t values (define.p4), equal to railfabric.v1.RoceKind's."""

    DATA = 1
    ACK = 2
    NAK_PSN_SEQUENCE = 3
    NAK_RNR = 4
    NAK_OTHER = 5
    CNP = 6


NAK_KINDS: Final = (RoceKind.NAK_PSN_SEQUENCE, RoceKind.NAK_RNR, RoceKind.NAK_OTHER)

# BTH opcodes fabric.p4 tells apart (define.p4): an AETH follows the two acknowledges.
BTH_OPCODE_ACK: Final = 0x11
BTH_OPCODE_ATOMIC_ACK: Final = 0x12
BTH_OPCODE_CNP: Final = 0x81


def roce_kind(opcode: int, syndrome: int) -> RoceKind:
    """fabric.p4 RoceSignals' kind of a RoCEv2 packet: a CNP by its opcode; an Acknowledge or
    Atomic Acknowledge by its AETH `syndrome` (type in bits 6:5: ACK 0, RNR NAK 1, NAK 3, the
    NAK's code in bits 4:0, 0 a PSN sequence error); any other opcode is data (`syndrome` is
    then not looked at)."""
    if opcode == BTH_OPCODE_CNP:
        return RoceKind.CNP
    if opcode not in (BTH_OPCODE_ACK, BTH_OPCODE_ATOMIC_ACK):
        return RoceKind.DATA
    kind = (syndrome >> 5) & 3
    if kind == 0:
        return RoceKind.ACK
    if kind == 1:
        return RoceKind.NAK_RNR
    if kind == 3 and syndrome & 0x1F == 0:
        return RoceKind.NAK_PSN_SEQUENCE
    return RoceKind.NAK_OTHER


def roce_index(port: int, traffic_class: int, kind: int) -> int:
    """The roce_counter cell of (port, traffic class, kind): also Counters.roce_cells'."""
    return port * ROCE_CELLS_PER_PORT + traffic_class * ROCE_KINDS + kind


def roce_cell(index: int) -> tuple[int, int, int]:
    """(port, traffic class, kind) of roce_counter cell `index`."""
    port, cell = divmod(index, ROCE_CELLS_PER_PORT)
    traffic_class, kind = divmod(cell, ROCE_KINDS)
    return port, traffic_class, kind


def drop_reason_index(port: int, reason: DropReason) -> int:
    return port * DROP_REASONS_PER_PORT + reason


def queue_depth_index(port: int, depth: int) -> int:
    """The histogram index a frame leaving `port` with `depth` behind it counts at."""
    return port * QUEUE_DEPTH_LEVELS + min(depth, QUEUE_DEPTH_LEVELS - 1)
