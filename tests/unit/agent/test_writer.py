"""The single writer's decisions: what it writes, in which order, and when it reports.

RecordingTarget is a stand-in for the P4Runtime target that keeps the entries it was written
(decoded with the real codec) and logs every Write; the same writer runs against softswitch in
tests/integration/agent/test_softswitch.py."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from finsy.proto import p4r

from agent.codec import Codec, Encoded
from agent.p4client import UpdateError
from agent.ports import PortEvent
from agent.translate import (
    Entry,
    GroupEntry,
    GroupMember,
    HashConfigEntry,
    MemberEntry,
    PfcWatchdogEntry,
    Pipeline,
    control_acl,
    repair_updates,
    translate,
)
from agent.writer import REPAIR_LOG_FORMAT, WROTE_LOG_FORMAT, Writer
from railfabric.delta import diff_states
from railfabric.v1 import control_pb2
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.unit


class RecordingTarget:
    __test__ = False

    def __init__(self, codec: Codec, log: list[str], holds: Pipeline | None = None) -> None:
        self.codec = codec
        self.log = log
        # A table's default entry always exists: NoAction until written.
        self.entries: dict[tuple[object, ...], Entry] = {
            ("hash_config",): HashConfigEntry(False),
            ("pfc_watchdog",): PfcWatchdogEntry(None),
        }
        self.entries.update(holds.entries if holds else {})
        self.primary = asyncio.Event()
        self.primary.set()
        self.writes: list[list[p4r.Update]] = []
        self.fail_keys: set[tuple[object, ...]] = set()
        self.pipeline_pushed = False
        self.lost = False
        # When set and clear: every Write waits for it (a slow target).
        self.gate: asyncio.Event | None = None

    async def ensure_pipeline(self) -> bool:
        self.pipeline_pushed = True
        return True

    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]:
        return Pipeline(dict(self.entries)), []

    async def write(self, encoded: Encoded) -> list[UpdateError]:
        if self.gate is not None:
            await self.gate.wait()
        if self.lost:
            raise ConnectionError("target gone")
        updates = list(p4r.WriteRequest.FromString(encoded.data).updates)
        assert len(updates) == encoded.count
        self.writes.append(updates)
        self.log.append(f"write {len(updates)}")
        errors = []
        for i, update in enumerate(updates):
            entry = self.codec.decode(update.entity)
            assert entry is not None
            if entry.key in self.fail_keys:
                errors.append(UpdateError(i, 8, "table full"))
            elif update.type == p4r.Update.DELETE:
                del self.entries[entry.key]
            else:
                assert (entry.key in self.entries) == (update.type == p4r.Update.MODIFY)
                self.entries[entry.key] = entry
        return errors


class Harness:
    def __init__(self, codec: Codec, holds: Pipeline | None = None) -> None:
        self.log: list[str] = []
        self.target = RecordingTarget(codec, self.log, holds)
        self.applied: list[control_pb2.Applied] = []
        self.statuses: list[control_pb2.PortStatus] = []
        self.repairs: list[control_pb2.LocalRepair] = []
        self.snapshots = 0
        self.writer = Writer(
            self.target,
            codec,
            on_applied=self._applied,
            on_port_status=self._status,
            on_local_repair=self._repaired,
            request_snapshot=self._snapshot,
        )

    def _applied(self, msg: control_pb2.Applied) -> None:
        self.log.append(f"applied {msg.generation}")
        self.applied.append(msg)

    def _status(self, msg: control_pb2.PortStatus) -> None:
        self.log.append(f"port {msg.port} {'up' if msg.up else 'down'}")
        self.statuses.append(msg)

    def _repaired(self, msg: control_pb2.LocalRepair) -> None:
        self.log.append(f"port {msg.port} repaired")
        self.repairs.append(msg)

    def _snapshot(self) -> None:
        self.snapshots += 1

    async def settle(self) -> None:
        # Run the writer until its queues are empty.
        task = asyncio.create_task(self.writer.run())
        for _ in range(100):
            await asyncio.sleep(0)
        task.cancel()


def _port(port: int, up: bool, initial: bool = False) -> PortEvent:
    return PortEvent(port, f"veth{port}", up, time.monotonic_ns(), time.time_ns(), initial)


def _desired(state: object) -> control_pb2.ControllerMessage:
    return control_pb2.ControllerMessage(desired_state=state)  # type: ignore[arg-type]


async def test_first_programming_then_a_restart_writes_nothing(codec: Codec) -> None:
    h = Harness(codec)
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.settle()
    want, _ = translate(tor_state(1))
    assert h.target.entries == dict(want.entries)
    assert [m.generation for m in h.applied] == [1]
    # Before the controller spoke, the agent installed its own control ACL (LLDP punt);
    # hash_config's and pfc_watchdog's defaults already were what the state asks (NoAction),
    # so they are not written.
    written = sum(len(w) for w in h.target.writes)
    assert written == len(want) - 2 and not h.applied[0].errors
    assert h.target.pipeline_pushed

    again = Harness(codec, holds=Pipeline(h.target.entries))
    await again.writer.controller_message(_desired(tor_state(1)))
    await again.writer.target_ready()
    await again.settle()
    assert again.target.writes == []
    assert [(m.generation, m.updates_written) for m in again.applied] == [(1, 0)]
    assert again.writer.applied_digest == tor_state(1).digest


async def test_carrier_loss_is_reported_before_its_repair_in_one_write(codec: Codec) -> None:
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.writer.target_ready()
    await h.settle()
    h.log.clear()
    await h.writer.port_event(_port(1, False))
    await h.settle()
    # The controller hears of the loss before the repair's Write starts (its work for the
    # other switches must not wait on this target), then of the committed repair.
    assert h.log == ["port 1 down", "write 1", "port 1 repaired"]
    status, repair = h.statuses[0], h.repairs[0]
    assert (status.groups_repaired, status.local_repair_ns, status.local_repair_wall_ns) == (
        0,
        0,
        0,
    )
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(2, 0, 1),))
    assert ("member", 1) in h.target.entries  # identity kept
    # The repair's latency travels typed in LocalRepair: the record's own figure.
    record = h.writer.repairs[-1]
    assert record.latency_ns > 0
    assert repair.latency_ns == record.latency_ns
    assert (record.port, record.groups) == (repair.port, repair.groups_repaired) == (1, 1)
    assert repair.detected_wall_ns == status.wall_ns
    assert repair.committed_wall_ns >= status.wall_ns

    # Carrier back: the agent waits for the controller before using the port again.
    h.log.clear()
    await h.writer.port_event(_port(1, True))
    await h.settle()
    assert h.log == ["port 1 up"]
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(2, 0, 1),))
    nxt = tor_state(2)
    nxt.ecn[0].kmin_bytes = 120_000
    delta = diff_states(tor_state(1), nxt)
    await h.writer.controller_message(control_pb2.ControllerMessage(state_delta=delta))
    await h.settle()
    assert h.target.entries[("group", 1)] == GroupEntry(
        1, (GroupMember(1, 1, 1), GroupMember(2, 2, 1))
    )
    assert h.applied[-1].generation == 2 and h.writer.applied_digest == delta.digest


async def test_a_message_that_waits_behind_a_repair_is_received_when_it_arrived(
    codec: Codec,
) -> None:
    """Applied.received_wall_ns splits the controller's push from the agent's apply: a delta
    that arrives while the local repair's Write is in flight was received then, and its wait
    for the repair is part of the apply."""
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.writer.target_ready()
    await h.settle()
    h.target.gate = asyncio.Event()
    run = asyncio.create_task(h.writer.run())
    await h.writer.port_event(_port(1, False))
    for _ in range(100):
        await asyncio.sleep(0)
    assert len(h.statuses) == 1 and not h.repairs  # reported; the repair waits at the gate
    nxt = tor_state(2)
    nxt.ecn[0].kmin_bytes = 120_000
    before = time.time_ns()
    await h.writer.controller_message(
        control_pb2.ControllerMessage(state_delta=diff_states(tor_state(1), nxt))
    )
    after = time.time_ns()
    await asyncio.sleep(0.01)
    h.target.gate.set()
    for _ in range(100):
        await asyncio.sleep(0)
    run.cancel()
    assert h.applied[-1].generation == 2
    applied, repair = h.applied[-1], h.repairs[0]
    assert before <= applied.received_wall_ns <= after < repair.committed_wall_ns
    assert applied.wall_ns >= repair.committed_wall_ns


async def test_a_servers_port_is_back_with_its_carrier(codec: Codec) -> None:
    """No controller message would ever put a server's port back (it has no link state), so
    its member returns as soon as the carrier does: a server whose cable was unplugged and
    plugged back, or that rebooted, is reachable again."""
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.writer.target_ready()
    await h.settle()
    host_group = h.target.entries[("group", 2)]
    await h.writer.port_event(_port(3, False))
    await h.settle()
    assert h.target.entries[("group", 2)] == GroupEntry(2, ())
    h.log.clear()
    await h.writer.port_event(_port(3, True))
    await h.settle()
    assert h.log == ["write 1", "applied 1", "port 3 up"]
    assert h.target.entries[("group", 2)] == host_group


async def test_a_port_still_down_stays_out_whatever_the_controller_says(codec: Codec) -> None:
    h = Harness(codec)
    await h.writer.port_event(_port(2, False, initial=True))
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.settle()
    assert h.statuses == []  # initial states travel in Hello, not PortStatus
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(1, 0, 1),))


async def test_a_delta_for_another_generation_asks_for_a_snapshot(codec: Codec) -> None:
    h = Harness(codec)
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(3)))
    await h.settle()
    writes = len(h.target.writes)
    delta = diff_states(tor_state(1), tor_state(2))  # from generation 1, we hold 3
    await h.writer.controller_message(control_pb2.ControllerMessage(state_delta=delta))
    await h.settle()
    assert h.snapshots == 1
    assert len(h.target.writes) == writes
    assert h.writer.applied_generation == 3


async def test_headless_restart_adopts_the_target_and_still_repairs(codec: Codec) -> None:
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    await h.writer.target_ready()
    await h.settle()
    assert h.target.writes == [] and h.applied == []
    await h.writer.port_event(_port(2, False))
    await h.settle()
    assert len(h.target.writes) == 1
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(1, 0, 1),))
    assert h.statuses[0].port == 2 and h.repairs[0].groups_repaired == 1
    assert h.repairs[0].latency_ns == h.writer.repairs[-1].latency_ns > 0


async def test_a_fresh_targets_control_entries_are_written_not_reported_as_divergence(
    codec: Codec, caplog: pytest.LogCaptureFixture
) -> None:
    """A switch's first boot: an empty target, no controller state yet. The agent adopts the
    (empty) target and writes its control entries; the read-back had nothing to compare
    with, so it reports no divergence (the controller would record TARGET_DIVERGED) and logs
    no warning."""
    caplog.set_level(logging.INFO, logger="railfabric.agent.writer")
    h = Harness(codec)
    reports: list[tuple[int, int, int]] = []
    h.writer._on_read_back = lambda rb: reports.append((rb.missing, rb.unexpected, rb.modified))
    await h.writer.target_ready()
    await h.settle()
    acls = control_acl()
    assert all(h.target.entries.get(acl.key) == acl for acl in acls)
    assert sum(len(w) for w in h.target.writes) == len(acls)
    assert reports and set(reports) == {(0, 0, 0)}
    assert h.writer.read_back.repaired_wall_ns == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_refused_updates_are_reported_by_object(codec: Codec) -> None:
    h = Harness(codec)
    h.target.fail_keys.add(("route", 0x0A000003, 32))
    await h.writer.target_ready()
    state = tor_state(1)
    state.ecn.add(port=2, traffic_class=3, kmin_bytes=9, kmax_bytes=1, pmax_ppm=1)
    await h.writer.controller_message(_desired(state))
    await h.settle()
    errors = {e.object: e for e in h.applied[0].errors}
    assert errors["route 10.0.0.3/32"].code == 8
    assert "table full" in errors["route 10.0.0.3/32"].message
    assert "kmin_bytes 9 > kmax_bytes 1" in errors["ecn port 2 tc 3"].message
    assert ("route", 0x0A000003, 32) not in h.target.entries
    assert ("route", 0, 0) in h.target.entries


async def test_large_stages_go_in_ordered_chunks(
    codec: Codec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent.writer.WRITE_CHUNK", 2)
    h = Harness(codec)
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.settle()
    want, _ = translate(tor_state(1))
    assert h.target.entries == dict(want.entries)
    assert all(len(w) <= 2 for w in h.target.writes)
    members = [
        e.member_id
        for w in h.target.writes
        for u in w
        if (e := codec.decode(u.entity)) is not None and isinstance(e, MemberEntry)
    ]
    assert members == [1, 2, 3]


async def test_a_state_for_another_switch_is_ignored(codec: Codec) -> None:
    h = Harness(codec)
    h.writer.switch_name = "tor-r9-b9"
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(1)))  # for tor-r0-b0
    await h.settle()
    assert h.applied == [] and h.writer.held is None


async def test_a_target_lost_mid_repair_is_reconciled_when_back(
    codec: Codec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent.writer.LOST_PAUSE_S", 0)
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.writer.target_ready()
    await h.settle()
    h.target.lost = True
    await h.writer.port_event(_port(1, False))
    await h.settle()
    # Reported anyway, with nothing repaired: the target did not take the Write.
    assert [(s.port, s.up, s.groups_repaired, s.local_repair_ns) for s in h.statuses] == [
        (1, False, 0, 0)
    ]
    assert not h.writer.repairs
    h.target.lost = False
    await h.writer.target_ready()
    await h.settle()
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(2, 0, 1),))


async def test_a_target_back_empty_is_reconciling_until_its_entries_are_rewritten(
    codec: Codec,
) -> None:
    """From the (re)connection until the read-back's difference is written, the writer says
    it is reconciling (the switch is not converged); the report that ends it carries what was
    missing and when it was repaired."""
    h = Harness(codec)
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.writer.target_ready()
    await h.settle()
    h.target.entries = {k: v for k, v in h.target.entries.items() if k[0] != "route"}
    reports: list[tuple[bool, int, int]] = []
    h.writer._on_read_back = lambda rb: reports.append(
        (h.writer.reconciling, rb.missing, rb.repaired_wall_ns)
    )
    await h.writer.target_ready()
    assert h.writer.reconciling
    await h.settle()
    assert not h.writer.reconciling
    routes = sum(1 for k in translate(tor_state(1))[0].entries if k[0] == "route")
    assert routes > 0
    # The read-back's own report (still reconciling), then the one that ends it.
    assert [(r, m) for r, m, _ in reports] == [(True, routes), (False, routes)]
    assert reports[-1][2] > 0


async def test_repair_and_write_log_lines_for_people_carry_the_typed_figures(
    codec: Codec, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's log lines say what the typed messages carry (nobody parses them)."""
    caplog.set_level(logging.INFO, logger="railfabric.agent.writer")
    h = Harness(codec)
    await h.writer.target_ready()
    await h.writer.controller_message(_desired(tor_state(1)))
    await h.settle()
    applied = h.applied[-1]
    assert applied.updates_written > 0
    assert WROTE_LOG_FORMAT % (applied.updates_written, 1) in caplog.messages
    await h.writer.port_event(_port(1, False))
    await h.settle()
    repair, record = h.repairs[-1], h.writer.repairs[-1]
    line = REPAIR_LOG_FORMAT % (1, repair.groups_repaired, repair.latency_ns / 1e6)
    assert line in caplog.messages
    assert repair.latency_ns == record.latency_ns > 0


