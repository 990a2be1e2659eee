"""railfabric.protowire against protobuf's own encoder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from railfabric.protowire import len_field, uint_field, varint
from railfabric.v1 import control_pb2, state_pb2


@given(st.integers(0, 2**64 - 1))
def test_varint_is_what_protobuf_writes(value: int) -> None:
    # NextHop.dmac is a uint64 field number 2: tag 0x10, then the varint.
    encoded = state_pb2.NextHop(dmac=value).SerializeToString()
    if value:
        assert encoded == b"\x10" + varint(value)
    assert varint(value)[-1] < 0x80
    assert all(b >= 0x80 for b in varint(value)[:-1])


@given(st.integers(0, 2**64 - 1), st.binary(max_size=300))
def test_fields_are_what_protobuf_writes(value: int, payload: bytes) -> None:
    # NextHop.dmac is uint64 field 2; ControllerMessage.desired_state is field 1, a message.
    assert state_pb2.NextHop.FromString(uint_field(2, value)).dmac == value
    state = state_pb2.DesiredState(switch_name=payload.hex())
    wire = control_pb2.ControllerMessage(desired_state=state).SerializeToString()
    assert len_field(1, state.SerializeToString()) == wire


def test_only_one_byte_tags() -> None:
    with pytest.raises(ValueError, match="field number 16"):
        uint_field(16, 1)
