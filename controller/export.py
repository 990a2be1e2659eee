"""Computed state -> the controller/agent API (railfabric.v1 state.proto).

`desired_state` is one switch's full snapshot (ports, neighbours, groups, routes, QoS, latency
probing, and on a ToR its traffic matrix, NAK sampling and mesh probe targets) with its digest;
`state_delta` turns a routing `SwitchDelta` into the `StateDelta` an agent applies. QoS objects
and probing depend only on the intent, so link events never change them.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import weakref
from collections.abc import Iterable
from typing import Any

from controller import object_wire, qos
from controller.fabric import Prefix
from controller.object_wire import ObjectWire
from controller.routing import FabricRouting, Group, SwitchDelta, iter_bits
from railfabric import fabric_p4 as p4
from railfabric.digest import (
    DigestAccumulator,
    Tag,
    bytes_hash,
    bytes_sum,
    field_sum,
    state_sum,
)
from railfabric.ecmp import HashFields
from railfabric.protowire import len_field, len_tag, varint
from railfabric.v1 import state_pb2

ECMP_HASH: dict[HashFields, state_pb2.EcmpHash.ValueType] = {
    HashFields.FIVE_TUPLE: state_pb2.ECMP_HASH_FIVE_TUPLE,
    HashFields.FIVE_TUPLE_QP: state_pb2.ECMP_HASH_FIVE_TUPLE_QP,
}

# Messages are filled through `repeated.add()` and attribute writes: about three times
# faster than building each message from keyword arguments, which matters for the 1,600 routes
# of every switch of a 100k-GPU fabric.


def _add_group(field: Any, group: Group) -> None:
    msg = field.add(id=group.id, truncated=False)  # split, never cut (routing.split_notices)
    add = msg.next_hops.add
    for port, dmac, weight in zip(group.ports, group.dmacs, group.member_weights, strict=True):
        add(port=port, dmac=dmac, weight=weight)


def _add_route(field: Any, prefix: Prefix, group_id: int) -> None:
    msg = field.add(group_id=group_id)
    msg.prefix.address = prefix.address
    msg.prefix.length = prefix.length


def _qos_params(routing: FabricRouting) -> qos.QosParams:
    return qos.resolve(routing.topo.fabric.qos)


def desired_state(
    routing: FabricRouting,
    switch: str,
    generation: int = 0,
    qos_params: qos.QosParams | None = None,
) -> state_pb2.DesiredState:
    """The full desired state of `switch`, digest filled in (railfabric.digest): `state_parts`
    joined."""
    state, shared = state_parts(routing, switch, generation, qos_params)
    state.MergeFromString(shared)
    return state


def state_parts(
    routing: FabricRouting,
    switch: str,
    generation: int = 0,
    qos_params: qos.QosParams | None = None,
) -> tuple[state_pb2.DesiredState, bytes]:
    """The full desired state of `switch` in two parts: a message of the switch's own objects
    (name, ports, neighbours, groups, routes, watchdog, ECMP hash, probing; on a ToR its
    matrix's source ports and NAK sampling) with the whole state's digest, and the fields it
    shares with other switches serialized (its port layout's QoS; on a ToR the traffic matrix
    classes), one bytes object for every switch that has them alike. The state is the message
    with the shared part merged in (a second `matrix` field merges into the first: protobuf's
    rule for a singular message field seen twice); its wire is the message's serialization
    followed by the shared part. The controller holds its states so: parsed into each of
    ref-100k's states, the shared fields took ~210 MiB of the daemon's memory (bench.swarm).

    Built from serialized parts, each made and hashed once: the intent-only objects
    (`_intent_part`), the switch's groups and its routes (shared between switches), parsed
    into the message in one call. Built field by field, ref-100k's 4,672 states took 10-12 s
    with every link out and most of that was ports, neighbours and QoS, which never change
    after the intent is loaded."""
    x = routing.switch_index(switch)
    params = qos_params or _qos_params(routing)
    own, shared, intent_sum = _intent_part(routing, x, params)
    groups, groups_sum = _group_entries(routing, x, routing.groups(switch))
    routes, routes_sum = _routes_part(routing, x)
    state = state_pb2.DesiredState()
    state.MergeFromString(b"".join((own, groups, routes)))
    state.generation = generation
    state.digest = DigestAccumulator(intent_sum + groups_sum + routes_sum).hex()
    return state, shared


# Compiled fabric -> (switch index, QoS parameters) -> the switch's intent-only objects as
# `state_parts` splits them (its own serialized, the shared part) and their digest sum. Keyed
# weakly: a new intent compiles a new topology and its parts go with the old one.
_INTENT_PARTS: weakref.WeakKeyDictionary[
    object, dict[tuple[int, qos.QosParams], tuple[bytes, bytes, int]]
] = weakref.WeakKeyDictionary()
# Compiled fabric -> each distinct shared part, itself: switches alike (a port layout, 3 on
# ref-100k; with or without the matrix classes every ToR has) hold one object.
_SHARED_PARTS: weakref.WeakKeyDictionary[object, dict[bytes, bytes]] = weakref.WeakKeyDictionary()


def _intent_part(routing: FabricRouting, x: int, params: qos.QosParams) -> tuple[bytes, bytes, int]:
    """Switch `x`'s intent-only objects: its own serialized, those it shares with other
    switches serialized (`state_parts`), and the digest sum of both."""
    parts = _INTENT_PARTS.get(routing.topo)
    if parts is None:
        parts = _INTENT_PARTS[routing.topo] = {}
    hit = parts.get((x, params))
    if hit is None:
        hit = parts[(x, params)] = _intent_wire(routing, x, params)
    return hit


# Compiled fabric -> the encoder of its switches' ports, neighbours and groups.
_OBJECT_WIRES: weakref.WeakKeyDictionary[object, ObjectWire] = weakref.WeakKeyDictionary()


def _object_wire(topo: object) -> ObjectWire:
    wire = _OBJECT_WIRES.get(topo)
    if wire is None:
        wire = _OBJECT_WIRES[topo] = ObjectWire()
    return wire


_PORTS = len_tag(state_pb2.DesiredState.PORTS_FIELD_NUMBER)
_NEIGHBORS = len_tag(state_pb2.DesiredState.NEIGHBORS_FIELD_NUMBER)
_NAME = state_pb2.DesiredState.SWITCH_NAME_FIELD_NUMBER


def _intent_wire(routing: FabricRouting, x: int, params: qos.QosParams) -> tuple[bytes, bytes, int]:
    """`_intent_part` computed. Ports and neighbours are encoded by hand (controller.object_wire);
    the switch's few other objects (watchdog, ECMP hash, probing; on a ToR its matrix's
    source ports and NAK sampling) go through a message, serialized after them: the bytes are
    the whole message's deterministic serialization, fields in number order. A ToR's matrix
    is hashed whole: its source ports, then the classes every ToR shares."""
    topo = routing.topo
    fabric = topo.fabric
    wire = _object_wire(topo)
    mac_base = topo.mac_base[x]
    ports: list[bytes] = []
    neighbors: list[bytes] = []
    host_ports: list[int] = []
    layout: list[tuple[int, int, float]] = []
    for port in topo.ports(x):
        speed, length = topo.port_cable(x, port)
        layout.append((port, speed, length))
        ports.append(wire.port(port, mac_base | port, speed, length))
        owner = topo.owner(x, port)
        assert owner is not None
        is_nic, ident = owner
        if is_nic:
            nic = fabric.nics[ident]
            host_ports.append(port)
            neighbors.append(wire.host_neighbor(port, nic.full_name, nic.mac, nic.ipv4))
        else:
            a, a_port, b, b_port = topo.link_ends[ident]
            peer, peer_port = (b, b_port) if a == x else (a, a_port)
            peer_mac = topo.mac_base[peer] | peer_port
            neighbors.append(wire.switch_neighbor(port, topo.names[peer], peer_port, peer_mac))
    name = topo.names[x]
    rest = state_pb2.DesiredState(switch_name=name)
    tor = topo.dest_of[x] >= 0
    interval = fabric.roce.nak_sample_interval_us
    if tor and interval and host_ports:  # where a responder's NAK enters the fabric
        rest.nak_sampling.ports.extend(host_ports)
        rest.nak_sampling.interval_us = interval
    _add_probing(rest, routing, x)
    shared, known = _port_layout_qos(tuple(layout), params)
    rest.pfc_watchdog.detect_ns = params.pfc_watchdog_detect_ns
    rest.pfc_watchdog.restore_ns = params.pfc_watchdog_restore_ns
    rest.ecmp_hash = ECMP_HASH[fabric.ecmp_hash]
    # The message holds none of them: their sums stand for them.
    known = {
        **known,
        "port": bytes_sum("port", ports),
        "neighbor": bytes_sum("neighbor", neighbors),
    }
    digest = state_sum(rest, known)
    if tor:  # the source of its traffic matrix row: its host ports
        matrix = rest.matrix
        matrix.SetInParent()
        matrix.source_ports.extend(host_ports)
        classes = _matrix_classes(routing)
        digest += bytes_hash("matrix", matrix.SerializeToString(deterministic=True) + classes)
        shared += _matrix_classes_field(routing)
    alike = _SHARED_PARTS.get(topo)
    if alike is None:
        alike = _SHARED_PARTS[topo] = {}
    shared = alike.setdefault(shared, shared)
    rest.ClearField("switch_name")
    own = [len_field(_NAME, name.encode())]
    for tag, items in ((_PORTS, ports), (_NEIGHBORS, neighbors)):
        for item in items:
            own += (tag, varint(len(item)), item)
    own.append(rest.SerializeToString(deterministic=True))
    return b"".join(own), shared, DigestAccumulator(digest).value


def _add_probing(state: state_pb2.DesiredState, routing: FabricRouting, x: int) -> None:
    """Switch `x`'s Probing (none when the intent's latency.interval_ms is 0): every switch
    probes its links; a ToR, when the mesh is on, also its mesh targets from its probe address
    (its gateway address: inside its prefix, so every other switch routes it to this ToR)."""
    topo = routing.topo
    lat = topo.fabric.latency
    if lat.interval_ms == 0:
        return
    probing = state.probing
    probing.interval_ms = lat.interval_ms
    probing.links = lat.links
    probing.targets_per_round = lat.targets_per_round
    probing.dscp = lat.dscp
    probing.timeout_ms = lat.timeout_ms
    probing.slow_rtt_us = lat.slow_rtt_us
    d = topo.dest_of[x]
    if d >= 0 and lat.mesh:
        switches = topo.fabric.switches
        probing.address = probe_address(routing, topo.names[x])
        add = probing.targets.add
        for t in mesh_targets(routing)[d]:
            tor = switches[topo.dest_switch[t]]
            add(name=tor.name, address=tor.gateway_ipv4)


def probe_address(routing: FabricRouting, tor: str) -> int:
    """The probe address of ToR `tor` (Probing.address): its gateway address."""
    sw = routing.topo.fabric.switch_by_name[tor]
    if sw.prefix is None:
        raise ValueError(f"{tor} is not a ToR: it has no probe address")
    return sw.gateway_ipv4


# Below this many ToRs every ToR probes every other one (at most 63 targets: 8 rounds at the
# default 8 per round). Above it, the sparse mesh of `mesh_targets`.
MESH_FULL_MAX_TORS = 64


def mesh_targets(routing: FabricRouting) -> list[tuple[int, ...]]:
    """Per ToR (destination index, `topo.dest_switch` order), the ToRs it probes, in the order
    its agent rotates through them. Deterministic: it depends on the intent alone.

    Up to MESH_FULL_MAX_TORS ToRs: every other ToR. Above, a sparse mesh that still covers
    every rail pair and spreads over ToR pairs. ToRs are grouped by (rail, pod), the ToRs that
    share a plane of spines; a ToR at position i of group g probes
    - the ToRs of its own group (the next MESH_FULL_MAX_TORS - 1 after it, round the group,
      when the group is larger): every spine of its plane between every pair;
    - one ToR of every other group h, the one at position (i + g) mod |h|: every rail pair and
      pod pair from every ToR, and with groups of one size each ToR is the target of exactly
      one ToR of each other group, so the pairs spread over all ToRs instead of piling on one.
    On ref-100k (32 groups of 50): 49 + 31 = 80 targets a ToR, 128,000 in all instead of the
    full mesh's 2.56 M."""
    topo = routing.topo
    hit = _MESH_TARGETS.get(topo)
    if hit is not None:
        return hit
    n = len(topo.dest_switch)
    out: list[tuple[int, ...]]
    if n <= MESH_FULL_MAX_TORS:
        out = [tuple(t for t in range(n) if t != d) for d in range(n)]
    else:
        switches = topo.fabric.switches
        by_group: dict[tuple[int | None, int | None], list[int]] = {}
        for d, x in enumerate(topo.dest_switch):
            by_group.setdefault((switches[x].rail, switches[x].pod), []).append(d)
        groups = list(by_group.values())  # in fabric order
        out = [()] * n
        for g, own in enumerate(groups):
            size = len(own)
            for i, d in enumerate(own):
                picked = [own[(i + j) % size] for j in range(1, min(size, MESH_FULL_MAX_TORS))]
                picked.extend(o[(i + g) % len(o)] for h, o in enumerate(groups) if h != g)
                out[d] = tuple(picked)
    _MESH_TARGETS[topo] = out
    return out


