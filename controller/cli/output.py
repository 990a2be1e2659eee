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
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _string
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
    """What `json.dumps(data, indent=2)` writes. Python's C encoder takes no indent, and its
    Python one took 2.5 s over the JSON of ref-100k's 135,168 links (1.1 s here, in process).
    Scalars as that encoder writes them (strings ASCII-escaped, floats by repr, NaN and the
    infinities as NaN, Infinity, -Infinity), keys converted as it converts them."""
    out: list[str] = []
    _emit(data, "\n", out)
    return "".join(out)


def _scalar(value: Any) -> str | None:
    """A scalar as json writes it; None for a list or dict (or what json refuses)."""
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


def _float(value: float) -> str:
    if value != value:  # noqa: PLR0124  (NaN)
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: Any) -> str:
    """A dict key as json converts it (a str subclass stays as it is)."""
    if isinstance(key, str):
        return key
    text = _scalar(key) if key is None or isinstance(key, int | float) else None
    if text is None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
    return text


def _emit(value: Any, newline: str, out: list[str]) -> None:
    """`value` at the indent `newline` holds (a newline and the spaces of its level). The
    common scalars inside a container are written in its loop, without a call each."""
    text = _scalar(value)
    if text is not None:
        out.append(text)
        return
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        head = "{" + inner
        for key, item in value.items():
            name = _string(key if type(key) is str else _key(key))
            kind = type(item)
            if kind is str:
                out.append(f"{head}{name}: {_string(item)}")
            elif kind is int:
                out.append(f"{head}{name}: {int.__repr__(item)}")
            elif item is None:
                out.append(f"{head}{name}: null")
            else:
                out.append(f"{head}{name}: ")
                _emit(item, inner, out)
            head = "," + inner
        out.append(newline + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        head = "[" + inner
        for item in value:
            kind = type(item)
            if kind is str:
                out.append(head + _string(item))
            elif kind is int:
                out.append(head + int.__repr__(item))
            else:
                out.append(head)
                _emit(item, inner, out)
            head = "," + inner
        out.append(newline + "]")
    elif type(value) is Written:
        out.append(value.text)
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


@dataclass(frozen=True, slots=True)
class Written:
    """Elements of a JSON list, written as `dumps` writes them where they go (`written`):
    `dumps` puts the text in as it is. railctl writes a long list's pages so, each while the
    next page comes."""

    text: str


def written(items: Sequence[Any], depth: int) -> Written | None:
    """`items`, elements of a list `depth` levels into the data (the list of a dict given to
    `dumps` is at depth 1, its elements at 2), as `dumps` writes them there; None for none."""
    if not items:
        return None
    newline = "\n" + "  " * depth
    out: list[str] = []
    for item in items:
        if out:
            out.append("," + newline)
        _emit(item, newline, out)
    return Written("".join(out))


# A message type's fields as `to_json` reads them: name, how (_PLAIN, _REPEATED, _PRESENCE: a
# field that reads null when unset), and the conversion of a value (None: as it is).
_PLAIN, _REPEATED, _PRESENCE = 0, 1, 2
_Plan = tuple[tuple[str, int, Callable[[Any], Any] | None], ...]


def to_json(msg: Message) -> Any:
    """`msg` as JSON-ready data by the rules above."""
    if isinstance(msg, state_pb2.Ipv4Prefix):
        return f"{ipv4_str(msg.address)}/{msg.length}"
    out: dict[str, Any] = {}
    for name, how, convert in _plan(msg.DESCRIPTOR):
        value = getattr(msg, name)
        if how == _REPEATED:
            out[name] = list(value) if convert is None else [convert(v) for v in value]
        elif how == _PRESENCE and not msg.HasField(name):
            out[name] = None
        else:
            out[name] = value if convert is None else convert(value)
    return out


@functools.cache
def _plan(descriptor: Any) -> _Plan:
    # Made once per message type: reading each field's descriptor for every message took 2.8 s
    # over ref-100k's 135,168 links (0.9 s with the plan, in process).
    return tuple(
        (
            field.name,
            _REPEATED if field.is_repeated else _PRESENCE if field.has_presence else _PLAIN,
            _converter(field),
        )
        for field in descriptor.fields
    )


def _converter(field: Any) -> Callable[[Any], Any] | None:
    # `field` is a FieldDescriptor (the upb runtime's own class, which the stubs type apart).
    kind = field.type
    if kind in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return to_json
    if kind == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        by_number = enum.values_by_number if enum is not None else {}
        names = {number: value.name for number, value in by_number.items()}
        return lambda value: names.get(value, value)
    if kind in _INT_TYPES:
        name = field.name
        if name in _MAC_FIELDS or name.endswith("_mac"):
            return mac_str
        if name.endswith("_ipv4"):
            return ipv4_str
        return None  # a Python int already, whatever the width
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return lambda value: value if math.isfinite(value) else None
    if kind == FieldDescriptor.TYPE_BYTES:
        return lambda value: bytes(value).hex()
    return None
