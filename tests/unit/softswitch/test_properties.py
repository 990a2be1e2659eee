"""Properties of the model against brute-force references: LPM picks the longest matching
prefix; member handles are always the lowest free one (bmv2's member order); a WriteRequest
applied with its plain entries read from their bytes answers as the general path does."""

from __future__ import annotations

import ipaddress
from typing import Any

import finsy as fy
import pytest
from finsy.proto import p4i, p4r
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import fabric_p4 as p4
from softswitch.p4state import Code, P4Error
from softswitch.pipeline import Pipeline
from softswitch.schema import FabricSchema
from tests.unit.softswitch.conftest import CPU_PORT, DATA_PORTS

pytestmark = pytest.mark.unit


prefixes = st.dictionaries(
    st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 32)).map(
        lambda vp: (vp[0] & ((0xFFFFFFFF << (32 - vp[1])) & 0xFFFFFFFF), vp[1])
    ),
    st.sampled_from(DATA_PORTS),
    max_size=30,
)


def _frame(dst: int) -> bytes:
    pkt = Ether() / IP(src="192.0.2.1", dst=str(ipaddress.IPv4Address(dst))) / UDP(dport=9)
    return bytes(pkt)


@settings(max_examples=60, deadline=None)
@given(routes=prefixes, probes=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20))
def test_lpm_matches_brute_force(
    p4info: p4i.P4Info,
    fy_schema: fy.P4Schema,
    routes: dict[tuple[int, int], int],
    probes: list[int],
) -> None:
    pipeline = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    apply = pipeline.state.apply
    for port in DATA_PORTS:
        apply(
            (
                +fy.P4ActionProfileMember(
                    p4.ECMP_SELECTOR,
                    member_id=port,
                    action=fy.P4TableAction(p4.SET_NEXTHOP, port=port, smac=1, dmac=2),
                )
            ).encode_update(fy_schema)
        )
        apply(
            (
                +fy.P4TableEntry(
                    p4.NEXT,
                    match=fy.P4TableMatch(next_id=port),
                    action=fy.P4IndirectAction(member_id=port),
                )
            ).encode_update(fy_schema)
        )
    for (value, plen), port in routes.items():
        apply(
            (
                +fy.P4TableEntry(
                    p4.ROUTING_V4,
                    match=fy.P4TableMatch(ipv4_dst=(value, plen)),
                    action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=port),
                )
            ).encode_update(fy_schema)
        )
    # Probe the routes' own addresses too, so matches are common.
    for dst in probes + [v for v, _ in routes]:
        best = None
        for (value, plen), port in routes.items():
            mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
            if dst & mask == value and (best is None or plen > best[0]):
                best = (plen, port)
        out = pipeline.process(_frame(dst), 1)
        if best is None:
            assert out is None
        else:
            assert out is not None and out.port == best[1]


ops = st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=60)


@settings(max_examples=80, deadline=None)
@given(sequence=ops)
def test_member_handle_is_lowest_free(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema, sequence: list[tuple[bool, int]]
) -> None:
    pipeline = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    model: dict[int, int] = {}  # member id -> handle
    profile = pipeline.schema.profile_id
    for insert, member_id in sequence:
        entity = fy.P4ActionProfileMember(
            p4.ECMP_SELECTOR,
            member_id=member_id,
            action=fy.P4TableAction(p4.SET_NEXTHOP, port=1, smac=1, dmac=2),
        )
        update = (+entity if insert else -entity).encode_update(fy_schema)
        try:
            pipeline.state.apply(update)
        except P4Error:
            assert (member_id in model) == insert  # duplicate insert / missing delete
            continue
        if insert:
            used = set(model.values())
            model[member_id] = min(h for h in range(len(used) + 1) if h not in used)
        else:
            del model[member_id]
        handles = {m: s.handle for m, s in pipeline.state.members[profile].items()}
        assert handles == model


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=120),
    ethertype=st.sampled_from([b"\x08\x00", b"\x88\xcc", b"\x88\x08", b"\x86\xdd", b""]),
    in_port=st.integers(0, 511),
)
def test_arbitrary_frames_never_raise(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema, data: bytes, ethertype: bytes, in_port: int
) -> None:
    """Truncated, garbage or hostile frames are dropped or forwarded, never an exception."""
    pipeline = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    for update in (
        +fy.P4ActionProfileMember(
            p4.ECMP_SELECTOR,
            member_id=1,
            action=fy.P4TableAction(p4.SET_NEXTHOP, port=2, smac=1, dmac=2),
        ),
        +fy.P4ActionProfileGroup(
            p4.ECMP_SELECTOR, group_id=1, members=[fy.P4Member(1, weight=(1, 2))]
        ),
        +fy.P4TableEntry(
            p4.NEXT,
            match=fy.P4TableMatch(next_id=1),
            action=fy.P4IndirectAction(group_id=1),
        ),
        +fy.P4TableEntry(
            p4.ROUTING_V4,
            match=fy.P4TableMatch(ipv4_dst="0.0.0.0/1"),
            action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=1),
        ),
        +fy.P4TableEntry(
            p4.ACL,
            match=fy.P4TableMatch(eth_type=0x88CC),
            action=fy.P4TableAction(p4.PUNT_TO_CPU),
            priority=1,
        ),
    ):
        pipeline.state.apply(update.encode_update(fy_schema))
    frame = data[:12] + ethertype + data[12:] if len(data) >= 12 else data
    out = pipeline.process(frame, in_port)
    if out is None:
        assert sum(pipeline.drops.values()) == 1
    else:
        assert out.port in (2, CPU_PORT)