# Compiled fabric -> its mesh_targets, computed once: every ToR's state reads its own row.
_MESH_TARGETS: weakref.WeakKeyDictionary[object, list[tuple[int, ...]]] = (
    weakref.WeakKeyDictionary()
)


def matrix_classes(routing: FabricRouting) -> int:
    """How many destination ToRs have a class of the traffic matrix: ToR t (in
    `routing.topo.dest_switch` order) is class t, for the first MATRIX_COUNTER_SIZE of them
    (the counter's size in fabric.p4; a larger fabric's last ToRs are not counted as
    destinations)."""
    return min(len(routing.topo.dest_prefix), p4.MATRIX_COUNTER_SIZE)


def matrix_destinations(routing: FabricRouting) -> list[str]:
    """The destination ToR of each class, by class."""
    topo = routing.topo
    return [topo.names[topo.dest_switch[t]] for t in range(matrix_classes(routing))]


# Compiled fabric -> the `classes` of every ToR's TrafficMatrix, serialized once: ToRs share
# them, and 1,600 classes on each of 1,600 ToRs built field by field would take seconds.
_MATRIX_CLASSES: weakref.WeakKeyDictionary[object, bytes] = weakref.WeakKeyDictionary()
# The same as a DesiredState's `matrix` field holding only them.
_MATRIX_CLASSES_FIELD: weakref.WeakKeyDictionary[object, bytes] = weakref.WeakKeyDictionary()


