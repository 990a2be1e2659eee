"""Pipeline entries ↔ P4Runtime entities, ids resolved by name from the P4Info."""

from __future__ import annotations

import pytest
from finsy.proto import p4r

from agent.codec import ACL, ROUTING, Codec, P4InfoMismatch
from agent.translate import Op, Pipeline, RouteEntry, Update, diff, translate
from railfabric.p4bytes import decode_unchecked
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.unit


def test_every_entry_round_trips_through_p4runtime_entities(codec: Codec) -> None:
    pipeline, _ = translate(tor_state())
    for entry in pipeline.entries.values():
        wire = p4r.Entity()
        wire.ParseFromString(codec.encode(entry).SerializeToString())
        assert codec.decode(wire) == entry


def test_entities_carry_the_p4info_ids_and_contract_shapes(codec: Codec) -> None:
    pipeline, _ = translate(tor_state())
    group = codec.encode(pipeline.entries[("group", 1)]).action_profile_group
    assert group.action_profile_id == codec.selector_id
    assert [(m.member_id, decode_unchecked(m.watch_port)) for m in group.members] == [
        (1, 1),
        (2, 2),
    ]
    nxt = codec.encode(pipeline.entries[("next", 1)]).table_entry
    assert nxt.action.action_profile_group_id == 1
    default = codec.encode(pipeline.entries[("route", 0, 0)]).table_entry
    assert default.table_id == codec.tables[ROUTING].id
    assert list(default.match) == []  # /0 is the don't-care LPM match
    host = codec.encode(pipeline.entries[("route", 0x0A000003, 32)]).table_entry
    assert host.match[0].lpm.prefix_len == 32
    assert decode_unchecked(host.match[0].lpm.value) == 0x0A000003
    lldp = codec.encode(pipeline.entries[("acl", 0x88CC, 0xFFFF, 100)]).table_entry
    assert lldp.table_id == codec.tables[ACL].id and lldp.priority == 100
    assert lldp.match[0].ternary.value == b"\x88\xcc"


def test_padded_values_read_back_compare_equal(codec: Codec) -> None:
    entry = RouteEntry(0x0A000000, 8, 4)
    wire = codec.encode(entry)
    wire.table_entry.match[0].lpm.value = b"\x0a\x00\x00\x00"
    wire.table_entry.action.action.params[0].value = b"\x00\x00\x00\x04"
    assert codec.decode(wire) == entry


def test_read_back_pipeline_diff_is_empty_and_foreign_entities_are_set_aside(
    codec: Codec,
) -> None:
    pipeline, _ = translate(tor_state())
    entities = [codec.encode(e) for e in pipeline.entries.values()]
    entities.append(p4r.Entity(table_entry=p4r.TableEntry(table_id=123456)))
    current, foreign = codec.decode_all(entities)
    assert diff(current, pipeline) == []
    assert len(foreign) == 1
    update = codec.encode_update(Update(Op.DELETE, RouteEntry(0, 0, 1)))
    assert update.type == p4r.Update.DELETE
    assert Pipeline.of([RouteEntry(0, 0, 1)]) == Pipeline({("route", 0, 0): RouteEntry(0, 0, 1)})


def test_a_missing_name_is_reported_with_the_closest_one() -> None:
    p4info = load_p4info(DEFAULT_P4INFO)
    for table in p4info.tables:
        if table.preamble.name == ROUTING:
            table.preamble.name = "FabricIngress.routing_v6"
    with pytest.raises(
        P4InfoMismatch,
        match=r"no table named 'FabricIngress.routing_v4'.*"
        r"Did you mean 'FabricIngress.routing_v6'",
    ):
        Codec(p4info, "x.p4info.txt")


def test_an_entry_in_our_table_with_a_foreign_action_is_set_aside(codec: Codec) -> None:
    wire = codec.encode(RouteEntry(0x0A000000, 8, 4))
    wire.table_entry.action.action.action_id = codec.actions["FabricIngress.drop"].id
    del wire.table_entry.action.action.params[:]
    pipeline, foreign = codec.decode_all([wire])
    assert len(pipeline) == 0 and foreign == [wire]


@pytest.mark.parametrize("op", list(Op))
@pytest.mark.parametrize(
    "route",
    [RouteEntry(0, 0, 1), RouteEntry(0x0A000000, 8, 300), RouteEntry(0xFFFFFFFF, 32, 2**32 - 1)],
)
def test_route_updates_in_wire_format_equal_the_field_encoder(
    codec: Codec, op: Op, route: RouteEntry
) -> None:
    """routing_v4 updates take a hand-built wire-format path for speed; it must produce what
    filling the message field by field produces."""
    assert codec._route_wire is not None  # the fast path is in use, not its fallback
    fast = codec.encode_update(Update(op, route))
    slow = p4r.Update(type=fast.type)
    codec.fill(slow.entity, route)
    assert fast == slow
    assert (
        fast.type
        == {
            Op.INSERT: p4r.Update.INSERT,
            Op.MODIFY: p4r.Update.MODIFY,
            Op.DELETE: p4r.Update.DELETE,
        }[op]
    )
