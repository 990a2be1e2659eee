"""State digests (v2): a sum of tagged object hashes, so list order never matters, every object
counts, and apply_delta's incremental update equals a full digest."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from railfabric.delta import apply_delta
from railfabric.digest import (
    DIGEST_VERSION,
    DigestAccumulator,
    Tag,
    canonical,
    object_hash,
    state_digest,
)
from railfabric.v1 import state_pb2

pytestmark = pytest.mark.unit

M = TypeVar("M", bound=Message)
T = TypeVar("T")

REPEATED = ("ports", "neighbors", "groups", "routes", "dscp_map", "ecn", "pfc")

# Small key ranges, so deltas often hit existing objects and lists often share values.
_key = st.integers(1, 6)
_u32 = st.integers(0, 2**32 - 1)
_u64 = st.integers(0, 2**64 - 1)
_small = st.integers(0, 9)

_next_hops = st.lists(
    st.builds(state_pb2.NextHop, port=_key, dmac=_small, weight=st.integers(1, 3)), max_size=3
)
_prefixes = st.builds(
    state_pb2.Ipv4Prefix, address=st.integers(0, 3).map(lambda a: a << 8), length=_key
)
_port_configs = st.builds(
    state_pb2.PortConfig,
    port=_key,
    mac=_u64,
    speed_mbps=_small,
    cable_length_m=st.integers(0, 400).map(lambda q: q / 4),  # exact, so +1.0 always differs
)
_neighbors = st.builds(
    state_pb2.Neighbor,
    port=_key,
    kind=st.sampled_from([state_pb2.PEER_KIND_SWITCH, state_pb2.PEER_KIND_HOST]),
    peer_name=st.text(max_size=4),
    peer_port=_small,
    peer_mac=_u64,
    peer_ipv4=_u32,
)
_groups = st.builds(state_pb2.NextHopGroup, id=_key, next_hops=_next_hops, truncated=st.booleans())
_routes = st.builds(state_pb2.Route, prefix=_prefixes, group_id=_key)
_dscp = st.builds(state_pb2.DscpMapping, dscp=st.integers(0, 63), traffic_class=st.integers(0, 7))
_ecn = st.builds(
    state_pb2.EcnThreshold,
    port=_key,
    traffic_class=st.integers(0, 3),
    kmin_bytes=_small,
    kmax_bytes=_small,
    pmax_ppm=_small,
)
_pfc = st.builds(
    state_pb2.PfcSetting,
    port=_key,
    priority=st.integers(0, 3),
    xoff_bytes=_small,
    xon_bytes=_small,
    headroom_bytes=_small,
)
_watchdogs = st.none() | st.builds(state_pb2.PfcWatchdog, detect_ns=_small, restore_ns=_small)
_probings = st.none() | st.builds(
    state_pb2.Probing,
    interval_ms=_small,
    links=st.booleans(),
    address=_u32,
    targets=st.lists(st.builds(state_pb2.ProbeTarget, name=st.text(max_size=4), address=_u32)),
    targets_per_round=_small,
    dscp=_small,
    timeout_ms=_small,
    slow_rtt_us=_small,
)


def _route_key(r: state_pb2.Route) -> Hashable:
    return (r.prefix.address, r.prefix.length)


def _unique(
    items: st.SearchStrategy[M], key: Callable[[M], Hashable]
) -> st.SearchStrategy[list[M]]:
    return st.lists(items, max_size=6, unique_by=key)


def _some(items: Iterable[T], **kwargs: Any) -> st.SearchStrategy[list[T]]:
    """Lists of elements of `items` (only the empty list when there are none)."""
    pool = list(items)
    return st.lists(st.sampled_from(pool), **kwargs) if pool else st.just([])


@st.composite
def any_states(draw: st.DrawFn) -> state_pb2.DesiredState:
    """Any state, duplicates and dangling group ids included: the digest does not care."""
    state = state_pb2.DesiredState(
        switch_name=draw(st.text(max_size=6)),
        generation=draw(_u64),
        ports=draw(st.lists(_port_configs, max_size=5)),
        neighbors=draw(st.lists(_neighbors, max_size=5)),
        groups=draw(st.lists(_groups, max_size=5)),
        routes=draw(st.lists(_routes, max_size=6)),
        dscp_map=draw(st.lists(_dscp, max_size=5)),
        ecn=draw(st.lists(_ecn, max_size=5)),
        pfc=draw(st.lists(_pfc, max_size=5)),
    )
    watchdog = draw(_watchdogs)
    if watchdog is not None:
        state.pfc_watchdog.CopyFrom(watchdog)
    probing = draw(_probings)
    if probing is not None:
        state.probing.CopyFrom(probing)
    return state


@st.composite
def keyed_states(draw: st.DrawFn) -> state_pb2.DesiredState:
    """A state as apply_delta takes it: one object per key, routes on existing groups."""
    state = draw(any_states())
    state.generation = draw(st.integers(0, 2**64 - 2))  # room for the delta's to_generation
    groups = draw(_unique(_groups, lambda g: g.id))
    routes = draw(_unique(_routes, _route_key)) if groups else []
    for r in routes:
        r.group_id = draw(st.sampled_from([g.id for g in groups]))
    for name, objs in (
        ("groups", groups),
        ("routes", routes),
        ("neighbors", draw(_unique(_neighbors, lambda n: n.port))),
        ("ecn", draw(_unique(_ecn, lambda e: (e.port, e.traffic_class)))),
        ("pfc", draw(_unique(_pfc, lambda p: (p.port, p.priority)))),
    ):
        del getattr(state, name)[:]
        getattr(state, name).extend(objs)
    return state


@st.composite
def deltas(draw: st.DrawFn, state: state_pb2.DesiredState) -> state_pb2.StateDelta:
    """A delta that applies to `state`: upserts that replace objects (changed or not) and add
    new ones (a key may repeat), deletes of existing routes, groups and neighbours."""
    delta = state_pb2.StateDelta(
        switch_name=state.switch_name,
        from_generation=state.generation,
        to_generation=state.generation + 1,
        upsert_groups=draw(st.lists(_groups, max_size=4)),
        upsert_neighbors=draw(st.lists(_neighbors, max_size=4)),
        upsert_ecn=draw(st.lists(_ecn, max_size=4)),
        upsert_pfc=draw(st.lists(_pfc, max_size=4)),
    )
    delta.upsert_groups.extend(draw(_some(state.groups, max_size=2)))
    group_ids = sorted({g.id for g in state.groups} | {g.id for g in delta.upsert_groups})
    if group_ids:
        new = draw(st.lists(_routes, max_size=3))
        replaced = draw(_some(state.routes, max_size=2))
        for route in new + replaced:
            delta.upsert_routes.add(prefix=route.prefix, group_id=draw(st.sampled_from(group_ids)))
    routes = {_route_key(r): r for r in [*state.routes, *delta.upsert_routes]}
    for route in draw(_some(state.routes, unique_by=_route_key)):
        delta.delete_routes.append(route.prefix)
        del routes[_route_key(route)]
    used = {r.group_id for r in routes.values()}
    gone = draw(_some([g.id for g in state.groups], unique=True))
    delta.delete_groups.extend(gid for gid in gone if gid not in used)
    ports = draw(_some([n.port for n in state.neighbors], unique=True))
    delta.delete_neighbors.extend(ports)
    return delta


def _rebuilt(state: state_pb2.DesiredState, **fields: Iterable[Message]) -> state_pb2.DesiredState:
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    for name, items in fields.items():
        del getattr(out, name)[:]
        getattr(out, name).extend(items)
    return out


@settings(deadline=None)
@given(any_states(), st.data())
def test_permuting_repeated_fields_keeps_the_digest(
    state: state_pb2.DesiredState, data: st.DataObject
) -> None:
    before = state.SerializeToString()
    shuffled = _rebuilt(
        state, **{name: data.draw(st.permutations(list(getattr(state, name)))) for name in REPEATED}
    )
    shuffled.generation ^= 1
    shuffled.digest = "anything"
    assert state_digest(shuffled) == state_digest(state)
    assert state.SerializeToString() == before  # the input is neither sorted nor cleared


def _mutate(msg: Message, data: st.DataObject) -> None:
    """Change one field of `msg` (or of a message inside it) to a different value."""
    fields: list[FieldDescriptor] = list(msg.DESCRIPTOR.fields)  # type: ignore[arg-type]
    field = data.draw(st.sampled_from(fields))
    value = getattr(msg, field.name)
    if field.message_type is not None:
        if not field.is_repeated:
            _mutate(value, data)
        elif len(value):
            _mutate(value[data.draw(st.integers(0, len(value) - 1))], data)
        else:
            value.add()  # a group's first next hop
    elif field.type == FieldDescriptor.TYPE_BOOL:
        setattr(msg, field.name, not value)
    elif field.type == FieldDescriptor.TYPE_STRING:
        setattr(msg, field.name, value + "x")
    elif field.type == FieldDescriptor.TYPE_DOUBLE:
        setattr(msg, field.name, value + 1.0)
    elif field.enum_type is not None:
        setattr(msg, field.name, (value + 1) % len(field.enum_type.values))
    else:
        setattr(msg, field.name, value ^ 1)


@settings(max_examples=200, deadline=None)
@given(any_states(), st.data())
def test_changing_any_field_of_any_object_changes_the_digest(
    state: state_pb2.DesiredState, data: st.DataObject
) -> None:
    changed = state_pb2.DesiredState()
    changed.CopyFrom(state)
    choices = [name for name in REPEATED if getattr(changed, name)]
    where = data.draw(st.sampled_from([*choices, "switch_name", "pfc_watchdog", "probing"]))
    if where == "switch_name":
        changed.switch_name += "x"
    elif where == "pfc_watchdog":
        if changed.HasField("pfc_watchdog"):
            _mutate(changed.pfc_watchdog, data)
        else:
            changed.pfc_watchdog.SetInParent()  # an empty watchdog is still a watchdog
    elif where == "probing":
        if changed.HasField("probing"):
            _mutate(changed.probing, data)
        else:
            changed.probing.SetInParent()  # set, even empty: the agent answers only
    else:
        field = getattr(changed, where)
        _mutate(field[data.draw(st.integers(0, len(field) - 1))], data)
    assert state_digest(changed) != state_digest(state)


def test_a_state_without_nak_sampling_digests_as_before_it_existed() -> None:
    state = state_pb2.DesiredState(switch_name="tor")

    def h(tag: bytes, data: bytes) -> int:
        return int.from_bytes(hashlib.sha256(tag + b"\x00" + data).digest(), "big")

    assert state_digest(state) == f"v2:{h(b'switch', b'tor'):064x}"
    state.nak_sampling.SetInParent()  # set, even empty: hashed
    assert state_digest(state) != f"v2:{h(b'switch', b'tor'):064x}"


def test_probing_counts_whole_and_in_order_and_only_when_set() -> None:
    state = state_pb2.DesiredState(switch_name="tor")
    before = state_digest(state)
    state.probing.SetInParent()
    assert state_digest(state) != before  # unset: no probes; set: probes, even with no target
    state.probing.targets.add(name="a", address=1)
    state.probing.targets.add(name="b", address=2)
    swapped = state_pb2.DesiredState()
    swapped.CopyFrom(state)
    swapped.probing.targets[0].name, swapped.probing.targets[1].name = "b", "a"
    swapped.probing.targets[0].address, swapped.probing.targets[1].address = 2, 1
    # The agent probes targets in their order, so the order is content.
    assert state_digest(swapped) != state_digest(state)


def test_the_tag_tells_kinds_with_equal_bytes_apart() -> None:
    dscp = state_pb2.DesiredState(dscp_map=[state_pb2.DscpMapping(dscp=1, traffic_class=2)])
    pfc = state_pb2.DesiredState(pfc=[state_pb2.PfcSetting(port=1, priority=2)])
    assert dscp.dscp_map[0].SerializeToString() == pfc.pfc[0].SerializeToString()
    assert state_digest(dscp) != state_digest(pfc)


def test_digest_is_the_sum_of_tagged_object_hashes() -> None:
    """The scheme written out with hashlib alone, as another implementation would."""
    state = state_pb2.DesiredState(
        switch_name="tor",
        generation=3,
        ports=[state_pb2.PortConfig(port=1, mac=2, speed_mbps=400_000)],
        routes=[
            state_pb2.Route(prefix=state_pb2.Ipv4Prefix(address=10 << 24, length=8), group_id=1)
        ],
        digest="ignored",
    )
    state.pfc_watchdog.detect_ns = 5
    state.nak_sampling.ports.extend([1, 2])
    state.nak_sampling.interval_us = 10_000
    state.probing.interval_ms = 1000
    state.probing.targets.add(name="tor-b", address=0x0A000101)

    def h(tag: bytes, data: bytes) -> int:
        return int.from_bytes(hashlib.sha256(tag + b"\x00" + data).digest(), "big")

    total = (
        h(b"switch", b"tor")
        + h(b"port", state.ports[0].SerializeToString(deterministic=True))
        + h(b"route", state.routes[0].SerializeToString(deterministic=True))
        + h(b"watchdog", state.pfc_watchdog.SerializeToString(deterministic=True))
        + h(b"naks", state.nak_sampling.SerializeToString(deterministic=True))
        + h(b"probing", state.probing.SerializeToString(deterministic=True))
    ) % 2**256
    assert state_digest(state) == f"v2:{total:064x}"
    assert object_hash("route", state.routes[0]) == h(b"route", state.routes[0].SerializeToString())


@settings(deadline=None)
@given(any_states())
def test_the_digest_is_versioned_and_reads_back(state: state_pb2.DesiredState) -> None:
    digest = state_digest(state)
    assert DIGEST_VERSION == 2
    assert digest.startswith("v2:") and len(digest) == 3 + 64
    assert int(digest[3:], 16) < 2**256 and digest[3:] == digest[3:].lower()
    assert DigestAccumulator.from_hex(digest).hex() == digest


@pytest.mark.parametrize(
    "text",
    [
        "",
        "v2:",
        "v1:" + "0" * 64,
        "v3:" + "0" * 64,
        "0" * 64,  # a v1 digest: bare hex SHA-256
        "v2:" + "0" * 63,
        "v2:" + "0" * 65,
        "v2:" + "A" * 64,
        "v2:" + "g" * 64,
        " v2:" + "0" * 64,
        "v2:" + "0" * 64 + "\n",
        "garbage",
    ],
)
def test_from_hex_refuses_anything_but_a_v2_digest(text: str) -> None:
    with pytest.raises(ValueError, match="not a v2 state digest"):
        DigestAccumulator.from_hex(text)


@settings(deadline=None)
@given(any_states(), st.data())
def test_accumulator_adds_and_removes_in_any_order(
    state: state_pb2.DesiredState, data: st.DataObject
) -> None:
    objs: list[tuple[Tag, Message | str]] = [("switch", state.switch_name)]
    tags: tuple[Tag, ...] = ("port", "neighbor", "group", "route", "dscp", "ecn", "pfc")
    for tag, name in zip(tags, REPEATED, strict=True):
        objs += [(tag, obj) for obj in getattr(state, name)]
    if state.HasField("pfc_watchdog"):
        objs.append(("watchdog", state.pfc_watchdog))
    if state.HasField("probing"):
        objs.append(("probing", state.probing))
    acc = DigestAccumulator()
    extra = state_pb2.Route(group_id=99)
    acc.add("route", extra)
    for tag, obj in data.draw(st.permutations(objs)):
        acc.add(tag, obj)
    acc.remove("route", extra)
    assert acc.hex() == state_digest(state)
    assert acc.value == int(state_digest(state)[3:], 16)


@settings(max_examples=200, deadline=None)
@given(keyed_states().flatmap(lambda s: st.tuples(st.just(s), deltas(s))))
def test_apply_delta_updates_the_digest_as_a_full_digest_would(
    case: tuple[state_pb2.DesiredState, state_pb2.StateDelta],
) -> None:
    state, delta = case
    state.digest = state_digest(state)
    got = apply_delta(state, delta)
    assert got.digest == state_digest(got)
    # The same content as the result computed without a digest to start from.
    state.digest = ""
    fresh = apply_delta(state, delta)
    assert fresh.digest == got.digest
    assert canonical(fresh) == canonical(got)


@settings(deadline=None)
@given(keyed_states().flatmap(lambda s: st.tuples(st.just(s), deltas(s))))
def test_apply_delta_starts_from_the_old_digest(
    case: tuple[state_pb2.DesiredState, state_pb2.StateDelta],
) -> None:
    """Unchanged objects keep their contribution: an offset in the old digest carries over,
    which only an incremental update does."""
    state, delta = case
    offset = DigestAccumulator.from_hex(state_digest(state))
    offset.add("route", state_pb2.Route(group_id=12345))
    state.digest = offset.hex()
    got = apply_delta(state, delta)
    expected = DigestAccumulator.from_hex(state_digest(got))
    expected.add("route", state_pb2.Route(group_id=12345))
    assert got.digest == expected.hex()


@pytest.mark.parametrize("old_digest", ["", "0" * 64, "v1:" + "0" * 64, "junk"])
def test_apply_delta_digests_afresh_without_a_v2_digest(old_digest: str) -> None:
    state = state_pb2.DesiredState(switch_name="tor", generation=1, digest=old_digest)
    state.groups.add(id=1, next_hops=[state_pb2.NextHop(port=1)])
    delta = state_pb2.StateDelta(switch_name="tor", from_generation=1, to_generation=2)
    delta.upsert_routes.add(prefix=state_pb2.Ipv4Prefix(address=10 << 24, length=8), group_id=1)
    got = apply_delta(state, delta)
    assert got.digest == state_digest(got)


def test_apply_delta_digests_afresh_when_a_key_repeats() -> None:
    """Two routes for one prefix: the delta result keeps one, the old digest counted both."""
    prefix = state_pb2.Ipv4Prefix(address=10 << 24, length=8)
    state = state_pb2.DesiredState(switch_name="tor", generation=1)
    state.groups.add(id=1)
    state.groups.add(id=2)
    state.routes.add(prefix=prefix, group_id=1)
    state.routes.add(prefix=prefix, group_id=2)
    state.digest = state_digest(state)
    delta = state_pb2.StateDelta(switch_name="tor", from_generation=1, to_generation=2)
    delta.upsert_routes.add(prefix=state_pb2.Ipv4Prefix(address=11 << 24, length=8), group_id=1)
    got = apply_delta(state, delta)
    assert len(got.routes) == 2  # the repeated prefix once, and the new one
    assert got.digest == state_digest(got)
    # A delta that does not touch routes carries them over as they are, digest and all.
    got = apply_delta(
        state, state_pb2.StateDelta(switch_name="tor", from_generation=1, to_generation=2)
    )
    assert len(got.routes) == 2
    assert got.digest == state_digest(got) == state.digest
