"""railctl's fast JSON (controller/cli/output.py): `dumps` writes exactly what
`json.dumps(data, indent=2)` writes, and `to_json`, which reads each message type's fields from
a plan made once, gives what reading every field's descriptor each time gives (the rules of
docs/railctl-json.md, written out here as the reference)."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cli.output import dumps, to_json
from controller.fabric import ipv4_str, mac_str
from railfabric.v1 import admin_pb2, control_pb2, state_pb2, store_pb2

pytestmark = pytest.mark.unit


class Kind(enum.IntEnum):
    ONE = 1


class Word(enum.StrEnum):
    UP = "up"


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**80)
    | st.floats()  # NaN and the infinities too: json writes NaN, Infinity, -Infinity
    | st.text()
    | st.sampled_from([Kind.ONE, Word.UP])
)
_KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=4)
    ),
    max_leaves=40,
)


@given(_VALUES)
@settings(max_examples=400)
def test_dumps_writes_what_json_dumps_writes_with_an_indent_of_2(value: Any) -> None:
    assert dumps(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value", [{1, 2}, b"x", object(), [1, {"a": {2j}}], {(1, 2): 3}])
def test_dumps_refuses_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises(TypeError) as refused:
        json.dumps(value, indent=2)
    with pytest.raises(TypeError) as ours:
        dumps(value)
    assert type(ours.value) is type(refused.value)


def reference(msg: Message) -> Any:
    """docs/railctl-json.md's rules, read from the descriptors for every field."""
    if isinstance(msg, state_pb2.Ipv4Prefix):
        return f"{ipv4_str(msg.address)}/{msg.length}"
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.is_repeated:
            out[field.name] = [_reference_value(field, v) for v in value]
        elif field.has_presence and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _reference_value(field, value)
    return out


def _reference_value(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return reference(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.cpp_type in _MAX:  # every integer type
        if field.name in ("mac", "smac", "dmac") or field.name.endswith("_mac"):
            return mac_str(value)
        if field.name.endswith("_ipv4"):
            return ipv4_str(value)
        return int(value)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return value if math.isfinite(value) else None
    if field.type == FieldDescriptor.TYPE_BYTES:
        return bytes(value).hex()
    return value


_MAX = {
    FieldDescriptor.CPPTYPE_INT32: 2**31 - 1,
    FieldDescriptor.CPPTYPE_INT64: 2**63 - 1,
    FieldDescriptor.CPPTYPE_UINT32: 2**32 - 1,
    FieldDescriptor.CPPTYPE_UINT64: 2**64 - 1,
}


def _fill(draw: st.DrawFn, msg: Message, depth: int) -> None:
    """Set a random part of `msg`'s fields, messages `depth` levels down."""
    for field in msg.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth == 0:
                continue
            if field.is_repeated:
                for _ in range(draw(st.integers(0, 2))):
                    _fill(draw, getattr(msg, field.name).add(), depth - 1)
            else:
                child = getattr(msg, field.name)
                child.SetInParent()
                _fill(draw, child, depth - 1)
            continue
        values = [draw(_scalar(field)) for _ in range(draw(st.integers(0, 2)))]
        if field.is_repeated:
            getattr(msg, field.name).extend(values)
        elif values:
            setattr(msg, field.name, values[0])


def _scalar(field: Any) -> st.SearchStrategy[Any]:
    cpp = field.cpp_type
    if field.type == FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from([*numbers, 99])  # 99: a value this railctl does not know
    if cpp in _MAX:
        low = 0 if cpp in (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64) else -1
        return st.integers(low * (_MAX[cpp] + 1), _MAX[cpp])
    if cpp == FieldDescriptor.CPPTYPE_DOUBLE:
        return st.floats()
    if cpp == FieldDescriptor.CPPTYPE_FLOAT:
        return st.floats(width=32)
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=4)
    return st.text(max_size=4)


_TYPES = [
    admin_pb2.LinkInfo,
    admin_pb2.Event,
    admin_pb2.Finding,
    admin_pb2.Interface,
    control_pb2.PortCounters,
    control_pb2.TargetHealth,
    control_pb2.AgentMessage,
    state_pb2.DesiredState,
    store_pb2.StoreStaged,  # a bytes field
]


@st.composite
def messages(draw: st.DrawFn) -> Message:
    msg: Message = draw(st.sampled_from(_TYPES))()
    _fill(draw, msg, depth=3)
    return msg


@given(messages())
@settings(max_examples=300)
def test_to_json_reads_every_field_as_its_descriptor_says(msg: Message) -> None:
    assert to_json(msg) == reference(msg)
    # Asked again: the plan made the first time gives the same.
    assert to_json(msg) == reference(msg)
