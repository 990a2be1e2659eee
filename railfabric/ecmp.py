"""The ECMP hash and member choice, in the one place the controller's path prediction and
softswitch's data plane both take them from. `p4/fabric.p4` declares the same thing as
`action_selector(HashAlgorithm.crc32, ...)` over the same fields in the same order.

Measured on bmv2 (docs/bmv2.md): the selector hashes ipv4.src, ipv4.dst,
ipv4.protocol, l4 sport, l4 dport packed big-endian back to back (13 bytes) with CRC-32 as zlib
computes it, and picks `active_members[hash % len(active_members)]`, the active members ordered
by bmv2's member handle (creation order), not by P4Runtime member id. crc32 rather than crc16:
crc16 collapses RoCEv2 flows with consecutive UDP source ports onto two uplinks.

Collective-aware hashing (intent `ecmp.hash: five_tuple_qp`): RoCEv2 NICs often send every
queue pair of a NIC pair from one UDP source port, so the 5-tuple puts all of them on one
uplink. With the option on, the pipeline folds the BTH destination QP (24 bits) into 16 (low 16
bits XOR the top 8) and XORs it into the source port before hashing; the 13 hashed bytes keep
their layout, and a QP of 0 (or the option off) leaves them exactly the 5-tuple's.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Sequence
from typing import TypeVar

# ipv4.src, ipv4.dst (4 bytes each), ipv4.protocol (1), l4 sport, l4 dport (2 each).
_FIVE_TUPLE = struct.Struct("!IIBHH")

# RoCEv2's well-known UDP destination port.
ROCEV2_UDP_PORT = 4791
UDP_PROTOCOL = 17
QP_MAX = (1 << 24) - 1  # BTH destination QP: bit<24>


class HashFields(enum.Enum):
    """What the selector hashes: the intent's `ecmp.hash` values."""

    FIVE_TUPLE = "five_tuple"
    FIVE_TUPLE_QP = "five_tuple_qp"


def fold_qp(sport: int, dst_qp: int) -> int:
    """The source port hashed when the QP is mixed in (FabricIngress.hash_config)."""
    return sport ^ (dst_qp & 0xFFFF) ^ (dst_qp >> 16)


def hashed_sport(
    fields: HashFields, protocol: int, sport: int, dport: int, dst_qp: int | None
) -> int:
    """The L4 source port the selector sees. The QP counts only for a RoCEv2 packet (UDP to
    4791, where the parser extracts the BTH) and only when `fields` says so."""
    if (
        fields is HashFields.FIVE_TUPLE_QP
        and dst_qp is not None
        and protocol == UDP_PROTOCOL
        and dport == ROCEV2_UDP_PORT
    ):
        return fold_qp(sport, dst_qp)
    return sport


T = TypeVar("T")


def hash_input(src_ip: int, dst_ip: int, protocol: int, sport: int, dport: int) -> bytes:
    """The 13 bytes the selector hashes. Addresses are host-order integers."""
    return _FIVE_TUPLE.pack(src_ip, dst_ip, protocol, sport, dport)


def flow_hash(src_ip: int, dst_ip: int, protocol: int, sport: int, dport: int) -> int:
    """crc32 of the packed 5-tuple, as bmv2's HashAlgorithm.crc32 computes it."""
    return zlib.crc32(_FIVE_TUPLE.pack(src_ip, dst_ip, protocol, sport, dport))


def choose_member(flow_hash_value: int, live_members: Sequence[T]) -> T:
    """The member a flow takes: `live_members` must be in the target's member order
    (creation order) with members whose watch_port is down already left out."""
    if not live_members:
        raise ValueError("choose_member: the group has no live members")
    return live_members[flow_hash_value % len(live_members)]
