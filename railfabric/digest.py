"""The digest of a switch's desired state: how a controller and an agent prove, without
sending the state, that they hold the same thing (Hello.applied_digest, DesiredState.digest).

The digest covers the content only: generation and digest fields are cleared, and every
repeated field is put in a canonical order, so two states with the same objects in different
list orders digest the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from railfabric.v1 import state_pb2

M = TypeVar("M", bound=Message)


def canonical(state: state_pb2.DesiredState) -> state_pb2.DesiredState:
    """A copy of `state` with generation/digest cleared and repeated fields sorted."""
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


def state_digest(state: state_pb2.DesiredState) -> str:
    """Hex SHA-256 of the canonical deterministic serialisation of `state`."""
    return hashlib.sha256(canonical(state).SerializeToString(deterministic=True)).hexdigest()


def _sort(field: RepeatedCompositeFieldContainer[M], key: Callable[[M], Any]) -> None:
    """Sort a repeated message field in place (protobuf containers have no .sort(key))."""
    items = [type(item)() for item in field]
    for copy, item in zip(items, field, strict=True):
        copy.CopyFrom(item)
    items.sort(key=key)
    del field[:]
    field.extend(items)
