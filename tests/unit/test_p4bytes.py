"""railfabric.p4bytes: P4Runtime's canonical byte strings and bit-width checks."""

from __future__ import annotations

import pytest

from railfabric.p4bytes import (
    ValueWidthError,
    canonical,
    decode,
    decode_unchecked,
    encode,
    is_canonical,
)

pytestmark = pytest.mark.unit


def test_canonical_bytes() -> None:
    assert encode(0) == b"\x00"
    assert encode(3) == b"\x03"
    assert encode(0x88CC) == b"\x88\xcc"
    assert encode(0x020000001001) == bytes.fromhex("020000001001")
    assert decode_unchecked(b"\x00\x00\x88\xcc") == 0x88CC
    with pytest.raises(ValueError, match="negative"):
        encode(-1)


def test_decode_checks_the_bit_width_and_names_the_field() -> None:
    assert decode(b"\x00\x01\xff", 9, "port") == 0x1FF
    with pytest.raises(ValueWidthError, match=r"port: value 0x0200 does not fit in 9 bits"):
        decode(b"\x02\x00", 9, "port")
    with pytest.raises(ValueWidthError, match="port: empty byte string"):
        decode(b"", 9, "port")


def test_canonical_form_strips_leading_zeros() -> None:
    assert [is_canonical(b) for b in (b"\x00", b"\x01\x00", b"\x00\x01", b"")] == [
        True,
        True,
        False,
        False,
    ]
    assert canonical(b"\x00\x00\x01\x00") == b"\x01\x00"
    assert canonical(b"\x00\x00") == b"\x00"
