"""IEEE 802.1Qbb priority-based flow control (PFC) PAUSE frames: build, parse, validate, and
the time a pause lasts.

A PFC frame is a MAC control frame: destination 01:80:c2:00:00:01, ethertype 0x8808, opcode
0x0101, a 16-bit class-enable vector (bit p set = the quanta for priority p is valid; the high
octet is reserved, zero), then eight 16-bit quanta, one per priority, padded to the 60-byte
minimum. A quantum is 512 bit-times at the link speed; 0 resumes the priority at once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

PFC_DST_MAC = bytes.fromhex("0180c2000001")
ETHERTYPE_MAC_CONTROL = 0x8808
OPCODE_PFC = 0x0101
OPCODE_PAUSE_8023X = 0x0001
NUM_PRIORITIES = 8
MAX_QUANTA = 0xFFFF
BIT_TIMES_PER_QUANTUM = 512
MIN_FRAME_LEN = 60  # without FCS

# dst, src, ethertype, opcode, class-enable vector, 8 quanta
_PFC = struct.Struct("!6s6sHHH8H")
PFC_LEN = _PFC.size  # 34 bytes before padding
_PAD = bytes(MIN_FRAME_LEN - PFC_LEN)


class PauseError(Enum):
    """Why a received MAC control frame is not a usable PFC PAUSE."""

    TOO_SHORT = "shorter than a PFC frame"
    NOT_MAC_CONTROL = "ethertype is not 0x8808"
    WRONG_DESTINATION = "destination is not 01:80:c2:00:00:01"
    NOT_PFC = "opcode is not 0x0101 (PFC)"
    RESERVED_BITS = "reserved class-enable bits are set"


class MalformedPause(ValueError):
    """A frame that is not a valid PFC PAUSE; `.reason` says why."""

    def __init__(self, reason: PauseError) -> None:
        super().__init__(f"malformed PFC frame: {reason.value}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PfcPause:
    """A parsed PFC PAUSE: the priorities it addresses and their quanta."""

    src_mac: bytes
    class_enable: int
    quanta: tuple[int, int, int, int, int, int, int, int]

    def priorities(self) -> list[int]:
        return [p for p in range(NUM_PRIORITIES) if self.class_enable >> p & 1]


def build_pause_frame(src_mac: bytes, class_enable: int, quanta: tuple[int, ...]) -> bytes:
    """A 60-byte PFC PAUSE from `src_mac` (the sending port's MAC)."""
    if len(src_mac) != 6:
        raise ValueError(f"PFC source MAC must be 6 bytes, got {src_mac!r}")
    if not 0 <= class_enable <= 0xFF:
        raise ValueError(f"PFC class-enable vector must be 0..255, got {class_enable}")
    if len(quanta) != NUM_PRIORITIES or not all(0 <= q <= MAX_QUANTA for q in quanta):
        raise ValueError(f"PFC needs 8 quanta in 0..65535, got {quanta!r}")
    head = _PFC.pack(PFC_DST_MAC, src_mac, ETHERTYPE_MAC_CONTROL, OPCODE_PFC, class_enable, *quanta)
    return head + _PAD


def pause_for(src_mac: bytes, priority: int, quanta: int) -> bytes:
    """A PAUSE addressing one priority (quanta 0: resume it)."""
    per_priority = [0] * NUM_PRIORITIES
    per_priority[priority] = quanta
    return build_pause_frame(src_mac, 1 << priority, tuple(per_priority))


def parse_pause_frame(frame: bytes | bytearray) -> PfcPause:
    """Parse and validate a received PFC PAUSE; raise MalformedPause saying what is wrong."""
    if len(frame) < PFC_LEN:
        raise MalformedPause(PauseError.TOO_SHORT)
    dst, src, ethertype, opcode, enable, *quanta = _PFC.unpack_from(frame)
    if ethertype != ETHERTYPE_MAC_CONTROL:
        raise MalformedPause(PauseError.NOT_MAC_CONTROL)
    if dst != PFC_DST_MAC:
        raise MalformedPause(PauseError.WRONG_DESTINATION)
    if opcode != OPCODE_PFC:
        raise MalformedPause(PauseError.NOT_PFC)
    if enable & 0xFF00:
        raise MalformedPause(PauseError.RESERVED_BITS)
    q0, q1, q2, q3, q4, q5, q6, q7 = quanta
    return PfcPause(src, enable, (q0, q1, q2, q3, q4, q5, q6, q7))


def quanta_to_ns(quanta: int, speed_bps: int) -> int:
    """How long `quanta` pause quanta last on a link of `speed_bps` (rounded up)."""
    bits = quanta * BIT_TIMES_PER_QUANTUM
    return -(-bits * 1_000_000_000 // speed_bps)
