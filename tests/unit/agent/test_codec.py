"""Pipeline entries ↔ P4Runtime entities, ids resolved by name from the P4Info."""

from __future__ import annotations

import re

import pytest
from finsy.proto import p4r

from agent.codec import Codec, P4InfoMismatch
from agent.translate import (
    AclAction,
    AclEntry,
    HashConfigEntry,
    MatrixDestEntry,
    MemberEntry,
    Op,
    PfcWatchdogEntry,
    Pipeline,
    RouteEntry,
    Update,
    diff,
    translate,
)
from railfabric import fabric_p4 as p4
from railfabric.p4bytes import decode_unchecked
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import state_pb2
from tests.unit.agent.samples import tor_state, with_matrix

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
    assert default.table_id == codec.tables[p4.ROUTING_V4].id
    assert list(default.match) == []  # /0 is the don't-care LPM match
    host = codec.encode(pipeline.entries[("route", 0x0A000003, 32)]).table_entry
    assert host.match[0].lpm.prefix_len == 32
    assert decode_unchecked(host.match[0].lpm.value) == 0x0A000003
    lldp_key = AclEntry(0x88CC, 0xFFFF, 100, AclAction.PUNT_TO_CPU).key
    lldp = codec.encode(pipeline.entries[lldp_key]).table_entry
    assert lldp.table_id == codec.tables[p4.ACL].id and lldp.priority == 100
    assert lldp.match[0].ternary.value == b"\x88\xcc"


def test_mesh_probe_acl_answers_ipv4_protocol_253_to_the_address_and_reads_back(
    codec: Codec,
) -> None:
    state = tor_state()
    state.probing.address = 0x0A000001
    pipeline, _ = translate(state)
    (mesh,) = [e for e in pipeline.entries.values() if isinstance(e, AclEntry) and e.ip_proto_mask]
    wire = codec.encode(mesh).table_entry
    keys = codec.tables[p4.ACL].keys
    assert {(m.field_id, m.ternary.value, m.ternary.mask) for m in wire.match} == {
        (keys[p4.ACL_ETH_TYPE], b"\x08\x00", b"\xff\xff"),
        (keys[p4.ACL_IP_PROTO], b"\xfd", b"\xff"),
    }
    # The data plane answers requests to the ToR's probe address (answer_probe's parameter).
    assert (mesh.action, mesh.address) == (AclAction.ANSWER_PROBE, 0x0A000001)
    answer = codec.actions[p4.ANSWER_PROBE]
    assert wire.action.action.action_id == answer.id
    assert [(q.param_id, q.value) for q in wire.action.action.params] == [
        (answer.params[p4.ANSWER_PROBE_ADDRESS], b"\x0a\x00\x00\x01")
    ]
    assert codec.decode(codec.encode(mesh)) == mesh
    # A spine (no probe address) routes mesh probes: no such entry.
    state.probing.address = 0
    pipeline, _ = translate(state)
    assert not [e for e in pipeline.entries.values() if isinstance(e, AclEntry) and e.ip_proto]


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
    renamed = p4.ROUTING_V4.replace("v4", "v6")
    for table in p4info.tables:
        if table.preamble.name == p4.ROUTING_V4:
            table.preamble.name = renamed
    with pytest.raises(
        P4InfoMismatch,
        match=f"no table named {re.escape(repr(p4.ROUTING_V4))}.*"
        f"Did you mean {re.escape(repr(renamed))}",
    ):
        Codec(p4info, "x.p4info.txt")


def test_an_entry_in_our_table_with_a_foreign_action_is_set_aside(codec: Codec) -> None:
    wire = codec.encode(RouteEntry(0x0A000000, 8, 4))
    wire.table_entry.action.action.action_id = codec.actions[p4.DROP].id
    del wire.table_entry.action.action.params[:]
    pipeline, foreign = codec.decode_all([wire])
    assert len(pipeline) == 0 and foreign == [wire]


@pytest.mark.parametrize("op", list(Op))
def test_updates_in_wire_format_equal_the_field_encoder(codec: Codec, op: Op) -> None:
    """What the writer sends (routes and members built from byte templates, the rest
    serialized) parses into what filling the messages field by field gives, in order, for
    every kind of entry, routes of every value length and prefix length, and members of every
    value length (a member id of 0 is left out)."""
    pipeline, _ = translate(tor_state())
    routes = [
        RouteEntry(0, 0, 1),
        RouteEntry(0x0A000000, 8, 300),
        RouteEntry(0xFFFFFFFF, 32, 2**32 - 1),
        *(RouteEntry(0x0A000000 & (0xFFFFFFFF << (32 - n)), n, 1 << n) for n in range(1, 33)),
    ]
    members = [
        MemberEntry(0, 0, 0, 0),
        MemberEntry(200, 511, 0x02AA00000001, 0xFF),
        *(MemberEntry(1 << n, (1 << n) - 1, 1 << (5 * n), (1 << 48) - 1) for n in range(1, 10)),
    ]
    updates = [Update(op, e) for e in [*pipeline.entries.values(), *routes, *members]]
    encoded = codec.encode_updates(updates)
    request = p4r.WriteRequest.FromString(encoded.data)
    assert encoded.count == len(updates)
    assert list(request.updates) == [codec.encode_update(u) for u in updates]


