"""agent/tables.py: the TablesReport from what a target holds against what the agent wants
(pure compare, and the report around a read that works or fails)."""

from __future__ import annotations

import pytest
from finsy.proto import p4r

from agent.codec import Codec
from agent.tables import compare, report
from agent.translate import GroupEntry, GroupMember, Pipeline, RouteEntry, repair, translate
from railfabric.p4format import EntityFormatter
from railfabric.v1 import control_pb2
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.unit

MATCH, MISSING = control_pb2.ENTRY_STATUS_MATCH, control_pb2.ENTRY_STATUS_MISSING
UNEXPECTED, DIFFERS = control_pb2.ENTRY_STATUS_UNEXPECTED, control_pb2.ENTRY_STATUS_DIFFERS


class FakeTarget:
    def __init__(self, pipeline: Pipeline | None, foreign: list[p4r.Entity] | None = None):
        self.pipeline = pipeline
        self.foreign = foreign or []

    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]:
        if self.pipeline is None:
            raise ConnectionError("target 127.0.0.1:9559 is not connected")
        return self.pipeline, self.foreign


def _formatter(codec: Codec) -> EntityFormatter:
    return EntityFormatter(codec.p4info, qualified=True)


def test_every_status_with_the_installed_and_the_wanted_text(codec: Codec) -> None:
    wanted, _ = translate(tor_state(1))
    entries = dict(wanted.entries)
    routes = [e for e in entries.values() if isinstance(e, RouteEntry)]
    gone = routes[0]
    del entries[gone.key]  # missing from the target
    changed = RouteEntry(routes[1].address, routes[1].length, routes[1].next_id + 40)
    entries[changed.key] = changed  # another next id there
    extra = RouteEntry(0xC0A80000, 16, 1)
    entries[extra.key] = extra  # nobody wants it
    got = compare(Pipeline(entries), [], wanted, _formatter(codec), codec)

    by_status: dict[int, list[control_pb2.InstalledEntry]] = {}
    for e in got:
        by_status.setdefault(e.status, []).append(e)
    assert len(by_status[MATCH]) == len(wanted) - 2
    (missing,) = by_status[MISSING]
    assert missing.table == "FabricIngress.routing_v4"
    assert missing.key == f"ipv4_dst={_ip(gone.address)}/{gone.length}"
    assert missing.action == ""
    assert missing.wanted == f"FabricIngress.set_next_id(next_id={gone.next_id})"
    (differs,) = by_status[DIFFERS]
    assert differs.action == f"FabricIngress.set_next_id(next_id={changed.next_id})"
    assert differs.wanted == f"FabricIngress.set_next_id(next_id={routes[1].next_id})"
    (unexpected,) = by_status[UNEXPECTED]
    assert (unexpected.key, unexpected.wanted) == ("ipv4_dst=192.168.0.0/16", "")
    # Sorted by table, then key in its natural order (not as text).
    tables = [e.table for e in got]
    assert tables == sorted(tables)
    keys = [e.key for e in got if e.table == "FabricIngress.routing_v4"]
    assert keys == [
        f"ipv4_dst={_ip(a)}/{n}"
        for a, n in sorted({(r.address, r.length) for r in [*routes, extra]})
    ]


def test_members_groups_and_defaults_are_named_for_people(codec: Codec) -> None:
    wanted, _ = translate(tor_state(1))
    got = {(e.table, e.key): e for e in compare(wanted, [], wanted, _formatter(codec), codec)}
    member = got["FabricIngress.ecmp_selector member", "1"]
    assert member.action.startswith("FabricIngress.set_nexthop(port=1, smac=")
    assert ":" in member.action  # MACs as aa:bb:...
    group = got["FabricIngress.ecmp_selector", "1"]
    assert group.action == "members 1 watch 1, 2 watch 2"
    assert got["FabricIngress.hash_config", "(default)"].action == "NoAction()"
    lldp = got["FabricIngress.acl", "eth_type=0x88cc&&&0xffff priority 100"]
    assert lldp.action == "FabricIngress.punt_to_cpu()"
    assert got["FabricIngress.routing_v4", "ipv4_dst=0.0.0.0/0"].action.endswith("(next_id=1)")
    assert {e.status for e in got.values()} == {MATCH}


def test_a_group_repaired_for_a_down_port_is_what_is_wanted(codec: Codec) -> None:
    """What the writer installs has the down port's members out: that matches, the group
    with the member still in differs."""
    desired, _ = translate(tor_state(1))
    wanted = repair(desired, frozenset({1}))
    got = compare(desired, [], wanted, _formatter(codec), codec)
    (differs,) = [e for e in got if e.status == DIFFERS]
    assert (differs.table, differs.key) == ("FabricIngress.ecmp_selector", "1")
    assert differs.action == "members 1 watch 1, 2 watch 2"
    assert differs.wanted == "members 2"
    assert wanted.entries[("group", 1)] == GroupEntry(1, (GroupMember(2, 0, 1),))


def test_entries_the_codec_cannot_decode_are_unexpected(codec: Codec) -> None:
    foreign = p4r.Entity()
    foreign.table_entry.table_id = codec.tables["FabricIngress.acl"].id
    foreign.table_entry.priority = 7
    got = compare(Pipeline(), [foreign], Pipeline(), _formatter(codec), codec)
    assert [(e.table, e.key, e.status) for e in got] == [
        ("FabricIngress.acl", "priority 7", UNEXPECTED)
    ]


async def test_report_carries_the_request_and_a_failed_read_as_its_error(codec: Codec) -> None:
    wanted, _ = translate(tor_state(1))
    ok = await report(FakeTarget(wanted), codec, wanted, request_id=7, switch_name="tor-r0-b0")
    assert (ok.request_id, ok.switch_name, ok.error) == (7, "tor-r0-b0", "")
    assert ok.read_wall_ns > 0 and len(ok.entries) == len(wanted)
    failed = await report(FakeTarget(None), codec, wanted, request_id=8, switch_name="x")
    assert failed.request_id == 8 and not failed.entries
    assert failed.error == "reading the target back failed: target 127.0.0.1:9559 is not connected"
    # No state yet: everything the target holds is unexpected.
    none = await report(FakeTarget(wanted), codec, None, request_id=9, switch_name="x")
    assert {e.status for e in none.entries} == {UNEXPECTED}


def _ip(address: int) -> str:
    return ".".join(str((address >> s) & 0xFF) for s in (24, 16, 8, 0))
