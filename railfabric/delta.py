"""Deltas between desired states: the one definition of how a StateDelta changes a
DesiredState, used by the controller (to know the state it asks for) and the agent (to know the
state it holds), and the diff that produces a delta from two states.

Objects are keyed as the API says: groups by id, routes by prefix, neighbours by port, ECN by
(port, traffic class), PFC by (port, priority). Ports, DSCP map, watchdog, ECMP hash, traffic
matrix, NAK sampling and probing are not in deltas: they change only with the intent, which
sends a full DesiredState (a delta carries them over as they are).
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Callable, Hashable, Iterable, Mapping, Sized
from typing import Any, TypeVar

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message

from railfabric.digest import DigestAccumulator, Tag, state_digest
from railfabric.v1 import state_pb2

M = TypeVar("M", bound=Message)


def _by(items: Iterable[M], key: Callable[[M], Hashable]) -> dict[Hashable, M]:
    return {key(item): item for item in items}


def _prefix_key(p: state_pb2.Ipv4Prefix) -> tuple[int, int]:
    return (p.address, p.length)


def _route_key(r: state_pb2.Route) -> tuple[int, int]:
    return _prefix_key(r.prefix)


def _group_key(g: state_pb2.NextHopGroup) -> int:
    return g.id


def _neighbor_key(n: state_pb2.Neighbor) -> int:
    return n.port


def _ecn_key(e: state_pb2.EcnThreshold) -> tuple[int, int]:
    return (e.port, e.traffic_class)


def _pfc_key(p: state_pb2.PfcSetting) -> tuple[int, int]:
    return (p.port, p.priority)


class DeltaError(ValueError):
    """A delta that does not apply to the state it was given."""


def route_keys(state: state_pb2.DesiredState) -> array[int] | None:
    """The keys of `state`'s routes in field order (prefix address << 6 | length, which sorts
    as (address, length)), for `apply_delta(route_keys=...)`; None when they are not strictly
    ascending (then a delta is applied by building the routes by key)."""
    keys = array("Q", [r.prefix.address << 6 | r.prefix.length for r in state.routes])
    if any(a >= b for a, b in itertools.pairwise(keys)):
        return None
    return keys


def apply_delta(
    state: state_pb2.DesiredState,
    delta: state_pb2.StateDelta,
    route_keys: array[int] | None = None,
) -> state_pb2.DesiredState:
    """The state at `delta.to_generation`, digest filled in: updated from `state`'s digest by
    the objects the delta replaces, adds and deletes (the same as a full state_digest), or
    computed afresh when `state` has no v2 digest. Raises DeltaError when `state` is not at
    `delta.from_generation` or a delete names an object the state does not have.

    It costs what the delta touches: the new state is a copy of `state` (one C-level copy)
    whose touched fields alone are rebuilt. A remote failure on a 100k-GPU fabric sends 1,648
    switches a delta of one group each, against states of 1,600 routes; indexing every field
    of every state made that cut take seconds. So a state whose routes point at missing groups
    is refused only by a delta that touches routes or deletes groups.

    `route_keys`: `route_keys(state)`, kept by a caller that applies many deltas. Routes are
    then found by binary search, not indexed (a delta re-points one route of a 1,600-route
    state), and the array is updated in place to the new state's keys (on success only)."""
    if state.generation != delta.from_generation:
        raise DeltaError(
            f"{delta.switch_name}: delta is from generation {delta.from_generation}, "
            f"state is at {state.generation}"
        )
    if delta.to_generation != delta.from_generation + 1:
        raise DeltaError(
            f"{delta.switch_name}: delta goes from {delta.from_generation} to "
            f"{delta.to_generation}; it must advance by one"
        )
    acc = _digest_to_update(state)
    groups = _touched(state.groups, _group_key, delta.upsert_groups, delta.delete_groups)
    routes: dict[Hashable, state_pb2.Route] | None = None
    if route_keys is not None:
        _check_deletes(route_keys, delta)
    elif delta.upsert_routes or delta.delete_routes:
        # Inlined _by(state.routes, _route_key): routes are most of a state.
        routes = {(r.prefix.address, r.prefix.length): r for r in state.routes}
    neighbors = _touched(
        state.neighbors, _neighbor_key, delta.upsert_neighbors, delta.delete_neighbors
    )
    ecn = _touched(state.ecn, _ecn_key, delta.upsert_ecn)
    pfc = _touched(state.pfc, _pfc_key, delta.upsert_pfc)
    if acc is not None and any(
        objs is not None and len(objs) != len(field)
        for objs, field in (
            (groups, state.groups),
            (routes, state.routes),
            (neighbors, state.neighbors),
            (ecn, state.ecn),
            (pfc, state.pfc),
        )
    ):
        acc = None  # a key repeats: the dicts keep one object of it, the digest counted all
    if groups is not None:
        _upsert(groups, delta.upsert_groups, _group_key, "group", acc)
    if routes is not None:
        _upsert(routes, delta.upsert_routes, _route_key, "route", acc)
    if neighbors is not None:
        _upsert(neighbors, delta.upsert_neighbors, _neighbor_key, "neighbor", acc)
    if ecn is not None:
        _upsert(ecn, delta.upsert_ecn, _ecn_key, "ecn", acc)
    if pfc is not None:
        _upsert(pfc, delta.upsert_pfc, _pfc_key, "pfc", acc)
    if routes is not None:
        for prefix in delta.delete_routes:
            if not _delete(routes, _prefix_key(prefix), "route", acc):
                raise DeltaError(f"{delta.switch_name}: delete of unknown route {_fmt(prefix)}")
    for gid in delta.delete_groups:
        assert groups is not None
        if not _delete(groups, gid, "group", acc):
            raise DeltaError(f"{delta.switch_name}: delete of unknown group {gid}")
    for port in delta.delete_neighbors:
        assert neighbors is not None
        if not _delete(neighbors, port, "neighbor", acc):
            raise DeltaError(f"{delta.switch_name}: delete of unknown neighbour on port {port}")
    if delta.upsert_routes or delta.delete_groups:
        # Only new routes, or groups that go, can leave a route without its group.
        live = {g.id for g in state.groups} if groups is None else set(groups)
        # The upserted routes that remain (a later upsert of a prefix wins, a delete of it
        # wins over both).
        gone = {_prefix_key(p) for p in delta.delete_routes}
        last = {_route_key(r): r.group_id for r in delta.upsert_routes}
        used = {gid for k, gid in last.items() if k not in gone}
        if delta.delete_groups:
            # And the routes the delta leaves alone. By the caller's keys when it has them:
            # a route that moves to a new group deletes the old one (every switch's delta when
            # a cable returns), and indexing every route of 1,648 states for it made a restore
            # on ref-100k take 13 s.
            if routes is not None:
                used = {r.group_id for r in routes.values()}
            elif route_keys is not None:
                touched = {a << 6 | n for a, n in gone | last.keys()}
                kept = zip(route_keys, state.routes, strict=True)
                used |= {r.group_id for k, r in kept if k not in touched}
            else:
                used |= {r.group_id for r in state.routes}
        missing = used - live
        if missing:
            raise DeltaError(
                f"{delta.switch_name}: routes point at missing groups {sorted(missing)}"
            )
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.generation = delta.to_generation
    _replace(out.groups, groups)
    if route_keys is not None:
        _routes_in_place(out.routes, route_keys, delta, acc)
    else:
        _replace(out.routes, routes)
    _replace(out.neighbors, neighbors)
    _replace(out.ecn, ecn)
    _replace(out.pfc, pfc)
    out.digest = state_digest(out) if acc is None else acc.hex()
    return out