def _matrix_classes_field(routing: FabricRouting) -> bytes:
    topo = routing.topo
    hit = _MATRIX_CLASSES_FIELD.get(topo)
    if hit is None:
        field = state_pb2.DesiredState.MATRIX_FIELD_NUMBER
        hit = _MATRIX_CLASSES_FIELD[topo] = len_field(field, _matrix_classes(routing))
    return hit


def _matrix_classes(routing: FabricRouting) -> bytes:
    topo = routing.topo
    hit = _MATRIX_CLASSES.get(topo)
    if hit is None:
        holder = state_pb2.TrafficMatrix()
        add = holder.classes.add
        for t in range(matrix_classes(routing)):
            prefix = topo.dest_prefix[t]
            c = add(dst_class=t)
            c.prefix.address = prefix.address
            c.prefix.length = prefix.length
        hit = _MATRIX_CLASSES[topo] = holder.SerializeToString(deterministic=True)
    return hit


# Compiled fabric -> (switch index, group id, members, weights) -> the group's serialized
# `groups` entry of a DesiredState and its digest hash. A switch's ports name its neighbours'
# MACs for as long as its compiled fabric lives, so the key needs no MACs (keyed by them, each
# lookup built a tuple of up to 64). Switches hardly share groups; the cache is for the next
# export of the same switch (a recomputation from scratch, the digest of each StateDelta),
# when most of its groups are what they were.
_GROUPS: weakref.WeakKeyDictionary[
    object, dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], tuple[bytes, int]]
] = weakref.WeakKeyDictionary()
_GROUPS_LIMIT = 200_000
_GROUPS_FIELD = state_pb2.DesiredState.GROUPS_FIELD_NUMBER


