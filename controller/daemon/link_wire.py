"""A link as the admin API shows it (admin.proto's LinkInfo), serialized by hand: pages of
ListLinks and GetTopology join these, 135,168 of them on ref-100k. Building each as a message,
or parsing a cached one to set its observed fields, then sizing and copying it into its page,
took twice as long; a parser takes fields in any order, so the observed fields are appended to
the plan's."""

from __future__ import annotations

from collections.abc import Sequence

from controller.core.clock import Now
from controller.core.links import LinkState
from controller.core.machine import DecisionCore, link_state_message
from controller.core.planner import PlannedLink
from railfabric.protowire import double_field, len_field, len_tag, uint_field, varint
from railfabric.v1 import admin_pb2

_LinkInfo = admin_pb2.LinkInfo
_A, _B = len_tag(_LinkInfo.A_FIELD_NUMBER), len_tag(_LinkInfo.B_FIELD_NUMBER)
_INT64 = (1 << 64) - 1  # a negative int64 is its two's complement as a varint
_STATE_FIELDS = {
    s: uint_field(_LinkInfo.STATE_FIELD_NUMBER, link_state_message(s)) for s in LinkState
}


class PlannedWires:
    """The part of each link's LinkInfo the plan fixes (its ends, speed and length), made on
    first use: making them all at once would hold up the first page. What many links share is
    encoded once: a switch's name (its ~30-60 links), a port number, a speed and length."""

    __slots__ = ("_links", "_names", "_ports", "_tails", "_wires")

    def __init__(self, links: Sequence[PlannedLink]) -> None:
        self._links = links
        self._wires: list[bytes | None] = [None] * len(links)
        self._names: dict[str, bytes] = {}
        self._ports: dict[int, bytes] = {}
        self._tails: dict[tuple[int, float], bytes] = {}

    def __getitem__(self, pos: int) -> bytes:
        wire = self._wires[pos]
        if wire is None:
            wire = self._wires[pos] = self._make(self._links[pos])
        return wire

    def _make(self, link: PlannedLink) -> bytes:
        tail = self._tails.get((link.speed_mbps, link.length_m))
        if tail is None:
            tail = self._tails[link.speed_mbps, link.length_m] = _tail(link)
        a, b = self._end(*link.a), self._end(*link.b)
        return b"".join((_A, varint(len(a)), a, _B, varint(len(b)), b, tail))

    def _end(self, switch: str, port: int) -> bytes:
        name = self._names.get(switch)
        if name is None:
            number = admin_pb2.LinkEnd.SWITCH_NAME_FIELD_NUMBER
            name = self._names[switch] = len_field(number, switch.encode())
        if not port:
            return name
        field = self._ports.get(port)
        if field is None:
            field = self._ports[port] = uint_field(admin_pb2.LinkEnd.PORT_FIELD_NUMBER, port)
        return name + field


def _tail(link: PlannedLink) -> bytes:
    """A link's speed and length fields (each left out when 0; a length of -0.0 too)."""
    out = b""
    if link.speed_mbps:
        out += uint_field(_LinkInfo.SPEED_MBPS_FIELD_NUMBER, link.speed_mbps)
    if link.length_m:
        out += double_field(_LinkInfo.LENGTH_M_FIELD_NUMBER, link.length_m)
    return out


class SinceFields:
    """Links' since_wall_ns fields as shown at `at`, each encoded once: the links that changed
    together (a switch's Hello brings up its ~30 links at once) share their since, and its
    9-byte varint was the costliest part of a page of links."""

    __slots__ = ("_at", "_memo")

    def __init__(self, at: Now) -> None:
        self._at = at
        self._memo: dict[int, bytes] = {}

    def __call__(self, since_mono_ns: int) -> bytes:
        field = self._memo.get(since_mono_ns)
        if field is None:
            wall = self._at.wall_of(since_mono_ns) & _INT64
            field = uint_field(_LinkInfo.SINCE_WALL_NS_FIELD_NUMBER, wall)
            self._memo[since_mono_ns] = field
        return field


def link_info_wire(core: DecisionCore, key: str, planned: bytes, since: SinceFields) -> bytes:
    """A link's LinkInfo: its planned part (`PlannedWires`) with its state as routing sees it."""
    state, since_ns, flaps = core.tracker.shown(key)
    out = planned + _STATE_FIELDS[state]
    # 0 (left out) for a link whose state never changed: unknown since the start.
    if since_ns:
        out += since(since_ns)
    if flaps:
        out += uint_field(_LinkInfo.FLAPS_FIELD_NUMBER, flaps)
    if reason := core.link_reason(key):
        out += len_field(_LinkInfo.REASON_FIELD_NUMBER, reason.encode())
    if (d := core.drains.get(key)) is not None:
        out += len_field(_LinkInfo.DRAIN_FIELD_NUMBER, core.drain_message(d).SerializeToString())
    return out
