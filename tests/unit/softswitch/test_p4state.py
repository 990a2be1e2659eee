"""P4Runtime write/read semantics of the object store, update by update (spec §9, §12)."""

from __future__ import annotations

from typing import Any

import finsy as fy
import pytest
from finsy.proto import p4i, p4r

from railfabric import fabric_p4 as p4
from softswitch.p4state import Code, P4Error
from softswitch.pipeline import Pipeline
from softswitch.schema import FabricSchema
from tests.p4_entries import SELECTOR, member, route
from tests.unit.softswitch.conftest import Apply

pytestmark = pytest.mark.unit


def test_insert_modify_delete_codes(apply: Apply) -> None:
    r = "10.0.0.0/8"
    assert apply(+route(r, 1), +route(r, 1)) == [Code.OK, Code.ALREADY_EXISTS]
    assert apply(~route(r, 2), ~route("11.0.0.0/8", 2)) == [Code.OK, Code.NOT_FOUND]
    assert apply(-route(r, 1), -route(r, 1)) == [Code.OK, Code.NOT_FOUND]


def test_invalid_arguments(apply: Apply, fy_schema: fy.P4Schema) -> None:
    good = (+route("10.0.0.0/8", 1)).encode_update(fy_schema)

    def variant(edit: object) -> p4r.Update:
        msg = p4r.Update()
        msg.CopyFrom(good)
        edit(msg.entity.table_entry)  # type: ignore[operator]
        return msg

    def bad_table(te: p4r.TableEntry) -> None:
        te.table_id = 12345

    def bad_field(te: p4r.TableEntry) -> None:
        te.match[0].field_id = 9

    def too_wide(te: p4r.TableEntry) -> None:
        te.action.action.params[0].value = b"\x01\x00\x00\x00\x00"

    def bits_beyond_prefix(te: p4r.TableEntry) -> None:
        te.match[0].lpm.value = b"\x0a\x00\x00\x01"

    def wrong_kind(te: p4r.TableEntry) -> None:
        value = te.match[0].lpm.value
        te.match[0].exact.value = value

    def bad_action(te: p4r.TableEntry) -> None:
        te.action.action.action_id = 1

    def empty_value(te: p4r.TableEntry) -> None:
        te.action.action.params[0].value = b""

    def priority_on_lpm(te: p4r.TableEntry) -> None:
        te.priority = 10

    edits = [bad_table, bad_field, too_wide, bits_beyond_prefix, wrong_kind, bad_action]
    edits += [empty_value, priority_on_lpm]
    assert apply(*(variant(e) for e in edits)) == [Code.INVALID_ARGUMENT] * len(edits)


def test_padded_values_are_accepted_and_read_back_canonical(
    apply: Apply, pipeline: Pipeline, fy_schema: fy.P4Schema
) -> None:
    msg = (+route("10.0.0.0/8", 1)).encode_update(fy_schema)
    msg.entity.table_entry.action.action.params[0].value = b"\x00\x00\x00\x01"
    assert apply(msg) == [Code.OK]
    [entity] = pipeline.state.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert entity.table_entry.action.action.params[0].value == b"\x01"


def test_const_default_action_cannot_change(apply: Apply, fy_schema: fy.P4Schema) -> None:
    def default() -> fy.P4TableEntry:
        return fy.P4TableEntry(
            "FabricIngress.routing_v4",
            is_default_action=True,
            action=fy.P4TableAction("FabricIngress.drop"),
        )

    assert apply(~default()) == [Code.PERMISSION_DENIED]
    assert apply(+default()) == [Code.INVALID_ARGUMENT]