def _group_entries(routing: FabricRouting, x: int, groups: Iterable[Group]) -> tuple[bytes, int]:
    """The serialized `groups` entries of switch `x`'s `groups`, in order, and their digest
    sum."""
    cache = _GROUPS.get(routing.topo)
    if cache is None or len(cache) > _GROUPS_LIMIT:
        cache = _GROUPS[routing.topo] = {}  # the limit: a bound, not a policy
    wire = _object_wire(routing.topo)
    parts: list[bytes] = []
    total = 0
    for group in groups:
        key = (x, group.id, group.ports, group.weights)
        hit = cache.get(key)
        if hit is None:
            data = wire.group(group.id, group.ports, group.dmacs, group.member_weights)
            hit = cache[key] = (len_field(_GROUPS_FIELD, data), bytes_hash("group", data))
        parts.append(hit[0])
        total += hit[1]
    return b"".join(parts), total


# (address, length, group id) -> the route as a serialized `routes` field entry of a
# DesiredState, and its digest hash. Switches share most routes (on ref-100k, 7.6 M routes
# are 109k distinct), so each is built and hashed once: building the states field by field
# and hashing every route was most of a controller's start-up (10 ms a switch, 47 s).
_ROUTES: dict[tuple[int, int, int], tuple[bytes, int]] = {}
_ROUTES_LIMIT = 1_000_000
_ROUTES_FIELD = state_pb2.DesiredState.ROUTES_FIELD_NUMBER


