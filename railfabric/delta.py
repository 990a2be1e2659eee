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
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence, Sized
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


def apply_delta(
    state: state_pb2.DesiredState, delta: state_pb2.StateDelta
) -> state_pb2.DesiredState:
    """The state at `delta.to_generation`, digest filled in: updated from `state`'s digest by
    the objects the delta replaces, adds and deletes (the same as a full state_digest), or
    computed afresh when `state` has no v2 digest. Raises DeltaError when `state` is not at
    `delta.from_generation` or a delete names an object the state does not have.

    It takes any state (an agent's, from the wire: fields in any order) and leaves it alone:
    the new state is a copy of `state` (one C-level copy) whose touched fields alone are
    rebuilt. A state whose routes point at missing groups is refused only by a delta that
    touches routes or deletes groups. A caller that applies many deltas to one state of its
    own making applies them in place (`apply_delta_in_place`), at the cost of what each
    touches."""
    _check_generations(state, delta)
    acc = _digest_to_update(state)
    groups = _touched(state.groups, _group_key, delta.upsert_groups, delta.delete_groups)
    routes: dict[Hashable, state_pb2.Route] | None = None
    if delta.upsert_routes or delta.delete_routes:
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
        if routes is not None:
            used = {r.group_id for r in routes.values()}
        else:  # groups go, no route changes: every route stays
            used = {r.group_id for r in state.routes}
        missing = used - live
        if missing:
            raise DeltaError(
                f"{delta.switch_name}: routes point at missing groups {sorted(missing)}"
            )
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.generation = delta.to_generation
    _replace(out.groups, groups)
    _replace(out.routes, routes)
    _replace(out.neighbors, neighbors)
    _replace(out.ecn, ecn)
    _replace(out.pfc, pfc)
    out.digest = state_digest(out) if acc is None else acc.hex()
    return out


def _check_generations(state: state_pb2.DesiredState, delta: state_pb2.StateDelta) -> None:
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


def _route_sort_key(r: state_pb2.Route) -> int:
    """A route's key as one int that sorts as (address, length)."""
    return r.prefix.address << 6 | r.prefix.length


class StateIndex:
    """Where the objects of one state are, for `apply_delta_in_place`: group id -> position
    in `groups`, and (counted the first time a delta deletes a group) routes per group id.

    Routes are found by binary search, so the state's routes must be strictly ascending by
    (address, length): the controller's export makes them so and in-place application keeps
    them so. The maker of the state vouches for it (`check` verifies it, for tests): checking
    it here would read every route, which is what this index exists to avoid (a remote failure
    on ref-100k changes one route in each of 1,648 states of 1,600 routes)."""

    __slots__ = ("groups", "refs", "size", "written")

    def __init__(
        self, state: state_pb2.DesiredState, refs: Mapping[int, int] | None = None
    ) -> None:
        """`refs`: routes per group id of `state`, when its maker knows them (the caller
        vouches), else they are counted when first needed."""
        self.groups: dict[int, int] = {}
        self.refs: dict[int, int] | None = None
        # Serialized bytes written into `state` in place since it was indexed. Protobuf keeps
        # a message's memory until the message goes (its arena frees nothing), so what those
        # writes replaced is still held: `packed` makes a state that holds only itself.
        self.written = 0
        # `state`'s serialized size, when a caller measured it (ByteSize reads every route).
        self.size: int | None = None
        self.rebuild(state)
        if refs is not None:
            self.refs = dict(refs)

    def rebuild(self, state: state_pb2.DesiredState) -> None:
        """Index `state` afresh (after it was changed other than in place)."""
        self.groups = {g.id: i for i, g in enumerate(state.groups)}
        if len(self.groups) != len(state.groups):
            raise ValueError(f"{state.switch_name}: a group id repeats; no index")
        self.refs = None

    def route_refs(self, state: state_pb2.DesiredState) -> dict[int, int]:
        if self.refs is None:
            self.refs = Counter(r.group_id for r in state.routes)
        return self.refs

    @staticmethod
    def check(state: state_pb2.DesiredState) -> bool:
        """Whether `state` can be indexed: group ids unique, routes strictly ascending."""
        keys = [_route_sort_key(r) for r in state.routes]
        ids = [g.id for g in state.groups]
        return len(set(ids)) == len(ids) and all(a < b for a, b in itertools.pairwise(keys))


def _locate(routes: Sequence[state_pb2.Route], key: int) -> tuple[int, bool]:
    """Where the route of `key` is in ascending `routes`, or would go; whether it is there."""
    i = bisect.bisect_left(routes, key, key=_route_sort_key)
    return i, i < len(routes) and _route_sort_key(routes[i]) == key


