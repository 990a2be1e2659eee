"""The digest of a switch's desired state: how a controller and an agent prove, without
sending the state, that they hold the same thing (DesiredState.digest, StateDelta.digest,
Hello.applied_digest, Applied.digest).

What is hashed. Every object of the state is hashed on its own: SHA-256 of a tag naming its
kind ("switch", "port", "neighbor", "group", "route", "dscp", "ecn", "pfc", "watchdog", "ecmp",
"matrix", "naks", "probing"),
a NUL byte, then the object's `SerializeToString(deterministic=True)` ("switch" hashes
switch_name as UTF-8; "watchdog" only when pfc_watchdog is set; "ecmp" hashes the EcmpHash
value's name, only when it is not the zero value, so states without the option digest as they
did before it existed; "matrix" hashes a ToR's TrafficMatrix whole, only when it is set;
"naks" hashes a ToR's NakSampling whole, only when it is set, so a state without it digests as
before it existed; "probing" hashes the Probing whole, targets in their order (the order the
agent probes them in), only when it is set, likewise). The
tag keeps, say, a port and an ECN entry with equal bytes apart; the NUL keeps every tag from
being a prefix of another. Generation and the digest field are not objects, so they are not
covered. Order inside an object is content: a group's next hops are hashed in the order they
have (the canonical ascending-port order).

Why a sum. The digest is the sum modulo 2**256 of the object hashes (a multiset hash), so the
order of repeated fields never matters, no sorted copy is needed, and a change of a few objects
updates it by subtracting their old hashes and adding the new ones (railfabric.delta). It is a
consistency check between cooperating peers, not a defence against a forger.

Versioning. A digest is written "v2:" and 64 lowercase hex digits. A peer with a different
scheme (v1 was a bare hex SHA-256 of a sorted copy) never compares equal, so a mismatch only
makes the agent ask for a snapshot; and a state whose digest is not v2 is digested afresh.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypeVar, get_args

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from railfabric.v1 import state_pb2

DIGEST_VERSION: Final = 2

Tag = Literal[
    "switch",
    "port",
    "neighbor",
    "group",
    "route",
    "dscp",
    "ecn",
    "pfc",
    "watchdog",
    "ecmp",
    "matrix",
    "naks",
    "probing",
]

_PREFIX: Final[dict[str, bytes]] = {tag: tag.encode("ascii") + b"\x00" for tag in get_args(Tag)}
_MASK: Final = (1 << 256) - 1
_HEADER: Final = f"v{DIGEST_VERSION}:"
_FORMAT: Final = re.compile(rf"{_HEADER}[0-9a-f]{{64}}")

M = TypeVar("M", bound=Message)


def object_hash(tag: Tag, obj: Message | str) -> int:
    """One object's contribution to a digest: SHA-256 of tag, NUL and its bytes, as an int."""
    try:
        prefix = _PREFIX[tag]
    except KeyError:
        raise ValueError(f"unknown digest tag {tag!r}") from None
    data = obj.encode() if isinstance(obj, str) else obj.SerializeToString(deterministic=True)
    return int.from_bytes(hashlib.sha256(prefix + data).digest(), "big")


def bytes_hash(tag: Tag, data: bytes) -> int:
    """`object_hash` of an object given as its deterministic serialization."""
    return int.from_bytes(hashlib.sha256(_PREFIX[tag] + data).digest(), "big")


def bytes_sum(tag: Tag, items: Iterable[bytes]) -> int:
    """`field_sum` of a repeated field given as its objects' deterministic serializations."""
    prefix, sha = _PREFIX[tag], hashlib.sha256
    return sum(map(int.from_bytes, [sha(prefix + data).digest() for data in items])) & _MASK