def test_ternary_needs_priority_and_highest_wins(apply: Apply, pipeline: Pipeline) -> None:
    def acl(prio: int, action: str, **match: object) -> fy.P4TableEntry:
        return fy.P4TableEntry(
            "FabricIngress.acl",
            match=fy.P4TableMatch(**match),
            action=fy.P4TableAction(action),
            priority=prio,
        )

    assert apply(+acl(0, "FabricIngress.drop", eth_type=0x88CC)) == [Code.INVALID_ARGUMENT]
    assert apply(
        +acl(10, "FabricIngress.drop", eth_type=0x88CC),
        +acl(20, "FabricIngress.punt_to_cpu", eth_type=0x88CC),
    ) == [Code.OK, Code.OK]
    lldp = b"\x01\x80\xc2\x00\x00\x0e" + b"\x02" * 6 + b"\x88\xcc" + b"\x00" * 30
    out = pipeline.process(lldp, 3)
    assert out is not None and out.port == 255


def test_member_handles_reuse_the_lowest_free_one(apply: Apply, pipeline: Pipeline) -> None:
    assert apply(+member(30, 4), +member(10, 2), +member(40, 5)) == [Code.OK] * 3
    members = pipeline.state.members[pipeline.schema.profile_id]
    assert [members[m].handle for m in (30, 10, 40)] == [0, 1, 2]
    assert apply(-member(10, 2), +member(20, 3), +member(50, 1)) == [Code.OK] * 3
    assert members[20].handle == 1
    assert members[50].handle == 3


def test_member_and_group_references(apply: Apply, pipeline: Pipeline) -> None:
    def group() -> fy.P4ActionProfileGroup:
        return fy.P4ActionProfileGroup(SELECTOR, group_id=1, members=[fy.P4Member(1, weight=1)])

    def nxt() -> fy.P4TableEntry:
        return fy.P4TableEntry(
            "FabricIngress.next",
            match=fy.P4TableMatch(next_id=5),
            action=fy.P4IndirectAction(group_id=1),
        )

    assert apply(+group()) == [Code.NOT_FOUND]  # member 1 does not exist yet
    assert apply(+member(1, 2), +group(), +nxt()) == [Code.OK] * 3
    assert apply(-member(1, 2), -group()) == [Code.FAILED_PRECONDITION] * 2
    assert apply(-nxt(), -group(), -member(1, 2)) == [Code.OK] * 3
    assert apply(-group()) == [Code.NOT_FOUND]
    too_big = fy.P4ActionProfileGroup(
        SELECTOR, group_id=2, members=[fy.P4Member(1, weight=1)], max_size=65
    )
    assert apply(+member(1, 2), +too_big) == [Code.OK, Code.INVALID_ARGUMENT]


def test_wildcard_reads(apply: Apply, pipeline: Pipeline) -> None:
    assert apply(+route("10.0.0.0/8", 1), +route("10.1.0.0/16", 2), +member(1, 2)) == [Code.OK] * 3
    state = pipeline.state
    assert len(list(state.read(p4r.Entity(table_entry=p4r.TableEntry())))) == 2
    table_id = pipeline.schema.table_ids["FabricIngress.routing_v4"]
    one_table = p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id))
    assert len(list(state.read(one_table))) == 2
    members = list(state.read(p4r.Entity(action_profile_member=p4r.ActionProfileMember())))
    assert [m.action_profile_member.member_id for m in members] == [1]
    counter_id = pipeline.schema.counter_ids["FabricIngress.ingress_port_counter"]
    all_indexes = list(
        state.read(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=counter_id)))
    )
    assert len(all_indexes) == 512
    defaults = list(
        state.read(
            p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id, is_default_action=True))
        )
    )
    drop_id = pipeline.schema.action_ids["FabricIngress.drop"]
    assert defaults[0].table_entry.action.action.action_id == drop_id


def test_read_one_entry_by_match(apply: Apply, pipeline: Pipeline, fy_schema: fy.P4Schema) -> None:
    assert apply(+route("10.0.0.0/8", 1), +route("10.1.0.0/16", 2)) == [Code.OK] * 2
    query = route("10.1.0.0/16", 0).encode_entry(fy_schema)
    query.ClearField("action")
    [entity] = pipeline.state.read(p4r.Entity(table_entry=query))
    assert entity.table_entry.action.action.params[0].value == b"\x02"
    missing = route("10.2.0.0/16", 0).encode_entry(fy_schema)
    assert list(pipeline.state.read(p4r.Entity(table_entry=missing))) == []