def apply_delta_in_place(
    state: state_pb2.DesiredState, delta: state_pb2.StateDelta, index: StateIndex
) -> bool:
    """Apply `delta` to `state` itself, as `apply_delta` would (same checks, same errors,
    same resulting state and digest), at the cost of what the delta touches; `index` is
    `state`'s and is kept up to date. Returns False, with `state` untouched, when the delta
    changes nothing (the digest would stay); raises DeltaError, with `state` untouched, when it
    does not apply: every check is made before anything is written.

    Deltas of neighbours, ECN or PFC (a full state's business, never a link event's), or a
    state without a v2 digest, go through `apply_delta` and a copy back."""
    _check_generations(state, delta)
    acc = _digest_to_update(state)
    if (
        acc is None
        or delta.upsert_neighbors
        or delta.delete_neighbors
        or (delta.upsert_ecn or delta.upsert_pfc)
    ):
        new = apply_delta(state, delta)
        if acc is not None and new.digest == state.digest:
            return False
        index.written += new.ByteSize()  # all of it, over what it replaces
        state.CopyFrom(new)
        state.routes.sort(key=_route_sort_key)  # apply_delta keeps them in no order
        index.rebuild(state)
        return True
    before = acc.value
    groups, positions = state.groups, index.groups
    # The final object of every group and route the delta names (None: deleted), in the
    # order apply_delta uses: upserts (a later one wins), then deletes.
    g_final: dict[int, state_pb2.NextHopGroup | None] = {}
    for g in delta.upsert_groups:
        g_final[g.id] = g
    r_final: dict[int, state_pb2.Route | None] = {}
    for r in delta.upsert_routes:
        r_final[_route_sort_key(r)] = r
    routes = state.routes
    where = {k: _locate(routes, k) for k in r_final}
    for prefix in delta.delete_routes:
        k = prefix.address << 6 | prefix.length
        if k not in where:
            where[k] = _locate(routes, k)
        final = r_final.get(k, _ABSENT)
        if final is None or (final is _ABSENT and not where[k][1]):
            raise DeltaError(f"{delta.switch_name}: delete of unknown route {_fmt(prefix)}")
        r_final[k] = None
    for gid in delta.delete_groups:
        final = g_final.get(gid, _ABSENT)
        if final is None or (final is _ABSENT and gid not in positions):
            raise DeltaError(f"{delta.switch_name}: delete of unknown group {gid}")
        g_final[gid] = None
    # Routes per group after the delta, for the groups it moves routes from or to.
    moved: dict[int, int] = {}
    for k, final in r_final.items():
        i, present = where[k]
        if present:
            old = routes[i].group_id
            moved[old] = moved.get(old, 0) - 1
        if final is not None:
            moved[final.group_id] = moved.get(final.group_id, 0) + 1
    missing = {
        gid
        for gid, n in moved.items()
        if n > 0 and (g_final[gid] is None if gid in g_final else gid not in positions)
    }
    if delta.delete_groups:
        refs = index.route_refs(state)
        missing.update(
            gid
            for gid, final in g_final.items()
            if final is None and refs.get(gid, 0) + moved.get(gid, 0) > 0
        )
    if missing:
        raise DeltaError(f"{delta.switch_name}: routes point at missing groups {sorted(missing)}")
    for gid, final in g_final.items():
        at = positions.get(gid)
        if at is not None:
            acc.remove("group", groups[at])
        if final is not None:
            acc.add("group", final)
    for k, final in r_final.items():
        i, present = where[k]
        if present:
            acc.remove("route", routes[i])
        if final is not None:
            acc.add("route", final)
    if acc.value == before:
        return False
    # Write. Groups: replaced where they are, new ones appended, deleted ones taken out.
    dropped: list[int] = []
    for gid, final in g_final.items():
        at = positions.get(gid)
        if at is None:
            if final is not None:
                positions[gid] = len(groups)
                groups.append(final)
        elif final is None:
            dropped.append(at)
        else:
            groups[at].CopyFrom(final)
    if dropped:
        dropped.sort()
        for i in reversed(dropped):
            del groups[i]
        # Each position moves down by the number of deleted ones before it.
        index.groups = {
            gid: at - bisect.bisect_left(dropped, at)
            for gid, at in positions.items()
            if g_final.get(gid, _ABSENT) is not None
        }
    # Routes from the highest key down: a change at position i moves only those after it,
    # which are done, so the positions found above stay right.
    for k in sorted(r_final, reverse=True):
        final = r_final[k]
        i, present = where[k]
        if present:
            if final is None:
                del routes[i]
            else:
                routes[i].CopyFrom(final)
        elif final is not None:
            routes.insert(i, final)
    if index.refs is not None:
        refs = index.refs
        for gid, n in moved.items():
            refs[gid] = refs.get(gid, 0) + n
        for gid, final in g_final.items():
            if final is None:
                refs.pop(gid, None)
    state.generation = delta.to_generation
    state.digest = acc.hex()
    index.written += delta.ByteSize()
    return True


def packed(
    state: state_pb2.DesiredState, index: StateIndex
) -> tuple[state_pb2.DesiredState, StateIndex]:
    """`state` as a new message holding only itself (what in-place application replaced
    stays in the old one's memory until it goes), and its index (route counts kept)."""
    wire = state.SerializeToString()
    fresh = state_pb2.DesiredState.FromString(wire)
    fresh_index = StateIndex(fresh, index.refs)
    fresh_index.size = len(wire)
    return fresh, fresh_index


_ABSENT: Any = object()  # not named by the delta


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
