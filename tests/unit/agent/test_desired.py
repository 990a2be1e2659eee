"""StateDeltas applied to the held DesiredState give the controller's digest."""

from __future__ import annotations

import pytest

from agent.desired import DeltaMismatch, apply_delta
from railfabric.digest import state_digest
from railfabric.v1 import state_pb2
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.unit


def test_delta_gives_the_same_digest_as_the_equivalent_snapshot() -> None:
    base = tor_state(generation=4)
    delta = state_pb2.StateDelta(switch_name="tor-r0-b0", from_generation=4, to_generation=5)
    up = delta.upsert_groups.add(id=1)
    up.next_hops.add(port=2, dmac=0x020000001002, weight=1)
    delta.delete_routes.add(address=0x0A000003, length=32)
    delta.delete_groups.append(2)
    delta.upsert_routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A010000, length=16), group_id=1)

    want = tor_state(generation=5)
    del want.groups[:]
    want.groups.add(id=1).next_hops.add(port=2, dmac=0x020000001002, weight=1)
    del want.routes[:]
    want.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A010000, length=16), group_id=1)
    want.routes.add(prefix=state_pb2.Ipv4Prefix(address=0, length=0), group_id=1)

    got = apply_delta(base, delta)
    assert got.generation == 5
    assert got.digest == state_digest(want)
    assert base.generation == 4 and len(base.groups) == 2  # the input is untouched


def test_a_delta_for_another_generation_is_refused() -> None:
    delta = state_pb2.StateDelta(from_generation=2, to_generation=3)
    with pytest.raises(DeltaMismatch, match="2->3 does not apply to generation 4"):
        apply_delta(tor_state(generation=4), delta)