def test_counter_write_resets(apply: Apply, pipeline: Pipeline, fy_schema: fy.P4Schema) -> None:
    pipeline.process(b"\x00" * 60, 2)
    counter_id = pipeline.schema.counter_ids["FabricIngress.ingress_port_counter"]
    query = p4r.Entity(
        counter_entry=p4r.CounterEntry(counter_id=counter_id, index=p4r.Index(index=2))
    )
    [before] = pipeline.state.read(query)
    assert before.counter_entry.data.packet_count == 1
    reset = p4r.Update(type=p4r.Update.MODIFY, entity=query)
    assert apply(reset) == [Code.OK]
    [after] = pipeline.state.read(query)
    assert after.counter_entry.data.packet_count == 0


def test_malformed_frames_are_counted_and_dropped(pipeline: Pipeline) -> None:
    truncated_ipv4 = b"\x00" * 12 + b"\x08\x00" + b"\x45\x00\x00"
    bad_version = b"\x00" * 12 + b"\x08\x00" + b"\x65" + b"\x00" * 40
    for frame in (b"", b"\x00" * 5, truncated_ipv4, bad_version):
        assert pipeline.process(frame, 1) is None
    assert pipeline.c_drop[0][1] == 4


def test_full_table_is_resource_exhausted(apply: Apply, pipeline: Pipeline) -> None:
    table = pipeline.schema.tables[pipeline.schema.table_ids["FabricIngress.acl"]]
    drop = pipeline.schema.action_ids["FabricIngress.drop"]

    def acl(priority: int) -> p4r.Update:
        te = p4r.TableEntry(table_id=table.id, priority=priority)
        te.match.add(
            field_id=3, ternary=p4r.FieldMatch.Ternary(value=b"\x08\x00", mask=b"\xff\xff")
        )
        te.action.action.action_id = drop
        return p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te))

    codes = apply(*(acl(p) for p in range(1, table.size + 2)))
    assert codes[:-1] == [Code.OK] * table.size
    assert codes[-1] == Code.RESOURCE_EXHAUSTED


def _route_forms(fy_schema: fy.P4Schema) -> list[p4r.Update]:
    """routing_v4 and qos_classify updates in the plain form most clients send and in every
    other form the plain path must leave to the general one."""
    out: list[p4r.Update] = []

    def add(entry: fy.P4TableEntry, edit: object = None, kind: int = p4r.Update.INSERT) -> None:
        msg = (+entry).encode_update(fy_schema)
        msg.type = kind  # type: ignore[assignment]
        if edit is not None:
            edit(msg.entity.table_entry)  # type: ignore[operator]
        out.append(msg)

    def qos() -> fy.P4TableEntry:
        return fy.P4TableEntry(
            p4.QOS_CLASSIFY,
            match=fy.P4TableMatch(dscp=26),
            action=fy.P4TableAction(p4.SET_TRAFFIC_CLASS, tc=3),
        )

    for prefix in ("10.0.0.0/8", "10.1.0.0/16", "0.0.0.0/1", "128.0.0.0/1", "10.0.0.1/32"):
        add(route(prefix, 1))  # the first decodes set_next_id(1); the rest reuse it
    add(route("11.0.0.0/8", 300))
    add(route("12.0.0.0/8", 300))
    add(route("10.0.0.0/8", 1))  # ALREADY_EXISTS
    add(route("13.0.0.0/8", 1), kind=p4r.Update.MODIFY)  # NOT_FOUND
    add(route("10.0.0.0/8", 300), kind=p4r.Update.MODIFY)
    add(route("0.0.0.0/0", 1))  # no match field at all
    add(qos())
    add(qos(), kind=p4r.Update.MODIFY)

    def padded_prefix(te: p4r.TableEntry) -> None:
        te.match[0].lpm.value = b"\x00\x0e\x00\x00\x00"

    def padded_param(te: p4r.TableEntry) -> None:
        te.action.action.params[0].value = b"\x00\x01"

    def host_bits(te: p4r.TableEntry) -> None:
        te.match[0].lpm.value = b"\x0f\x00\x00\x01"

    def prefix_len_0(te: p4r.TableEntry) -> None:
        te.match[0].lpm.prefix_len = 0

    def too_long(te: p4r.TableEntry) -> None:
        te.match[0].lpm.prefix_len = 33

    def too_wide(te: p4r.TableEntry) -> None:
        te.match[0].lpm.value = b"\x01\x00\x00\x00\x00"

    def as_exact(te: p4r.TableEntry) -> None:
        te.match[0].exact.value = b"\x10"

    def priority(te: p4r.TableEntry) -> None:
        te.priority = 1

    def counters(te: p4r.TableEntry) -> None:
        te.counter_data.packet_count = 1

    def metadata(te: p4r.TableEntry) -> None:
        te.controller_metadata = 7

    def default(te: p4r.TableEntry) -> None:
        te.is_default_action = True

    def other_action(te: p4r.TableEntry) -> None:
        te.action.action.action_id = p4.DROP_ID
        del te.action.action.params[:]

    def member_action(te: p4r.TableEntry) -> None:
        te.action.action_profile_member_id = 1

    def no_action(te: p4r.TableEntry) -> None:
        te.ClearField("action")

    def second_field(te: p4r.TableEntry) -> None:
        te.match.add().CopyFrom(te.match[0])

    edits = [padded_prefix, padded_param, host_bits, prefix_len_0, too_long, too_wide]
    edits += [as_exact, priority, counters, metadata, default, other_action, member_action]
    edits += [no_action, second_field]
    for n, edit in enumerate(edits):
        add(route(f"{20 + n}.0.0.0/8", 1), edit)
        add(route(f"{20 + n}.0.0.0/8", 1), edit, kind=p4r.Update.MODIFY)
    return out


