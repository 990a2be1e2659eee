"""The desired state the agent holds: a DesiredState snapshot with StateDeltas applied to it,
so its digest can be compared with the controller's (railfabric.digest)."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

from railfabric.digest import state_digest
from railfabric.v1 import state_pb2

M = TypeVar("M", bound=Message)


class DeltaMismatch(ValueError):
    """A StateDelta that does not start from the generation the agent holds."""


def apply_delta(
    state: state_pb2.DesiredState, delta: state_pb2.StateDelta
) -> state_pb2.DesiredState:
    """A new DesiredState: `state` with `delta`'s upserts and deletes, at `to_generation`,
    with its digest recomputed. Raises DeltaMismatch when the delta is for another base."""
    if delta.from_generation != state.generation:
        raise DeltaMismatch(
            f"StateDelta {delta.from_generation}->{delta.to_generation} does not apply to "
            f"generation {state.generation}"
        )
    if delta.switch_name and state.switch_name and delta.switch_name != state.switch_name:
        raise DeltaMismatch(
            f"StateDelta for switch {delta.switch_name!r} sent to {state.switch_name!r}"
        )
    out = state_pb2.DesiredState()
    out.CopyFrom(state)

    groups = {g.id: g for g in out.groups}
    for group in delta.upsert_groups:
        groups[group.id] = group
    for group_id in delta.delete_groups:
        groups.pop(group_id, None)
    routes = {(r.prefix.address, r.prefix.length): r for r in out.routes}
    for route in delta.upsert_routes:
        routes[(route.prefix.address, route.prefix.length)] = route
    for prefix in delta.delete_routes:
        routes.pop((prefix.address, prefix.length), None)
    neighbors = {n.port: n for n in out.neighbors}
    for neighbor in delta.upsert_neighbors:
        neighbors[neighbor.port] = neighbor
    for port in delta.delete_neighbors:
        neighbors.pop(port, None)
    ecn = {(e.port, e.traffic_class): e for e in out.ecn}
    for threshold in delta.upsert_ecn:
        ecn[(threshold.port, threshold.traffic_class)] = threshold
    pfc = {(p.port, p.priority): p for p in out.pfc}
    for setting in delta.upsert_pfc:
        pfc[(setting.port, setting.priority)] = setting

    new_groups = [_copy(g) for _, g in sorted(groups.items())]
    new_routes = [_copy(r) for _, r in sorted(routes.items())]
    new_neighbors = [_copy(n) for _, n in sorted(neighbors.items())]
    new_ecn = [_copy(e) for _, e in sorted(ecn.items())]
    new_pfc = [_copy(p) for _, p in sorted(pfc.items())]
    del out.groups[:]
    out.groups.extend(new_groups)
    del out.routes[:]
    out.routes.extend(new_routes)
    del out.neighbors[:]
    out.neighbors.extend(new_neighbors)
    del out.ecn[:]
    out.ecn.extend(new_ecn)
    del out.pfc[:]
    out.pfc.extend(new_pfc)
    out.generation = delta.to_generation
    out.digest = state_digest(out)
    return out


def _copy(msg: M) -> M:
    out = type(msg)()
    out.CopyFrom(msg)
    return out
