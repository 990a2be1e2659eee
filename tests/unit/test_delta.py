"""apply_delta(old, diff_states(old, new)) is new, for any two states; bad deltas are refused."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railfabric.delta import (
    DeltaError,
    StateIndex,
    apply_delta,
    apply_delta_in_place,
    delta_size,
    diff_states,
    packed,
)
from railfabric.digest import canonical, state_digest
from railfabric.v1 import state_pb2

pytestmark = pytest.mark.unit

_prefixes = st.tuples(st.integers(0, 255), st.sampled_from([16, 24, 32]))
_groups = st.dictionaries(
    st.integers(1, 8),
    st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
    max_size=6,
)


@st.composite
def states(draw: st.DrawFn) -> state_pb2.DesiredState:
    groups = draw(_groups)
    s = state_pb2.DesiredState(
        switch_name="tor",
        generation=draw(st.integers(0, 50)),
        ecmp_hash=draw(st.sampled_from(state_pb2.EcmpHash.values())),
    )
    for gid, ports in groups.items():
        s.groups.add(
            id=gid, next_hops=[state_pb2.NextHop(port=p, dmac=p, weight=1) for p in sorted(ports)]
        )
    if groups:
        for third, length in draw(st.lists(_prefixes, max_size=8, unique=True)):
            s.routes.add(
                prefix=state_pb2.Ipv4Prefix(address=(10 << 24) | (third << 8), length=length),
                group_id=draw(st.sampled_from(sorted(groups))),
            )
    for port in draw(st.lists(st.integers(1, 6), max_size=4, unique=True)):
        s.ecn.add(port=port, traffic_class=3, kmin_bytes=draw(st.integers(1, 9)))
        s.neighbors.add(port=port, peer_name=f"p{port}", peer_mac=draw(st.integers(1, 3)))
    if draw(st.booleans()):  # a ToR's traffic matrix
        s.matrix.source_ports.extend(draw(st.lists(st.integers(1, 6), max_size=3, unique=True)))
        for dst_class, third in enumerate(draw(st.lists(st.integers(0, 255), max_size=3))):
            s.matrix.classes.add(
                prefix=state_pb2.Ipv4Prefix(address=(10 << 24) | (third << 8), length=24),
                dst_class=dst_class,
            )
    if draw(st.booleans()):  # a ToR's NAK sampling
        s.nak_sampling.ports.extend(draw(st.lists(st.integers(1, 6), max_size=3, unique=True)))
        s.nak_sampling.interval_us = draw(st.integers(100, 20_000))
    if draw(st.booleans()):  # probing; a ToR's with mesh targets
        s.probing.interval_ms = draw(st.sampled_from([100, 1000]))
        for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True)):
            s.probing.targets.add(name=name, address=ord(name))
    return s


def _only_full_states_change(old: state_pb2.DesiredState, new: state_pb2.DesiredState) -> None:
    """`new` with what only a full state changes taken from `old`."""
    new.ecmp_hash = old.ecmp_hash
    new.matrix.CopyFrom(old.matrix)
    if not old.HasField("matrix"):
        new.ClearField("matrix")
    new.nak_sampling.CopyFrom(old.nak_sampling)
    if not old.HasField("nak_sampling"):
        new.ClearField("nak_sampling")
    new.probing.CopyFrom(old.probing)
    if not old.HasField("probing"):
        new.ClearField("probing")


@settings(max_examples=200, deadline=None)
@given(states(), states())
def test_diff_then_apply_reaches_the_new_state(
    old: state_pb2.DesiredState, new: state_pb2.DesiredState
) -> None:
    for port in {e.port for e in old.ecn} - {e.port for e in new.ecn}:
        new.ecn.add(port=port, traffic_class=3)  # ECN entries are never deleted by deltas
    _only_full_states_change(old, new)
    delta = diff_states(old, new)
    got = apply_delta(old, delta)
    assert got.generation == old.generation + 1
    assert state_digest(got) == state_digest(new) == delta.digest == got.digest
    # The same content, every field carried over (the ECMP hash was once lost here; the
    # matrix too).
    new.generation, new.digest = got.generation, got.digest
    assert canonical(got) == canonical(new)
    if state_digest(old) == state_digest(new):
        assert delta_size(delta) == 0


def _sorted_state(state: state_pb2.DesiredState) -> state_pb2.DesiredState:
    """`state` as the controller makes them: routes ascending, a v2 digest."""
    state.routes.sort(key=lambda r: (r.prefix.address, r.prefix.length))
    state.digest = state_digest(state)
    return state


def _copy(state: state_pb2.DesiredState) -> state_pb2.DesiredState:
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    return out


def _assert_index_current(state: state_pb2.DesiredState, index: StateIndex) -> None:
    assert StateIndex.check(state)  # routes still ascending, group ids unique
    assert index.groups == StateIndex(state).groups
    if index.refs is not None:
        assert {g: n for g, n in index.refs.items() if n} == Counter(
            r.group_id for r in state.routes
        )


def _next_step(
    reference: state_pb2.DesiredState, new: state_pb2.DesiredState
) -> tuple[state_pb2.StateDelta, state_pb2.DesiredState]:
    """The delta from `reference` to `new` (made a step of a chain the controller would
    make: the next generation, no ECN entry removed) and apply_delta's result of it."""
    for port in {e.port for e in reference.ecn} - {e.port for e in new.ecn}:
        new.ecn.add(port=port, traffic_class=3)
    _only_full_states_change(reference, new)
    new.generation = reference.generation + 1
    delta = diff_states(reference, new)
    return delta, apply_delta(reference, delta)


