"""Intent → pipeline entries, and the ordered diff between what a target has and wants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.translate import (
    U32_MAX,
    AclAction,
    AclEntry,
    EcnEntry,
    GroupEntry,
    GroupMember,
    HashConfigEntry,
    MatrixDestEntry,
    MatrixSourceEntry,
    MemberEntry,
    NextEntry,
    Op,
    PfcEntry,
    PfcWatchdogEntry,
    Pipeline,
    QosEntry,
    RouteEntry,
    Translation,
    Update,
    diff,
    ecn_entry,
    format_ipv4,
    format_mac,
    pfc_entry,
    repair,
    repair_updates,
    staged_diff,
    translate,
)
from railfabric.fabric_p4 import MATRIX_COUNTER_SIZE as MATRIX_CLASSES
from railfabric.v1 import state_pb2
from tests.unit.agent.samples import HOST_MAC, SPINE_MACS, port_mac, tor_state, with_matrix

pytestmark = pytest.mark.unit


def test_groups_become_one_member_per_port_with_local_smac_and_watch_port() -> None:
    pipeline, problems = translate(tor_state())
    assert problems == []
    members = sorted(pipeline.of_type(MemberEntry), key=lambda m: m.key)
    assert members == [
        MemberEntry(1, 1, port_mac(1), SPINE_MACS[1]),
        MemberEntry(2, 2, port_mac(2), SPINE_MACS[2]),
        MemberEntry(3, 3, port_mac(3), HOST_MAC),
    ]
    assert pipeline.entries[("group", 1)] == GroupEntry(
        1, (GroupMember(1, 1, 1), GroupMember(2, 2, 1))
    )
    assert pipeline.entries[("next", 1)] == NextEntry(1, 1)
    assert pipeline.entries[("route", 0, 0)] == RouteEntry(0, 0, 1)
    assert pipeline.entries[("route", 0x0A000003, 32)] == RouteEntry(0x0A000003, 32, 2)


def test_qos_ecn_pfc_and_the_control_acl() -> None:
    pipeline, _ = translate(tor_state())
    assert pipeline.entries[("qos", 26)] == QosEntry(26, 3)
    assert pipeline.entries[("qos", 48)] == QosEntry(48, 6)
    assert pipeline.entries[("ecn", 1, 3)] == EcnEntry(1, 3, 100_000, 400_000, 200_000)
    assert pipeline.entries[("pfc", 1, 3)] == PfcEntry(1, 3, 300_000, 200_000)
    acl = {(e.eth_type, e.action) for e in pipeline.of_type(AclEntry)}  # type: ignore[union-attr]
    assert acl == {
        (0x88CC, AclAction.PUNT_TO_CPU),
        (0x88B5, AclAction.ANSWER_PROBE),  # link probes: the data plane answers
        (0x8808, AclAction.DROP),
    }


def test_unit_conversions_are_checked_against_the_32_bit_parameters() -> None:
    ok = state_pb2.EcnThreshold(
        port=4, traffic_class=3, kmin_bytes=150_000, kmax_bytes=1_500_000, pmax_ppm=1_000_000
    )
    assert ecn_entry(ok) == EcnEntry(4, 3, 150_000, 1_500_000, 1_000_000)
    cases = [
        (dict(kmin_bytes=10, kmax_bytes=1 << 32), "exceeds the 32-bit"),
        (dict(kmin_bytes=20, kmax_bytes=10), "kmin_bytes 20 > kmax_bytes 10"),
        (dict(kmax_bytes=10, pmax_ppm=1_000_001), "pmax_ppm 1000001 exceeds 1000000"),
        (dict(traffic_class=8), "traffic_class must be 0..7"),
        (dict(port=255), "port 255 is not a front-panel port"),
    ]
    for change, message in cases:
        bad = state_pb2.EcnThreshold(port=4, traffic_class=3)
        for name, value in change.items():
            setattr(bad, name, value)
        with pytest.raises(ValueError, match=message):
            ecn_entry(bad)
    with pytest.raises(ValueError, match="xon_bytes 9 > xoff_bytes 8"):
        pfc_entry(state_pb2.PfcSetting(port=1, priority=3, xoff_bytes=8, xon_bytes=9))


def test_formatting_helpers() -> None:
    assert format_ipv4(0x0A010203) == "10.1.2.3"
    assert format_mac(0x020000001001) == "02:00:00:00:10:01"


def test_bad_objects_are_skipped_and_named_the_rest_is_kept() -> None:
    state = tor_state()
    bad = state.groups.add(id=9)
    bad.next_hops.add(port=7, dmac=0x020000000007, weight=1)  # port 7 has no PortConfig
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A090000, length=16), group_id=9)
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A090001, length=16), group_id=1)
    pipeline, problems = translate(state)
    by_object = {p.object: p.message for p in problems}
    assert "port 7 has no PortConfig" in by_object["group 9"]
    assert "group 9 is missing or was refused" in by_object["route 10.9.0.0/16"]
    assert "host bits set" in by_object["route 10.9.0.1/16"]
    assert ("group", 9) not in pipeline.entries
    assert ("group", 1) in pipeline.entries


def test_two_dmacs_on_one_port_are_refused() -> None:
    state = tor_state()
    other = state.groups.add(id=5)
    other.next_hops.add(port=1, dmac=0x02_00_00_00_99_99, weight=1)
    _, problems = translate(state)
    assert [p.object for p in problems] == ["group 5"]
    assert "conflicts with 02:00:00:00:10:01" in problems[0].message


def test_same_state_gives_no_update_so_a_restart_writes_nothing() -> None:
    pipeline, _ = translate(tor_state())
    again, _ = translate(tor_state(generation=7))
    assert diff(pipeline, again) == []


def test_initial_programming_is_ordered_members_groups_next_routes() -> None:
    pipeline, _ = translate(tor_state())
    batches = diff(Pipeline(), pipeline)
    assert all(u.op is Op.INSERT for batch in batches for u in batch)
    kinds = [{type(u.entry) for u in batch} for batch in batches]
    assert kinds == [
        {AclEntry, QosEntry, EcnEntry, PfcEntry, HashConfigEntry, PfcWatchdogEntry, MemberEntry},
        {GroupEntry},
        {NextEntry},
        {RouteEntry},
    ]
    members = [u.entry for u in batches[0] if isinstance(u.entry, MemberEntry)]
    assert [m.port for m in members] == [1, 2, 3]  # creation order = ascending port


def test_deleting_everything_goes_routes_next_groups_members() -> None:
    pipeline, _ = translate(tor_state())
    batches = diff(pipeline, Pipeline())
    assert all(u.op is Op.DELETE for batch in batches for u in batch)
    kinds = [{type(u.entry) for u in batch} for batch in batches]
    assert kinds == [
        {AclEntry, QosEntry, EcnEntry, PfcEntry, HashConfigEntry, PfcWatchdogEntry},
        {RouteEntry},
        {NextEntry},
        {GroupEntry},
        {MemberEntry},
    ]


def test_a_port_leaving_every_group_keeps_its_member() -> None:
    before, _ = translate(tor_state())
    state = tor_state(generation=2)
    del state.groups[0].next_hops[0]  # controller stops using port 1
    after, _ = translate(state)
    batches = diff(before, after)
    assert batches == [[Update(Op.MODIFY, GroupEntry(1, (GroupMember(2, 0, 1),)))]]
    assert ("member", 1) in after.entries


def test_local_repair_is_one_batch_of_group_modifies() -> None:
    state = tor_state()
    state.groups.add(id=3).next_hops.add(port=1, dmac=SPINE_MACS[1], weight=1)
    pipeline, _ = translate(state)
    repaired = repair(pipeline, frozenset({1}))
    batches = diff(pipeline, repaired)
    assert len(batches) == 1
    assert {(u.op, u.entry.key) for u in batches[0]} == {
        (Op.MODIFY, ("group", 1)),
        (Op.MODIFY, ("group", 3)),
    }
    assert repaired.entries[("group", 1)] == GroupEntry(1, (GroupMember(2, 0, 1),))
    assert repaired.entries[("group", 3)] == GroupEntry(3, ())
    assert repaired.entries[("member", 1)] == pipeline.entries[("member", 1)]


def test_repair_updates_are_the_diff_of_the_repaired_pipeline() -> None:
    state = tor_state()
    state.groups.add(id=3).next_hops.add(port=1, dmac=SPINE_MACS[1], weight=1)
    pipeline, _ = translate(state)
    for port in (1, 2, 3, 9):
        (expected,) = diff(pipeline, repair(pipeline, frozenset({port}))) or [[]]
        assert repair_updates(pipeline, port) == expected
    fixed = pipeline.replaced(u.entry for u in repair_updates(pipeline, 1))
    assert fixed == repair(pipeline, frozenset({1}))


def test_pfc_watchdog_is_the_intents_timing_in_microseconds() -> None:
    state = tor_state()
    state.pfc_watchdog.detect_ns, state.pfc_watchdog.restore_ns = 1_000_000_000, 250_500_000
    pipeline, problems = translate(state)
    assert problems == []
    assert pipeline.entries[("pfc_watchdog",)] == PfcWatchdogEntry((1_000_000, 250_500))
    state.ClearField("pfc_watchdog")  # none given: the target's own timing
    assert translate(state)[0].entries[("pfc_watchdog",)] == PfcWatchdogEntry(None)


@pytest.mark.parametrize(
    ("detect_ns", "restore_ns", "field"),
    [(1_500, 200_000_000, "detect_ns"), (0, 200_000_000, "detect_ns"),
     (200_000_000, (U32_MAX + 1) * 1000, "restore_ns")],
)  # fmt: skip
def test_a_pfc_watchdog_the_table_cannot_hold_is_a_problem_and_keeps_the_targets(
    detect_ns: int, restore_ns: int, field: str
) -> None:
    state = tor_state()
    state.pfc_watchdog.detect_ns, state.pfc_watchdog.restore_ns = detect_ns, restore_ns
    pipeline, problems = translate(state)
    assert pipeline.entries[("pfc_watchdog",)] == PfcWatchdogEntry(None)
    assert [p.object for p in problems] == ["pfc_watchdog"]
    assert f"pfc_watchdog.{field}" in problems[0].message


def test_a_tors_traffic_matrix_becomes_its_entries_and_bad_classes_are_problems() -> None:
    state = with_matrix(tor_state())
    pipeline, problems = translate(state)
    assert problems == []
    assert {k: e for k, e in pipeline.entries.items() if str(k[0]).startswith("matrix")} == {
        ("matrix_source", 3): MatrixSourceEntry(3),
        ("matrix_dest", 0x0A000000, 29): MatrixDestEntry(0x0A000000, 29, 0),
        ("matrix_dest", 0x0A000008, 29): MatrixDestEntry(0x0A000008, 29, 1),
    }
    # A state without a matrix (a spine's) has none: nothing is counted there.
    assert not any(str(k[0]).startswith("matrix") for k in translate(tor_state())[0].entries)
    bad = with_matrix(tor_state())
    bad.matrix.source_ports.append(255)  # the CPU port
    bad.matrix.classes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000001, length=29), dst_class=2)
    bad.matrix.classes.add(
        prefix=state_pb2.Ipv4Prefix(address=0x0B000000, length=8), dst_class=MATRIX_CLASSES
    )
    bad.matrix.classes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000008, length=29), dst_class=3)
    pipeline, problems = translate(bad)
    named = sorted(p.object for p in problems)
    assert named == [
        "matrix class 10.0.0.1/29",
        "matrix class 10.0.0.8/29",
        "matrix class 11.0.0.0/8",
        "matrix source port 255",
    ], problems
    # What was valid is still there; the first of a prefix listed twice wins.
    assert pipeline.entries[("matrix_dest", 0x0A000008, 29)] == MatrixDestEntry(0x0A000008, 29, 1)
    assert ("matrix_source", 3) in pipeline.entries


def _varied_state(
    groups: list[list[int]], routes: list[tuple[int, int, int]]
) -> state_pb2.DesiredState:
    """tor_state with `groups` (ports 1-3, or 7, which has no PortConfig) as groups 3, 4, ...
    and `routes` (address, length, group id) added: some refused (host bits, a group missing
    or refused, listed twice)."""
    state = tor_state()
    for i, ports in enumerate(groups):
        group = state.groups.add(id=3 + i)
        for port in ports:
            group.next_hops.add(port=port, dmac=SPINE_MACS.get(port, HOST_MAC), weight=1)
    for address, length, group_id in routes:
        prefix = state_pb2.Ipv4Prefix(address=address, length=length)
        state.routes.add(prefix=prefix, group_id=group_id)
    return state


_GROUPS = st.lists(st.lists(st.sampled_from([1, 2, 3, 7]), min_size=1, max_size=3), max_size=4)
_ROUTES = st.lists(
    st.tuples(
        st.sampled_from([0x0A000000, 0x0A000100, 0x0A000101, 0x0B000000]),
        st.sampled_from([24, 30, 32]),
        st.integers(1, 7),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    want_groups=_GROUPS,
    want_routes=_ROUTES,
    have_groups=_GROUPS,
    have_routes=_ROUTES,
    down=st.frozensets(st.sampled_from([1, 2, 3])),
    have_kind=st.sampled_from(["empty", "translated", "repaired"]),
)
def test_staged_diff_is_diff_stage_by_stage(
    *,
    want_groups: list[list[int]],
    want_routes: list[tuple[int, int, int]],
    have_groups: list[list[int]],
    have_routes: list[tuple[int, int, int]],
    down: frozenset[int],
    have_kind: str,
) -> None:
    """The writer's staged diff writes what `diff` of the whole translation would, in the same
    stages and order, and ends with the same problems, for any target contents."""
    state = _varied_state(want_groups, want_routes)
    have = Pipeline()
    if have_kind != "empty":
        have, _ = translate(_varied_state(have_groups, have_routes))
        if have_kind == "repaired":
            have = repair(have, frozenset({2}))
    pipeline, problems = translate(state)
    translation = Translation(state)
    head = repair(translation.head, down)
    assert list(staged_diff(have, head, translation)) == diff(have, repair(pipeline, down))
    assert translation.problems == problems
    assert translation.joined(head) == repair(pipeline, down)


def test_staged_diff_translates_the_routes_once_the_first_stage_is_taken() -> None:
    """The first stage (the first Write) comes before the routes are translated; they are
    translated and diffed before the routes' stage, and their problems found by then."""
    state = tor_state()
    state.routes.add(prefix=state_pb2.Ipv4Prefix(address=0x0A000001, length=24), group_id=1)
    translation = Translation(state)
    stages = staged_diff(Pipeline(), translation.head, translation)
    first = next(stages)
    assert {type(u.entry) for u in first} >= {AclEntry, MemberEntry}
    assert "routes" not in vars(translation), "the routes were translated before the first Write"
    assert [p.object for p in translation.problems] == []
    rest = list(stages)
    assert "routes" in vars(translation)
    assert {type(u.entry) for u in rest[-1]} == {RouteEntry}
    assert [p.object for p in translation.problems] == ["route 10.0.0.1/24"]