def _route_entries(triples: Iterable[tuple[int, int, int]]) -> tuple[bytes, int]:
    """The serialized `routes` entries of `triples`, in order, and their digest sum."""
    if len(_ROUTES) > _ROUTES_LIMIT:
        _ROUTES.clear()  # a bound, not a policy: one fabric's routes fit many times over
    parts: list[bytes] = []
    total = 0
    for triple in triples:
        entry, digest = _route_entry(triple)
        parts.append(entry)
        total += digest
    return b"".join(parts), total


def _route_entry(triple: tuple[int, int, int]) -> tuple[bytes, int]:
    """One route's serialized `routes` entry and digest hash, from the cache or made there."""
    hit = _ROUTES.get(triple)
    if hit is not None:
        return hit
    data = object_wire.route(*triple)
    hit = _ROUTES[triple] = (len_field(_ROUTES_FIELD, data), bytes_hash("route", data))
    return hit


class _RouteRows:
    """For one compiled fabric whose ToR prefixes ascend in destination order: per group id,
    every destination's route entry in destination order and the running sums of their
    digest hashes. A switch's routes are then a few runs of consecutive destinations per
    class, each one slice joined in C, and its digest share a difference of two sums: on
    ref-100k, 7.6 M routes per link recomputation built one by one took ~14 s."""

    LIMIT = 512  # group ids kept (a row is ~100 kB on ref-100k); a bound, not a policy
    SHAPES = 1024  # switches' routes kept whole; a bound, not a policy

    def __init__(self, keys: list[tuple[int, int]]) -> None:
        self.keys = keys  # (address, length) of each destination, ascending
        self.rows: dict[int, tuple[list[bytes], list[int]]] = {}
        # The routes of switches without host routes, by their classes ((gid, bits), by
        # gid): the spines of a plane, and the cores, have the same classes, which interleave
        # (a spine's ToRs are every 8th destination), so runs are many and short there.
        self.shapes: dict[tuple[tuple[int, int], ...], tuple[bytes, int]] = {}

    def row(self, gid: int) -> tuple[list[bytes], list[int]]:
        hit = self.rows.get(gid)
        if hit is None:
            if len(self.rows) >= self.LIMIT:
                self.rows.clear()
            entries: list[bytes] = []
            sums = [0]
            for address, length in self.keys:
                triple = (address, length, gid)
                entry, digest = _route_entry(triple)
                entries.append(entry)
                sums.append(sums[-1] + digest)
            hit = self.rows[gid] = (entries, sums)
        return hit


_ROUTE_ROWS: weakref.WeakKeyDictionary[object, _RouteRows | None] = weakref.WeakKeyDictionary()


def _route_rows(routing: FabricRouting) -> _RouteRows | None:
    topo = routing.topo
    if topo not in _ROUTE_ROWS:
        keys = [(p.address, p.length) for p in topo.dest_prefix]
        ascending = all(a < b for a, b in itertools.pairwise(keys))
        _ROUTE_ROWS[topo] = _RouteRows(keys) if ascending else None
    return _ROUTE_ROWS[topo]


def _routes_part(routing: FabricRouting, x: int) -> tuple[bytes, int]:
    """Switch `x`'s serialized `routes` entries, ascending by (address, length) as
    route_triples orders them, and their digest sum."""
    rows = _route_rows(routing)
    topo = routing.topo
    if rows is None:  # prefixes out of destination order: route by route
        return _route_entries(routing.route_triples(topo.names[x]))
    if routing.host_routes[x]:
        return _routes_by_runs(routing, x, rows)
    shape = tuple(sorted(routing.classes[x].items()))
    hit = rows.shapes.get(shape)
    if hit is None:
        if len(rows.shapes) >= rows.SHAPES:
            rows.shapes.clear()
        hit = rows.shapes[shape] = _routes_by_runs(routing, x, rows)
    return hit