@settings(max_examples=200, deadline=None)
@given(st.lists(states(), min_size=2, max_size=5))
def test_in_place_follows_a_chain_as_apply_delta_does(chain: list[state_pb2.DesiredState]) -> None:
    """A chain of deltas applied in place to one state with one index (the controller's way)
    against apply_delta's copies, step by step."""
    here = _sorted_state(chain[0])
    index = StateIndex(here)
    reference = _copy(here)
    for new in chain[1:]:
        delta, expected = _next_step(reference, new)
        changed = apply_delta_in_place(here, delta, index)
        if not changed:  # nothing changed: the state is untouched, generation included
            assert expected.digest == reference.digest
            assert canonical(here) == canonical(reference)  # apply_delta's order is not kept
            assert here.generation == reference.generation
            continue
        assert here.digest == expected.digest == state_digest(here) == state_digest(new)
        assert canonical(here) == canonical(expected)
        _assert_index_current(here, index)
        reference = expected


_delta_ops = st.fixed_dictionaries(
    {
        "upsert_groups": st.lists(st.integers(1, 9), max_size=3),
        "delete_groups": st.lists(st.integers(1, 9), max_size=2),
        "upsert_routes": st.lists(st.tuples(_prefixes, st.integers(1, 9)), max_size=3),
        "delete_routes": st.lists(_prefixes, max_size=2),
    }
)


@settings(max_examples=400, deadline=None)
@given(states(), st.lists(_delta_ops, min_size=1, max_size=4))
def test_in_place_refuses_and_accepts_what_apply_delta_does(
    old: state_pb2.DesiredState, ops: list[dict[str, list[Any]]]
) -> None:
    """Arbitrary deltas, most of them wrong (unknown deletes, routes to missing groups): in
    place gives apply_delta's result or its error, and a refused delta leaves state and index
    as they were."""
    here = _sorted_state(old)
    index = StateIndex(here)
    reference = _copy(here)
    for op in ops:
        delta = state_pb2.StateDelta(
            switch_name="tor",
            from_generation=reference.generation,
            to_generation=reference.generation + 1,
            delete_groups=op["delete_groups"],
        )
        for gid in op["upsert_groups"]:
            delta.upsert_groups.add(id=gid, next_hops=[state_pb2.NextHop(port=gid, dmac=9)])
        for (third, length), gid in op["upsert_routes"]:
            delta.upsert_routes.add(
                prefix=state_pb2.Ipv4Prefix(address=(10 << 24) | (third << 8), length=length),
                group_id=gid,
            )
        for third, length in op["delete_routes"]:
            delta.delete_routes.add(address=(10 << 24) | (third << 8), length=length)
        try:
            expected = apply_delta(reference, delta)
        except DeltaError as err:
            before = _copy(here)
            with pytest.raises(DeltaError) as got:
                apply_delta_in_place(here, delta, index)
            assert str(got.value) == str(err)
            assert here == before
            _assert_index_current(here, index)
            continue
        changed = apply_delta_in_place(here, delta, index)
        assert changed == (expected.digest != reference.digest)
        if changed:
            assert canonical(here) == canonical(expected) and here.digest == expected.digest
            reference = expected
        _assert_index_current(here, index)


def test_in_place_counts_routes_per_group_only_when_a_group_goes() -> None:
    state = state_pb2.DesiredState(switch_name="tor", generation=1)
    for gid in (4, 5):
        state.groups.add(id=gid, next_hops=[state_pb2.NextHop(port=gid)])
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000000, length=24), group_id=4)
    state = _sorted_state(state)
    index = StateIndex(state)
    delta = state_pb2.StateDelta(switch_name="tor", from_generation=1, to_generation=2)
    delta.upsert_routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000000, length=24), group_id=5)
    assert apply_delta_in_place(state, delta, index)
    assert index.refs is None  # a route moved: no count of every route needed
    delta = state_pb2.StateDelta(
        switch_name="tor", from_generation=2, to_generation=3, delete_groups=[5]
    )
    with pytest.raises(DeltaError, match=r"routes point at missing groups \[5\]"):
        apply_delta_in_place(state, delta, index)
    assert index.refs == {5: 1}
    delta.delete_groups[:] = [4]
    assert apply_delta_in_place(state, delta, index)
    assert [g.id for g in state.groups] == [5] and index.groups == {5: 0}
    assert state.digest == state_digest(state)


