"""Properties of the model against brute-force references: LPM picks the longest matching
prefix; member handles are always the lowest free one (bmv2's member order)."""

from __future__ import annotations

import ipaddress

import finsy as fy
import pytest
from finsy.proto import p4i
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import fabric_p4 as p4
from softswitch.p4state import P4Error
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
