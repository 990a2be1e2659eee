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