def _check_deletes(keys: array[int], delta: state_pb2.StateDelta) -> None:
    """Every route the delta deletes is in the state or upserted by the delta (before the
    state is touched: a delta applies whole or not at all)."""
    upserted = {r.prefix.address << 6 | r.prefix.length for r in delta.upsert_routes}
    for prefix in delta.delete_routes:
        k = prefix.address << 6 | prefix.length
        i = bisect.bisect_left(keys, k)
        if k not in upserted and (i == len(keys) or keys[i] != k):
            raise DeltaError(f"{delta.switch_name}: delete of unknown route {_fmt(prefix)}")


def _routes_in_place(
    routes: RepeatedCompositeFieldContainer[state_pb2.Route],
    keys: array[int],
    delta: state_pb2.StateDelta,
    acc: DigestAccumulator | None,
) -> None:
    """The delta's route changes on `routes` (ascending, with `keys` its keys), by position."""
    for r in delta.upsert_routes:
        k = r.prefix.address << 6 | r.prefix.length
        i = bisect.bisect_left(keys, k)
        if i < len(keys) and keys[i] == k:
            if acc is not None:
                acc.remove("route", routes[i])
            routes[i].CopyFrom(r)
        else:
            routes.insert(i, r)
            keys.insert(i, k)
        if acc is not None:
            acc.add("route", r)
    for prefix in delta.delete_routes:
        k = prefix.address << 6 | prefix.length
        i = bisect.bisect_left(keys, k)
        if acc is not None:
            acc.remove("route", routes[i])
        del routes[i]
        del keys[i]


def _replace(field: RepeatedCompositeFieldContainer[M], objs: Mapping[Any, M] | None) -> None:
    if objs is not None:
        del field[:]
        field.extend(objs.values())


