"""railfabric.protowire against protobuf's own encoder."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from railfabric.protowire import double_field, len_field, len_tag, uint_field, uint_tag, varint
from railfabric.v1 import admin_pb2, control_pb2, state_pb2


@given(st.integers(0, 2**64 - 1))
# Where the one- and two-byte shortcuts end.
@example(0)
@example(0x7F)
@example(0x80)
@example(0x3FFF)
@example(0x4000)
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
    assert len_tag(1) + varint(len(state.SerializeToString())) + state.SerializeToString() == wire


@given(st.floats(allow_nan=False))
def test_doubles_are_what_protobuf_writes(value: float) -> None:
    # LinkInfo.length_m is double field 4.
    info = admin_pb2.LinkInfo(length_m=value)
    assert admin_pb2.LinkInfo.FromString(double_field(4, value)) == info
    if value:  # protobuf leaves a zero out
        assert double_field(4, value) == info.SerializeToString()


def test_only_one_byte_tags() -> None:
    with pytest.raises(ValueError, match="field number 16"):
        uint_field(16, 1)


def test_no_negative_varint() -> None:
    with pytest.raises(ValueError, match="varint of -1"):
        varint(-1)


@given(st.integers(1, 15), st.integers(0, 2**64 - 1))
def test_a_uint_tag_and_varint_are_uint_field(number: int, value: int) -> None:
    assert uint_tag(number) + varint(value) == uint_field(number, value)
