"""P4Runtime byte strings (spec §8.3/§8.4): encode canonically, decode with bit-width checks.

A P4Runtime value is a big-endian byte string. The canonical form has no leading zero bytes
(zero is one zero byte); servers return canonical strings and accept padded ones, but a value
that does not fit the field's bit width is INVALID_ARGUMENT (p4runtime-shell's bytes_utils
has the same rules on the client side). The softswitch checks widths with `decode`; the agent
reads back what a target returns with `decode_unchecked`, whatever padding it uses.
"""

from __future__ import annotations


class ValueWidthError(ValueError):
    """A byte string that is empty or does not fit its field's bit width."""


def encode(value: int) -> bytes:
    """The canonical byte string of a non-negative integer (shortest, at least one byte)."""
    if value < 0:
        raise ValueError(f"cannot encode negative value {value}")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(data: bytes, bitwidth: int, what: str) -> int:
    """The integer `data` encodes; `what` names the field in the error message."""
    if not data:
        raise ValueWidthError(f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise ValueWidthError(f"{what}: value 0x{data.hex()} does not fit in {bitwidth} bits")
    return value


def decode_unchecked(data: bytes) -> int:
    """The integer `data` encodes, with any padding and no width check (b"" is 0)."""
    return int.from_bytes(data, "big")


def is_canonical(data: bytes) -> bool:
    return data == b"\x00" or (len(data) > 0 and data[0] != 0)


def canonical(data: bytes) -> bytes:
    """`data` without its leading zero bytes (one zero byte for zero)."""
    stripped = data.lstrip(b"\x00")
    return stripped if stripped else b"\x00"