def test_delta_for_another_generation_is_refused() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=3)
    delta = state_pb2.StateDelta(switch_name="tor", from_generation=2, to_generation=3)
    with pytest.raises(DeltaError, match="tor: delta is from generation 2, state is at 3"):
        apply_delta(old, delta)


def test_deleting_a_group_still_in_use_is_refused() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=1)
    old.groups.add(id=4, next_hops=[state_pb2.NextHop(port=1)])
    old.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000000, length=24), group_id=4)
    delta = state_pb2.StateDelta(
        switch_name="tor", from_generation=1, to_generation=2, delete_groups=[4]
    )
    with pytest.raises(DeltaError, match=r"routes point at missing groups \[4\]"):
        apply_delta(old, delta)
    with pytest.raises(DeltaError, match=r"routes point at missing groups \[4\]"):
        apply_delta_in_place(_sorted_state(old), delta, StateIndex(old))  # in place too
    delta = state_pb2.StateDelta(
        switch_name="tor",
        from_generation=1,
        to_generation=2,
        delete_routes=[state_pb2.Ipv4Prefix(address=0x0A000100, length=24)],
    )
    with pytest.raises(DeltaError, match=r"unknown route 10.0.1.0/24"):
        apply_delta(old, delta)


def test_an_empty_delta_keeps_ports_qos_map_and_watchdog() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=1)
    old.ports.add(port=1, mac=2, speed_mbps=400_000)
    old.dscp_map.add(dscp=26, traffic_class=3)
    old.pfc_watchdog.detect_ns = 200_000_000
    got = apply_delta(old, diff_states(old, old))
    assert state_digest(got) == state_digest(old)
    assert got.pfc_watchdog.detect_ns == 200_000_000
    assert got.ports[0].speed_mbps == 400_000


def test_a_changed_traffic_matrix_needs_a_full_state() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=1)
    old.matrix.source_ports.append(1)
    new = state_pb2.DesiredState()
    new.CopyFrom(old)
    new.matrix.source_ports.append(2)
    with pytest.raises(
        DeltaError, match="traffic matrix, NAK sampling or probing changed; send a full state"
    ):
        diff_states(old, new)


def test_a_changed_nak_sampling_needs_a_full_state() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=1)
    old.nak_sampling.ports.append(1)
    old.nak_sampling.interval_us = 10_000
    for change in ("interval", "unset"):
        new = state_pb2.DesiredState()
        new.CopyFrom(old)
        if change == "interval":
            new.nak_sampling.interval_us = 20_000
        else:
            new.ClearField("nak_sampling")
        with pytest.raises(DeltaError, match="NAK sampling or probing changed; send a full state"):
            diff_states(old, new)
    # Unchanged, a delta carries it over.
    got = apply_delta(old, diff_states(old, old))
    assert got.nak_sampling == old.nak_sampling


def test_a_changed_probing_needs_a_full_state() -> None:
    old = state_pb2.DesiredState(switch_name="tor", generation=1)
    old.probing.interval_ms = 1000
    old.probing.targets.add(name="tor-b", address=2)
    for change in ("target", "interval", "unset"):
        new = state_pb2.DesiredState()
        new.CopyFrom(old)
        if change == "target":
            new.probing.targets[0].address = 3
        elif change == "interval":
            new.probing.interval_ms = 0
        else:
            new.ClearField("probing")
        with pytest.raises(DeltaError, match="probing changed; send a full state"):
            diff_states(old, new)
    # A routing delta carries it over, digest and all.
    old.groups.add(id=1, next_hops=[state_pb2.NextHop(port=1, dmac=1, weight=1)])
    old.digest = state_digest(old)
    delta = state_pb2.StateDelta(
        switch_name="tor", from_generation=1, to_generation=2, delete_groups=[1]
    )
    got = apply_delta(old, delta)
    assert got.probing == old.probing and got.digest == state_digest(got)


@settings(max_examples=200, deadline=None)
@given(st.lists(states(), min_size=2, max_size=5), st.lists(st.booleans(), min_size=4, max_size=4))
def test_a_state_packed_between_deltas_goes_on_as_the_same_state(
    chain: list[state_pb2.DesiredState], packs: list[bool]
) -> None:
    """In-place application counts what it writes (what the state's memory keeps once
    replaced); `packed` gives the same state in a new message, its index current and its
    count at 0, and the chain goes on from it as from the unpacked one."""
    here = _sorted_state(chain[0])
    index = StateIndex(here)
    reference = _copy(here)
    for new, pack in zip(chain[1:], packs, strict=False):
        delta, expected = _next_step(reference, new)
        written = index.written
        changed = apply_delta_in_place(here, delta, index)
        assert (index.written > written) == changed  # nothing written when nothing changed
        if pack:
            before = _copy(here)
            here, index = packed(here, index)
            assert here == before and index.written == 0
            assert index.size == here.ByteSize()  # known from the packing, not measured again
            _assert_index_current(here, index)
        if changed:
            assert canonical(here) == canonical(expected)
            reference = expected