def _write_update(
    kind: int,
    table: str,
    match: tuple[str, bytes, int] | None,
    action: tuple[int, tuple[bytes, ...]] | int | None,
    extra: str,
) -> p4r.Update:
    """One table update, in the plain form or any of the forms around it."""
    te = p4r.TableEntry(table_id=p4.ROUTING_V4_ID if table == "routing" else p4.QOS_CLASSIFY_ID)
    field_id = p4.ROUTING_V4_IPV4_DST_ID if table == "routing" else p4.QOS_CLASSIFY_DSCP_ID
    if match is not None:
        how, value, prefix_len = match
        if how == "lpm":
            te.match.add(
                field_id=field_id, lpm=p4r.FieldMatch.LPM(value=value, prefix_len=prefix_len)
            )
        elif how == "exact":
            te.match.add(field_id=field_id, exact=p4r.FieldMatch.Exact(value=value))
        else:  # the field twice
            te.match.add(
                field_id=field_id, lpm=p4r.FieldMatch.LPM(value=value, prefix_len=prefix_len)
            )
            te.match.add(field_id=field_id, exact=p4r.FieldMatch.Exact(value=value))
    if isinstance(action, int):
        te.action.action_profile_member_id = action
    elif action is not None:
        action_id, params = action
        te.action.action.action_id = action_id
        for param_id, value in enumerate(params, start=1):
            te.action.action.params.add(param_id=param_id, value=value)
    if extra == "priority":
        te.priority = 1
    elif extra == "default":
        te.is_default_action = True
    elif extra == "metadata":
        te.controller_metadata = 7
    elif extra == "counter":
        te.counter_data.packet_count = 1
    return p4r.Update(type=kind, entity=p4r.Entity(table_entry=te))  # type: ignore[arg-type]


