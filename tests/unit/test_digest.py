"""State digests ignore list order and bookkeeping fields but see every object."""

from __future__ import annotations

import pytest

from railfabric.digest import state_digest
from railfabric.v1 import state_pb2

pytestmark = pytest.mark.unit


def _route(addr: int, group: int) -> state_pb2.Route:
    return state_pb2.Route(prefix=state_pb2.Ipv4Prefix(address=addr, length=24), group_id=group)


def test_digest_is_independent_of_order_generation_and_digest_fields() -> None:
    a = state_pb2.DesiredState(
        switch_name="s", generation=1, routes=[_route(0x0A000000, 1), _route(0x0A000100, 2)]
    )
    b = state_pb2.DesiredState(
        switch_name="s",
        generation=9,
        digest="old",
        routes=[_route(0x0A000100, 2), _route(0x0A000000, 1)],
    )
    assert state_digest(a) == state_digest(b)
    assert b.routes[0].prefix.address == 0x0A000100  # the input is not reordered


def test_digest_changes_when_any_object_changes() -> None:
    a = state_pb2.DesiredState(switch_name="s", routes=[_route(0x0A000000, 1)])
    b = state_pb2.DesiredState(switch_name="s", routes=[_route(0x0A000000, 2)])
    c = state_pb2.DesiredState(
        switch_name="s",
        routes=[_route(0x0A000000, 1)],
        ecn=[state_pb2.EcnThreshold(port=1, traffic_class=3)],
    )
    assert len({state_digest(a), state_digest(b), state_digest(c)}) == 3