class DigestAccumulator:
    """A digest being built or updated: add or remove objects in any order, read it back."""

    __slots__ = ("_total",)

    def __init__(self, value: int = 0) -> None:
        self._total = value & _MASK

    @classmethod
    def from_hex(cls, digest: str) -> DigestAccumulator:
        """The accumulator holding a written digest. ValueError if it is not a v2 digest."""
        if not _FORMAT.fullmatch(digest):
            raise ValueError(f"not a v{DIGEST_VERSION} state digest: {digest[:16]!r}")
        return cls(int(digest[len(_HEADER) :], 16))

    def add(self, tag: Tag, obj: Message | str) -> None:
        self._total = (self._total + object_hash(tag, obj)) & _MASK

    def remove(self, tag: Tag, obj: Message | str) -> None:
        """Take out an object that was added (the sum does not check that it was)."""
        self._total = (self._total - object_hash(tag, obj)) & _MASK

    @property
    def value(self) -> int:
        return self._total

    def hex(self) -> str:
        return f"{_HEADER}{self._total:064x}"

    def __repr__(self) -> str:
        return f"DigestAccumulator({self.hex()!r})"


def state_digest(state: state_pb2.DesiredState, known: Mapping[Tag, int] | None = None) -> str:
    """The digest of `state` ("v2:" + 64 hex), computed from all of its objects.

    `known`: the sums (`field_sum`) of some of its repeated fields, by tag, which are then not
    hashed again: objects many states share (a port layout's QoS) are hashed once. The caller
    vouches they are the sums of `state`'s fields."""
    return f"{_HEADER}{state_sum(state, known or {}):064x}"


def field_sum(tag: Tag, items: Iterable[Message]) -> int:
    """A repeated field's share of a digest, for `state_digest(known=...)`."""
    return _sum(tag, items) & _MASK


def state_sum(state: state_pb2.DesiredState, known: Mapping[Tag, int] | None = None) -> int:
    """The digest of `state` as a number (`DigestAccumulator(n).hex()` writes it), so the
    digests of parts of a state can be added up; `known` as in `state_digest`."""
    known = known or {}

    def part(tag: Tag, items: Iterable[Message]) -> int:
        value = known.get(tag)
        return _sum(tag, items) if value is None else value

    total = object_hash("switch", state.switch_name)
    total += part("port", state.ports)
    total += part("neighbor", state.neighbors)
    total += part("group", state.groups)
    total += part("route", state.routes)
    total += part("dscp", state.dscp_map)
    total += part("ecn", state.ecn)
    total += part("pfc", state.pfc)
    if state.HasField("pfc_watchdog"):
        total += object_hash("watchdog", state.pfc_watchdog)
    if state.ecmp_hash:
        total += object_hash("ecmp", state_pb2.EcmpHash.Name(state.ecmp_hash))
    if state.HasField("matrix"):
        total += object_hash("matrix", state.matrix)
    if state.HasField("nak_sampling"):
        total += object_hash("naks", state.nak_sampling)
    if state.HasField("probing"):
        total += object_hash("probing", state.probing)
    return total & _MASK


def _sum(tag: Tag, items: Iterable[Message]) -> int:
    """Sum of object_hash(tag, item) over `items`, unreduced. Inlined: it is the whole cost of
    a full digest (thousands of objects per switch)."""
    prefix, sha = _PREFIX[tag], hashlib.sha256
    # int.from_bytes is big-endian by default (3.11+), as in object_hash.
    return sum(
        map(
            int.from_bytes,
            [sha(prefix + item.SerializeToString(deterministic=True)).digest() for item in items],
        )
    )


def canonical(state: state_pb2.DesiredState) -> state_pb2.DesiredState:
    """A copy of `state` with generation/digest cleared and repeated fields sorted by key, to
    compare two states by content (tests do). The digest does not use it."""
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.generation = 0
    out.digest = ""
    _sort(out.ports, lambda p: p.port)
    _sort(out.neighbors, lambda n: n.port)
    _sort(out.groups, lambda g: g.id)
    _sort(out.routes, lambda r: (r.prefix.address, r.prefix.length))
    _sort(out.dscp_map, lambda d: d.dscp)
    _sort(out.ecn, lambda e: (e.port, e.traffic_class))
    _sort(out.pfc, lambda p: (p.port, p.priority))
    return out


def _sort(field: RepeatedCompositeFieldContainer[M], key: Callable[[M], Any]) -> None:
    """Sort a repeated message field in place (protobuf containers have no .sort(key))."""
    items = [type(item)() for item in field]
    for copy, item in zip(items, field, strict=True):
        copy.CopyFrom(item)
    items.sort(key=key)
    del field[:]
    field.extend(items)