def _encoded(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


# Few distinct values, so that batches insert, modify and delete the same entries again.
_values = st.one_of(
    st.sampled_from([0x0A000000, 0x0A010000, 0x0B000000, 0xC0A80100, 1, 26, 63]).map(_encoded),
    st.binary(max_size=6),  # empty, padded, too wide, ...
)
_matches = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["lpm", "lpm", "exact", "exact", "both"]),
        _values,
        st.sampled_from([0, 8, 16, 24, 32, 33, 200]),
    ),
)
_params = st.one_of(
    st.sampled_from([b"\x01", b"\x03", b"\x00\x01", b"", b"\x01" * 5]), st.binary(max_size=5)
)
_actions = st.one_of(
    st.none(),
    st.integers(0, 2),  # an action profile member
    st.tuples(
        st.sampled_from([p4.SET_NEXT_ID_ID, p4.SET_TRAFFIC_CLASS_ID, p4.DROP_ID, 12345]),
        st.lists(_params, max_size=2).map(tuple),
    ),
)
_kinds = st.sampled_from([p4r.Update.INSERT] * 3 + [p4r.Update.MODIFY] * 2 + [p4r.Update.DELETE])
# Plain entries (the form write_plain reads) and a few that only look plain, on a few keys
# and actions so that they repeat.
_plain_updates = st.one_of(
    st.builds(
        _write_update,
        _kinds,
        st.just("routing"),
        st.sampled_from(  # the last has host bits set: refused
            [
                (0x0A000000, 8),
                (0x0A010000, 16),
                (0x0B000000, 8),
                (0xC0A80100, 24),
                (1, 32),
                (0x0A000001, 8),
            ]
        ).map(lambda vp: ("lpm", _encoded(vp[0]), vp[1])),
        st.sampled_from([b"\x01", b"\x03"]).map(lambda v: (p4.SET_NEXT_ID_ID, (v,))),
        st.just(""),
    ),
    st.builds(
        _write_update,
        _kinds,
        st.just("qos"),
        st.sampled_from([0, 26, 46, 64]).map(  # 64: wider than bit<6>, refused
            lambda v: ("exact", _encoded(v), 0)
        ),
        st.sampled_from([b"\x01", b"\x03"]).map(lambda v: (p4.SET_TRAFFIC_CLASS_ID, (v,))),
        st.just(""),
    ),
)
# Any form around them: other matches, values, actions, fields and update types.
_any_updates = st.builds(
    _write_update,
    st.sampled_from([p4r.Update.INSERT] * 3 + [p4r.Update.MODIFY] * 2 + [p4r.Update.DELETE, 0, 9]),
    st.sampled_from(["routing", "routing", "qos"]),
    _matches,
    _actions,
    st.sampled_from(["", "", "", "", "priority", "default", "metadata", "counter"]),
)
_updates = st.one_of(_plain_updates, _any_updates)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(_updates, max_size=12), min_size=1, max_size=4))
def test_a_write_request_applied_from_bytes_gives_what_the_general_path_gives(
    p4info: p4i.P4Info, batches: list[list[p4r.Update]]
) -> None:
    """`P4State.apply_all` (a WriteRequest's updates, plain entries read from their bytes)
    answers every update with the code and message that `apply` one by one without the plain
    form gives (the server's loop before), refusals included, and leaves the same entries,
    reads and lookups."""
    plain = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    general = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    general.state.tables.shapes.clear()
    for batch in batches:
        copies = []
        for update in batch:
            copy = p4r.Update()
            copy.CopyFrom(update)
            copies.append(copy)
        errors = plain.state.apply_all(batch)
        got = [(e.code, e.message) if e else None for e in errors or [None] * len(batch)]
        expected: list[tuple[Code, str] | None] = []
        for copy in copies:
            try:
                general.state.apply(copy)
                expected.append(None)
            except P4Error as err:
                expected.append((err.code, err.message))
        assert got == expected
        assert errors is None or any(errors)  # None exactly when every update applied
    query = [p4r.Entity(table_entry=p4r.TableEntry())]
    assert plain.state.read_all(query) == general.state.read_all(query)
    assert plain.state.entries == general.state.entries
    assert (plain._lpm, plain._qos) == (general._lpm, general._qos)


def test_the_random_write_requests_reach_the_plain_path(p4info: p4i.P4Info) -> None:
    """The forms the property above draws from include plain ones that write_plain takes
    (else it would compare the general path with itself)."""
    pipeline = Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)
    taken: list[bool] = []
    write_plain = pipeline.state.tables.write_plain

    def counted(*args: Any) -> bool:
        taken.append(write_plain(*args))
        return taken[-1]

    pipeline.state.tables.write_plain = counted  # type: ignore[method-assign,assignment]
    route = (p4.SET_NEXT_ID_ID, (b"\x01",))
    updates = [
        _write_update(p4r.Update.INSERT, "routing", ("lpm", _encoded(0x0A000000), 8), route, ""),
        _write_update(p4r.Update.INSERT, "routing", ("lpm", _encoded(0x0B000000), 8), route, ""),
        _write_update(p4r.Update.MODIFY, "routing", ("lpm", _encoded(0x0B000000), 8), route, ""),
        _write_update(p4r.Update.INSERT, "routing", ("lpm", _encoded(0x0B000000), 8), route, ""),
    ]
    errors = pipeline.state.apply_all(updates)
    assert errors is not None and [e and e.code for e in errors] == [
        None,
        None,
        None,
        Code.ALREADY_EXISTS,
    ]
    # The first decodes the action (left by write_plain, then general); the next two are read
    # from their bytes, and the fourth is refused there (it raised: no answer recorded).
    assert taken == [False, False, True, True]