def test_ecmp_hash_is_the_default_action_of_hash_config_and_only_ever_modified(
    codec: Codec,
) -> None:
    state = tor_state()
    state.ecmp_hash = state_pb2.ECMP_HASH_FIVE_TUPLE_QP
    pipeline, problems = translate(state)
    assert problems == [] and pipeline.entries[("hash_config",)] == HashConfigEntry(qp=True)
    ids = {op: codec.encode_update(Update(op, HashConfigEntry(qp=True))) for op in Op}
    assert {u.type for u in ids.values()} == {p4r.Update.MODIFY}
    for op, update in ids.items():
        te = update.entity.table_entry
        assert te.table_id == p4.HASH_CONFIG_ID and te.is_default_action and not te.match
        want = p4.NO_ACTION_ID if op is Op.DELETE else p4.HASH_QP_ID
        assert te.action.action.action_id == want, op
        assert codec.decode(update.entity) == HashConfigEntry(qp=op is not Op.DELETE)
    # A wildcard read does not return a default entry: the agent asks for it by name.
    (read,) = [e for e in codec.read_requests() if e.table_entry.table_id == p4.HASH_CONFIG_ID]
    assert read.table_entry.is_default_action


@pytest.mark.parametrize("entry", [PfcWatchdogEntry((1_000_000, 200_000)), PfcWatchdogEntry(None)])
def test_pfc_watchdog_is_the_default_action_of_its_table_and_only_ever_modified(
    codec: Codec, entry: PfcWatchdogEntry
) -> None:
    for op in Op:
        update = codec.encode_update(Update(op, entry))
        te = update.entity.table_entry
        assert update.type == p4r.Update.MODIFY
        assert te.table_id == p4.PFC_WATCHDOG_ID and te.is_default_action and not te.match
        # Taking it away restores NoAction, the target's own timing.
        assert codec.decode(update.entity) == (
            entry if op is not Op.DELETE else PfcWatchdogEntry(None)
        )
    (read,) = [e for e in codec.read_requests() if e.table_entry.table_id == p4.PFC_WATCHDOG_ID]
    assert read.table_entry.is_default_action


def test_an_ecmp_hash_this_agent_does_not_know_hashes_the_five_tuple_and_says_so() -> None:
    state = tor_state()
    state.ecmp_hash = 7  # type: ignore[assignment]  # a newer controller's value
    pipeline, problems = translate(state)
    assert pipeline.entries[("hash_config",)] == HashConfigEntry(qp=False)
    assert [(p.object, "unknown" in p.message) for p in problems] == [("ecmp_hash", True)]


def test_traffic_matrix_entries_round_trip_with_the_contract_shapes(codec: Codec) -> None:
    pipeline, problems = translate(with_matrix(tor_state()))
    assert problems == []
    source = pipeline.entries[("matrix_source", 3)]
    dest = pipeline.entries[("matrix_dest", 0x0A000008, 29)]
    assert dest == MatrixDestEntry(0x0A000008, 29, 1)
    for entry in (source, dest):
        wire = p4r.Entity()
        wire.ParseFromString(codec.encode(entry).SerializeToString())
        assert codec.decode(wire) == entry
    te = codec.encode(dest).table_entry
    assert te.table_id == codec.tables[p4.MATRIX_DEST].id
    assert (decode_unchecked(te.match[0].lpm.value), te.match[0].lpm.prefix_len) == (
        0x0A000008,
        29,
    )
    assert te.action.action.action_id == codec.actions[p4.COUNT_MATRIX].id
    assert decode_unchecked(te.action.action.params[0].value) == 1
    src = codec.encode(source).table_entry
    assert src.table_id == codec.tables[p4.MATRIX_SOURCE].id
    assert src.action.action.action_id == codec.actions[p4.NO_ACTION].id
    # The matrix rides in the first write batch: nothing depends on it.
    batches = diff(Pipeline({}), pipeline)
    assert {u.entry.key for u in batches[0]} >= {source.key, dest.key}