class PiTarget(RecordingTarget):
    """Reads groups back as PI does on bmv2: every member carries the watch port of the
    group's last member (PI's action_profile_group_read_one reuses one WatchPort)."""

    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]:
        entities = []
        for entry in self.entries.values():
            entity = self.codec.encode(entry)
            members = entity.action_profile_group.members
            if entity.HasField("action_profile_group") and members:
                last = members[-1].watch_port
                for m in members:
                    m.watch_port = last
            entities.append(entity)
        return self.codec.decode_all(entities)


@pytest.mark.parametrize("port", [1, 2])
async def test_repair_after_reading_back_pi_groups_removes_the_right_member(
    codec: Codec, port: int
) -> None:
    """An agent restarted before the controller answers adopts what the target holds:
    `installed` and `desired` are then both the read-back."""
    want, _ = translate(tor_state(1))
    h = Harness(codec, holds=want)
    h.target = PiTarget(codec, h.log, want)
    h.writer.target = h.target
    await h.writer.target_ready()
    await h.settle()
    await h.writer.port_event(_port(port, False))
    await h.settle()
    other = 3 - port
    assert h.target.entries[("group", 1)] == GroupEntry(1, (GroupMember(other, 0, 1),))
    assert [r.groups_repaired for r in h.repairs] == [1]


def test_a_sole_member_watches_no_port_and_others_watch_their_own(codec: Codec) -> None:
    """bmv2 divides by a group's active members: a group whose every member lost its watch
    port would crash it, so a group of one carries no watch port."""
    pipeline, _ = translate(tor_state(1))
    (two,) = codec.encode(pipeline.entries[("group", 1)]).action_profile_group.members[:1]
    assert two.WhichOneof("watch_kind") == "watch_port"
    (single,) = repair_updates(pipeline, 1)
    (member,) = codec.encode(single.entry).action_profile_group.members
    assert member.member_id == 2 and member.WhichOneof("watch_kind") is None
    # Back to two members: both watch again.
    assert pipeline.entries[("group", 1)] == GroupEntry(
        1, (GroupMember(1, 1, 1), GroupMember(2, 2, 1))
    )