@pytest.mark.parametrize("via", ["apply", "apply_all"])
def test_entries_read_from_their_bytes_end_as_read_field_by_field(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema, via: str
) -> None:
    """Plain routing_v4 and qos_classify entries are read from their serialized bytes
    (tables._EntryShape), one update at a time (`apply`) or from a WriteRequest's loop
    (`apply_all`); every update gives the code, message, entries and lookups the general path
    gives, and every form but the plain one is left to it."""
    plain = Pipeline(FabricSchema.build(p4info), 255, (1, 2))
    general = Pipeline(FabricSchema.build(p4info), 255, (1, 2))
    general.state.tables.shapes.clear()
    read_plain: list[bool] = []
    write_plain = plain.state.tables.write_plain

    def counted(*args: Any) -> bool:
        read_plain.append(write_plain(*args))
        return read_plain[-1]

    plain.state.tables.write_plain = counted  # type: ignore[method-assign,assignment]

    def outcome(pipeline: Pipeline, update: p4r.Update) -> tuple[Code, str]:
        msg = p4r.Update()
        msg.CopyFrom(update)
        if via == "apply_all" and pipeline is plain:
            errors = pipeline.state.apply_all([msg])
            error = None if errors is None else errors[0]
            return (Code.OK, "") if error is None else (error.code, error.message)
        try:
            pipeline.state.apply(msg)
        except P4Error as err:
            return err.code, err.message
        return Code.OK, ""

    codes = []
    for update in _route_forms(fy_schema):
        got = outcome(plain, update)
        assert got == outcome(general, update), update
        codes.append(got[0])
    assert codes.count(Code.OK) >= 12 and Code.ALREADY_EXISTS in codes and Code.NOT_FOUND in codes
    # Written from their bytes: the plain entries after the first of each action (/0 has no
    # match field: general), seven; ALREADY_EXISTS and NOT_FOUND were raised there too.
    assert read_plain.count(True) == 7, read_plain
    query = [p4r.Entity(table_entry=p4r.TableEntry())]
    assert plain.state.read_all(query) == general.state.read_all(query)
    assert plain.state.entries == general.state.entries
    assert (plain._lpm, plain._qos) == (general._lpm, general._qos)
