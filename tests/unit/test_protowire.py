"""railfabric.protowire against protobuf's own encoder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from railfabric.protowire import varint
from railfabric.v1 import state_pb2


@given(st.integers(0, 2**64 - 1))
def test_varint_is_what_protobuf_writes(value: int) -> None:
    # NextHop.dmac is a uint64 field number 2: tag 0x10, then the varint.
    encoded = state_pb2.NextHop(dmac=value).SerializeToString()
    if value:
        assert encoded == b"\x10" + varint(value)
    assert varint(value)[-1] < 0x80
    assert all(b >= 0x80 for b in varint(value)[:-1])