def _routes_by_runs(routing: FabricRouting, x: int, rows: _RouteRows) -> tuple[bytes, int]:
    topo = routing.topo
    runs: list[tuple[int, int, int]] = []
    for gid, bits in routing.classes[x].items():
        edges = iter(iter_bits(bits ^ (bits << 1)))  # where runs of set bits start and end
        runs.extend((start, end, gid) for start, end in zip(edges, edges, strict=True))
    runs.sort()
    # Host routes (a ToR's /32s) go where their keys fall among the destinations'.
    hosts = sorted(
        (bisect.bisect_left(rows.keys, (topo.nic_ip[k], 32)), topo.nic_ip[k], gid)
        for k, gid in routing.host_routes[x].items()
    )
    parts: list[bytes] = []
    total = 0
    h = 0
    for start, end, gid in runs:
        entries, sums = rows.row(gid)
        at = start
        while h < len(hosts) and hosts[h][0] < end:
            pos, address, host_gid = hosts[h]
            if pos > at:
                parts.append(b"".join(entries[at:pos]))
                total += sums[pos] - sums[at]
                at = pos
            entry, digest = _route_entry((address, 32, host_gid))
            parts.append(entry)
            total += digest
            h += 1
        if at < end:
            parts.append(b"".join(entries[at:end]))
            total += sums[end] - sums[at]
    rest, rest_sum = _route_entries((address, 32, gid) for _, address, gid in hosts[h:])
    return b"".join(parts) + rest, total + rest_sum


@functools.lru_cache(maxsize=256)
def _port_layout_qos(
    layout: tuple[tuple[int, int, float], ...], params: qos.QosParams
) -> tuple[bytes, dict[Tag, int]]:
    """The QoS objects of a switch with these (port, speed, cable length) ports, serialized
    as DesiredState fields, and their digest sums: thousands of switches share a handful of
    layouts, so each is built, serialized and hashed once (they are most of a switch's
    objects without routes; copied into every state, they were a third of a cold start's)."""
    shared = state_pb2.DesiredState()
    add_ecn = shared.ecn.add
    add_pfc = shared.pfc.add
    for port, speed, length in layout:
        ecn = qos.ecn_thresholds(speed, params)
        pfc = qos.pfc_thresholds(speed, length, params)
        for tc in qos.ECN_CLASSES:
            add_ecn(
                port=port,
                traffic_class=int(tc),
                kmin_bytes=ecn.kmin_bytes,
                kmax_bytes=ecn.kmax_bytes,
                pmax_ppm=ecn.pmax_ppm,
            )
        add_pfc(
            port=port,
            priority=qos.LOSSLESS_PRIORITY,
            xoff_bytes=pfc.xoff_bytes,
            xon_bytes=pfc.xon_bytes,
            headroom_bytes=pfc.headroom_bytes,
        )
    add_dscp = shared.dscp_map.add
    for dscp, tc in qos.dscp_map():
        add_dscp(dscp=dscp, traffic_class=int(tc))
    known: dict[Tag, int] = {
        "ecn": field_sum("ecn", shared.ecn),
        "pfc": field_sum("pfc", shared.pfc),
        "dscp": field_sum("dscp", shared.dscp_map),
    }
    return shared.SerializeToString(deterministic=True), known


def state_delta(
    routing: FabricRouting,
    delta: SwitchDelta,
    from_generation: int,
    with_digest: bool = True,
) -> state_pb2.StateDelta:
    """The API form of a routing delta, from `from_generation` to the next. Call it after
    `routing.apply(...)` returned `delta`, so the digest is that of the new full state."""
    msg = state_pb2.StateDelta(
        switch_name=delta.switch,
        from_generation=from_generation,
        to_generation=from_generation + 1,
        delete_groups=list(delta.delete_groups),
    )
    for group in delta.upsert_groups:
        _add_group(msg.upsert_groups, group)
    for route in delta.upsert_routes:
        _add_route(msg.upsert_routes, route.prefix, route.group_id)
    add_delete = msg.delete_routes.add
    for prefix in delta.delete_routes:
        add_delete(address=prefix.address, length=prefix.length)
    if with_digest:
        msg.digest = desired_state(routing, delta.switch).digest
    return msg
