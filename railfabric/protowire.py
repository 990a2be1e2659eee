"""Protobuf's wire format, for the places that join serialized pieces into a message instead
of building every object (P4Runtime writes in the agent, table entries read from their bytes
in softswitch, desired states from cached parts in the controller)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """`value` (>= 0) as a base-128 varint: lengths, field values, tags."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Wire types (protobuf's encoding.md): a varint, or length-delimited (bytes, a sub-message).
_VARINT, _LEN = 0, 2


def _tag(number: int, wire_type: int) -> bytes:
    if not 0 < number < 16:  # one-byte tags only: every field joined here is below 16
        raise ValueError(f"field number {number}: only 1..15 have one-byte tags")
    return bytes([number << 3 | wire_type])


def uint_field(number: int, value: int) -> bytes:
    """Field `number` (1..15) holding the varint `value`."""
    return _tag(number, _VARINT) + varint(value)


def len_field(number: int, payload: bytes) -> bytes:
    """Field `number` (1..15) holding `payload`: bytes, or a serialized sub-message."""
    return _tag(number, _LEN) + varint(len(payload)) + payload
