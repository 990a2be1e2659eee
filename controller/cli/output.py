"""How railctl prints: aligned tables, one timestamp format, and JSON with the stable shape
docs/railctl-json.md describes.

JSON from a protobuf message (`to_json`) follows the message's fields, in declaration order,
with the .proto field names, and every field always present:
- an unset scalar is its zero (0, false, ""), an empty repeated field [];
- a message field not set, an `optional` scalar not set, and the members of a oneof that are
  not the chosen one are null;
- integers of every width are JSON numbers (not strings as in protobuf's JSON mapping);
- an enum is its value's name ("LINK_STATE_UP"), or its number when this railctl does not
  know it;
- MACs (`mac`, `*_mac`, `smac`, `dmac`) are "aa:bb:cc:dd:ee:ff" strings, IPv4 addresses
  (`*_ipv4`) dotted strings, an Ipv4Prefix "10.1.0.0/24";
- bytes are hex strings.
Times stay Unix nanoseconds (`*_wall_ns`) in JSON; tables show them with `when`.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from controller.fabric import ipv4_str, mac_str
from railfabric.v1 import state_pb2

_MAC_FIELDS = frozenset({"mac", "smac", "dmac"})
_INT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def when(wall_ns: int) -> str:
    """A Unix-ns time for people, with its date and zone: "2026-12-01 18:15:08.123 UTC"
    (milliseconds truncated). Every railctl table shows times this way; "-" for 0 (never)."""
    if not wall_ns:
        return "-"
    seconds, ns = divmod(wall_ns, 1_000_000_000)
    return f"{_second(seconds)}.{ns // 1_000_000:03d} UTC"


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    # Formatting a date was most of the time `railctl links` took to print ref-100k's
    # 135,168 links; their times share seconds (links come up together).
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns two spaces apart, the header first."""
    out = Table(header)
    out.add(rows)
    return out.lines()


class Table:
    """`table`, given its rows a batch at a time (a page of a long list while the next one
    comes): each batch is made strings and measured as it is added, and `lines` lays them
    out."""

    def __init__(self, header: Sequence[str]) -> None:
        self._cells: list[tuple[str, ...]] = [tuple(map(str, header))]
        self._widths = [len(c) for c in self._cells[0]]

    def add(self, rows: Iterable[Sequence[object]]) -> None:
        self.add_text([tuple(map(str, r)) for r in rows])

    def add_text(self, rows: list[tuple[str, ...]]) -> None:
        """`add` for rows made of strings already (`railctl links` makes 135,168 so)."""
        if rows:
            columns = zip(*rows, strict=True)
            self._widths = [
                max(w, *map(len, c)) for w, c in zip(self._widths, columns, strict=True)
            ]
            self._cells += rows

    def lines(self) -> list[str]:
        # One format for every row: a table of 135,168 links in a second, not three.
        line = "  ".join(f"{{:<{w}}}" for w in self._widths)
        return [line.format(*r).rstrip() for r in self._cells]


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2)


def to_json(msg: Message) -> Any:
    """`msg` as JSON-ready data by the rules above."""
    if isinstance(msg, state_pb2.Ipv4Prefix):
        return f"{ipv4_str(msg.address)}/{msg.length}"
    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.has_presence and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _value(field, value)
    return out


def _value(field: Any, value: Any) -> Any:
    # `field` is a FieldDescriptor (the upb runtime's own class, which the stubs type apart).
    kind = field.type
    if kind in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return to_json(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        known = enum.values_by_number.get(value) if enum is not None else None
        return known.name if known is not None else value
    if kind in _INT_TYPES:
        name = field.name
        if name in _MAC_FIELDS or name.endswith("_mac"):
            return mac_str(value)
        if name.endswith("_ipv4"):
            return ipv4_str(value)
        return int(value)
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return value if math.isfinite(value) else None
    if kind == FieldDescriptor.TYPE_BYTES:
        return bytes(value).hex()
    return value