def _touched(
    field: Iterable[M],
    key: Callable[[M], Hashable],
    upserts: Sized,
    deletes: Sized = (),
) -> dict[Hashable, M] | None:
    """`field` by key when the delta changes it, else None (it is carried over as it is)."""
    if not upserts and not deletes:
        return None
    return _by(field, key)


def _digest_to_update(state: state_pb2.DesiredState) -> DigestAccumulator | None:
    """`state`'s digest to update, or None to digest the new state afresh when it is not a v2
    digest (unset, or from an older peer). A v2 digest is trusted to be that of `state`, as
    apply_delta, state_digest and the controller's export make it."""
    try:
        return DigestAccumulator.from_hex(state.digest)
    except ValueError:
        return None


def _upsert(
    objs: dict[Hashable, M],
    items: Iterable[M],
    key: Callable[[M], Hashable],
    tag: Tag,
    acc: DigestAccumulator | None,
) -> None:
    """Put each item in `objs` under its key (a later one wins), replacing the digest
    contribution of whatever it replaces."""
    for item in items:
        k = key(item)
        if acc is not None:
            replaced = objs.get(k)
            if replaced is not None:
                acc.remove(tag, replaced)
            acc.add(tag, item)
        objs[k] = item


def _delete(objs: dict[Hashable, M], k: Hashable, tag: Tag, acc: DigestAccumulator | None) -> bool:
    """Remove the object under `k` and its digest contribution; False if there is none."""
    gone = objs.pop(k, None)
    if gone is None:
        return False
    if acc is not None:
        acc.remove(tag, gone)
    return True


def diff_states(old: state_pb2.DesiredState, new: state_pb2.DesiredState) -> state_pb2.StateDelta:
    """The delta that turns `old` into `new` (generations from old.generation to +1).

    Raises DeltaError when ports, DSCP map, watchdog, ECMP hash, traffic matrix, NAK sampling
    or probing differ: those need a full state."""
    if (
        list(old.ports) != list(new.ports)
        or list(old.dscp_map) != list(new.dscp_map)
        or old.pfc_watchdog != new.pfc_watchdog
        or old.ecmp_hash != new.ecmp_hash
        or old.matrix != new.matrix
        or old.nak_sampling != new.nak_sampling
        or old.probing != new.probing
    ):
        raise DeltaError(
            f"{new.switch_name}: ports, QoS map, ECMP hash, traffic matrix, NAK sampling or "
            "probing changed; send a full state"
        )
    delta = state_pb2.StateDelta(
        switch_name=new.switch_name,
        from_generation=old.generation,
        to_generation=old.generation + 1,
    )
    _diff(
        old.groups,
        new.groups,
        _group_key,
        delta.upsert_groups.extend,
        lambda gone: delta.delete_groups.extend(g.id for g in gone),
    )
    _diff(
        old.routes,
        new.routes,
        _route_key,
        delta.upsert_routes.extend,
        lambda gone: delta.delete_routes.extend(r.prefix for r in gone),
    )
    _diff(
        old.neighbors,
        new.neighbors,
        _neighbor_key,
        delta.upsert_neighbors.extend,
        lambda gone: delta.delete_neighbors.extend(n.port for n in gone),
    )
    _diff(old.ecn, new.ecn, _ecn_key, delta.upsert_ecn.extend, _no_delete("ECN threshold"))
    _diff(old.pfc, new.pfc, _pfc_key, delta.upsert_pfc.extend, _no_delete("PFC setting"))
    delta.digest = state_digest(new)
    return delta


def delta_size(delta: state_pb2.StateDelta) -> int:
    """Number of objects a delta upserts or deletes."""
    return (
        len(delta.upsert_groups)
        + len(delta.upsert_routes)
        + len(delta.delete_routes)
        + len(delta.delete_groups)
        + len(delta.upsert_neighbors)
        + len(delta.delete_neighbors)
        + len(delta.upsert_ecn)
        + len(delta.upsert_pfc)
    )


def _diff(
    old: Iterable[M],
    new: Iterable[M],
    key: Callable[[M], Hashable],
    upsert: Callable[[list[M]], None],
    delete: Callable[[list[M]], None],
) -> None:
    before, after = _by(old, key), _by(new, key)
    upsert([item for k, item in after.items() if before.get(k) != item])
    delete([item for k, item in before.items() if k not in after])


def _no_delete(what: str) -> Callable[[list[M]], None]:
    def refuse(gone: list[M]) -> None:
        if gone:
            raise DeltaError(f"{what} removed; send a full state")

    return refuse


def _fmt(p: state_pb2.Ipv4Prefix) -> str:
    a = p.address
    return f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}/{p.length}"
