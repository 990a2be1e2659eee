"""Protobuf's wire format, for the places that join serialized pieces into a message instead
of building every object (P4Runtime writes in the agent, table entries read from their bytes
in softswitch, desired states from cached parts in the controller)."""

from __future__ import annotations

import struct

_DOUBLE = struct.Struct("<d")

_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def varint(value: int) -> bytes:
    """`value` (>= 0) as a base-128 varint: lengths, field values, tags. Values of one and two
    bytes (most lengths and ids) skip the loop: pages of the admin API encode a few per
    item, hundreds of thousands per list."""
    if value < 0x4000:
        if value < 0x80:
            if value < 0:
                raise ValueError(f"varint of {value}: only values >= 0")
            return _ONE_BYTE[value]
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Wire types (protobuf's encoding.md): a varint, 64 bits (a double), or length-delimited
# (bytes, a sub-message).
_VARINT, _I64, _LEN = 0, 1, 2
# One-byte tags only: every field joined here is below 16.
_TAGS = {(n, t): bytes([n << 3 | t]) for n in range(1, 16) for t in (_VARINT, _I64, _LEN)}


def _tag(number: int, wire_type: int) -> bytes:
    tag = _TAGS.get((number, wire_type))
    if tag is None:
        raise ValueError(f"field number {number}: only 1..15 have one-byte tags")
    return tag


def uint_field(number: int, value: int) -> bytes:
    """Field `number` (1..15) holding the varint `value`."""
    return _tag(number, _VARINT) + varint(value)


def double_field(number: int, value: float) -> bytes:
    """Field `number` (1..15) holding the double `value`."""
    return _tag(number, _I64) + _DOUBLE.pack(value)


def uint_tag(number: int) -> bytes:
    """The tag of field `number` (1..15) holding a varint: for writing many values of it."""
    return _tag(number, _VARINT)


def len_tag(number: int) -> bytes:
    """The tag of field `number` (1..15) holding bytes or a sub-message: for joining it, the
    payload's length and the payload in one `join` where `len_field` costs too many copies."""
    return _tag(number, _LEN)


def len_field(number: int, payload: bytes) -> bytes:
    """Field `number` (1..15) holding `payload`: bytes, or a serialized sub-message."""
    return _tag(number, _LEN) + varint(len(payload)) + payload
