"""The single writer: the only task that writes to the P4 target.

It holds the controller's desired state (a DesiredState with StateDeltas applied), the set of
ports whose members are kept out of groups, and what the target holds (`installed`, read back
at every (re)connection). Every change goes through `diff`, so only differences are written,
in dependency order.

Local repair: a port that loses carrier is removed from every group in ONE Write (a group
modify per affected group; members keep their identity), and only then is PortStatus sent,
carrying the commit time and the repair's latency (carrier event -> committed Write, on the
monotonic clock). A port whose carrier returns is NOT put back by the agent: it stays
out of groups until the next state from the controller (DesiredState or StateDelta) is applied,
because the controller's link state (hold-down, flap damping, the far end's view) decides when
a link carries traffic again. Ports still without carrier stay out whatever the controller says.
A server's port (the plan cables a NIC there) is the exception: no link state is kept for it
and nothing routes around it, so no controller message would ever put it back; its member
returns with its carrier.

Headless: without a controller the writer keeps the last state it had (or, after a restart,
adopts what the target holds) and local repair keeps working on it."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from finsy import P4ClientError
from finsy.proto import p4r

from agent.codec import Codec, Encoded
from agent.p4client import UpdateError
from agent.ports import PortEvent
from agent.translate import (
    AclEntry,
    EcnEntry,
    Entry,
    GroupEntry,
    MemberEntry,
    NextEntry,
    ObjectProblem,
    Op,
    PfcEntry,
    Pipeline,
    QosEntry,
    RouteEntry,
    Translation,
    Update,
    control_acl,
    diff,
    format_ipv4,
    repair,
    repair_updates,
    staged_diff,
    translate,
)
from railfabric.delta import DeltaError, apply_delta
from railfabric.digest import state_digest
from railfabric.v1 import control_pb2, state_pb2

LOG = logging.getLogger("railfabric.agent.writer")

# Log lines for people (a repair's latency, how much a sync wrote). Programs never read them
# back: the same figures travel typed, in LocalRepair.latency_ns / groups_repaired and
# Applied.updates_written.
REPAIR_LOG_FORMAT = "port %d down: %d groups repaired in %.3f ms (netlink event -> committed Write)"
WROTE_LOG_FORMAT = "wrote %d updates (generation %d)"

# What a target that goes away mid-operation raises.
TARGET_LOST = (ConnectionError, P4ClientError)
LOST_PAUSE_S = 0.2

# Updates per WriteRequest when programming a large state: big enough to amortise the RPC,
# small enough that encoding the next chunk overlaps the target applying this one.
WRITE_CHUNK = 512
# Writes of one stage outstanding at once (see _write_stages).
WRITES_IN_FLIGHT = 2


class Target(Protocol):
    """What the writer needs from the P4Runtime side (agent.p4client.P4Target)."""

    primary: asyncio.Event

    async def ensure_pipeline(self) -> bool: ...

    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]: ...

    def write(self, updates: Encoded) -> Awaitable[list[UpdateError]]:
        """Start one Write; P4Target.write sends it before the caller's next turn."""
        ...


@dataclass(frozen=True, slots=True)
class ReadBack:
    """The last read-back of the target against what the writer wants there: what differed
    (written right after, in the same sync) and when that repair was committed."""

    wall_ns: int = 0
    missing: int = 0
    unexpected: int = 0
    modified: int = 0
    repaired_wall_ns: int = 0


@dataclass(frozen=True, slots=True)
class RepairRecord:
    port: int
    groups: int
    # netlink event → Write committed, CLOCK_MONOTONIC.
    latency_ns: int


def object_name(entry: Entry) -> str:
    """How Applied.errors name an object: the controller's own words where it has them."""
    match entry:
        case RouteEntry():
            return f"route {format_ipv4(entry.address)}/{entry.length}"
        case GroupEntry():
            return f"group {entry.group_id}"
        case NextEntry():
            return f"group {entry.next_id} (next entry)"
        case MemberEntry():
            return f"next hop port {entry.port} (member)"
        case EcnEntry():
            return f"ecn port {entry.port} tc {entry.traffic_class}"
        case PfcEntry():
            return f"pfc port {entry.port} priority {entry.priority}"
        case QosEntry():
            return f"dscp {entry.dscp}"
        case AclEntry():
            proto = f" ip_proto {entry.ip_proto}" if entry.ip_proto_mask else ""
            return f"acl eth_type {entry.eth_type:#06x}{proto}"
    raise TypeError(entry)


def server_ports(state: state_pb2.DesiredState | None) -> frozenset[int]:
    """The ports `state`'s cabling plan gives a server NIC."""
    if state is None:
        return frozenset()
    return frozenset(n.port for n in state.neighbors if n.kind == state_pb2.PEER_KIND_HOST)


class Writer:
    def __init__(
        self,
        target: Target,
        codec: Codec,
        *,
        on_applied: Callable[[control_pb2.Applied], None],
        on_port_status: Callable[[control_pb2.PortStatus], None],
        on_local_repair: Callable[[control_pb2.LocalRepair], None],
        request_snapshot: Callable[[], object],
        queue_size: int = 1024,
        switch_name: str = "",
        on_repair: Callable[[RepairRecord], None] | None = None,
        on_read_back: Callable[[ReadBack], None] = lambda _: None,
    ) -> None:
        self.switch_name = switch_name
        # Told of every committed local repair (the agent's latency histogram).
        self._on_repair = on_repair
        self.target = target
        self.codec = codec
        self._on_applied = on_applied
        self._on_port_status = on_port_status
        self._on_local_repair = on_local_repair
        self._request_snapshot = request_snapshot
        self._ports: asyncio.Queue[PortEvent] = asyncio.Queue(queue_size)
        # Each with its arrival time (Applied.received_wall_ns): a message can wait here
        # behind a local repair, and that wait is the apply's, not the push's.
        self._messages: asyncio.Queue[tuple[control_pb2.ControllerMessage, int]]
        self._messages = asyncio.Queue(16)
        self._wake = asyncio.Event()
        self._reconcile_pending = False
        self._reconciling = False
        self._verify_pending = False
        self._on_read_back = on_read_back
        self.read_back = ReadBack()
        # Unix ns of a read-back the next sync has not compared yet; 0 when none.
        self._unchecked_read_ns = 0

        self.held: state_pb2.DesiredState | None = None
        self.problems: list[ObjectProblem] = []
        self.adopted: Pipeline | None = None
        self.installed: Pipeline | None = None
        self.down: set[int] = set()
        self.held_out: set[int] = set()
        self.applied_generation = 0
        self.applied_digest = ""
        # When the last controller message arrived (Applied.received_wall_ns).
        self._received_wall_ns = 0
        self.writes = 0
        self.updates_written = 0
        self.repairs: collections.deque[RepairRecord] = collections.deque(maxlen=10_000)
        self.synced = asyncio.Event()

    # -- inputs -----------------------------------------------------------------------

    async def port_event(self, event: PortEvent) -> None:
        await self._ports.put(event)
        self._wake.set()

    async def controller_message(self, msg: control_pb2.ControllerMessage) -> None:
        await self._messages.put((msg, time.time_ns()))
        self._wake.set()

    async def target_ready(self) -> None:
        """The target (re)connected and we are primary: read back and reconcile."""
        self._reconcile_pending = True
        self._wake.set()

    def verify(self) -> None:
        """Read the target back and put right what changed behind the agent's back (the
        periodic check; a (re)connection's reconcile does the same)."""
        self._verify_pending = True
        self._wake.set()

    @property
    def reconciling(self) -> bool:
        """The target (re)connected and has not been read back and put right since: what it
        holds is unknown (TargetHealth.reconciling)."""
        return self._reconcile_pending or self._reconciling

    # -- the task ---------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                try:
                    # Port events first: local repair must not wait behind a large state.
                    if not self._ports.empty():
                        await self._port(self._ports.get_nowait())
                    elif self._reconcile_pending and self.target.primary.is_set():
                        self._reconcile_pending = self._verify_pending = False
                        self._reconciling = True
                        await self._reconcile()
                    elif self._verify_pending and self.target.primary.is_set():
                        self._verify_pending = False
                        await self._read_back()
                        await self._sync()
                    elif not self._messages.empty():
                        await self._message(*self._messages.get_nowait())
                    else:
                        break
                except TARGET_LOST as err:
                    # What we hold is kept; the target is read back and reconciled when the
                    # P4 stream is primary again (it calls target_ready).
                    LOG.warning("target lost mid-operation (%s); will reconcile", err)
                    self.installed = None
                    self._reconcile_pending = True
                    self._reconciling = False
                    # The P4 stream may not have noticed yet: do not spin on a dead target.
                    await asyncio.sleep(LOST_PAUSE_S)

    # -- what is wanted ---------------------------------------------------------------

    def desired(self) -> Pipeline | None:
        """The controller's pipeline (or the adopted one), before local repair."""
        if self.held is not None:
            pipeline, self.problems = translate(self.held)
            return pipeline
        return self.adopted

    def excluded(self) -> frozenset[int]:
        return frozenset(self.down | self.held_out)

    # -- handlers ---------------------------------------------------------------------

    async def _port(self, event: PortEvent) -> None:
        if not event.up:
            was_down = event.port in self.down
            self.down.add(event.port)
            self.held_out.discard(event.port)
            report = not event.initial and not was_down
            if report:
                # Before the repair's Write: the controller's work for the other switches
                # (a remote failure's repair) must not wait on this switch's target.
                self._on_port_status(
                    control_pb2.PortStatus(
                        port=event.port,
                        up=False,
                        monotonic_ns=event.monotonic_ns,
                        wall_ns=event.wall_ns,
                    )
                )
            record, commit_wall = await self._repair(event)
            if report and record is not None:
                self._on_local_repair(
                    control_pb2.LocalRepair(
                        port=event.port,
                        detected_wall_ns=event.wall_ns,
                        committed_wall_ns=commit_wall,
                        groups_repaired=record.groups,
                        latency_ns=record.latency_ns,
                    )
                )
            return
        if event.port in self.down:
            self.down.discard(event.port)
            if event.port in server_ports(self.held):
                await self._sync()  # its member returns now (see the module's text)
            else:
                self.held_out.add(event.port)
        if not event.initial:
            self._on_port_status(
                control_pb2.PortStatus(
                    port=event.port,
                    up=True,
                    monotonic_ns=event.monotonic_ns,
                    wall_ns=event.wall_ns,
                )
            )

    async def _repair(self, event: PortEvent) -> tuple[RepairRecord | None, int]:
        """Take the port's members out of every group in one Write. (the repair, commit wall
        ns); (None, 0) when nothing needed it or the target is unreachable (then the reconcile
        after reconnection applies the exclusion)."""
        if self.installed is None or not self.target.primary.is_set():
            return None, 0
        batch = repair_updates(self.installed, event.port)
        if not batch:
            return None, 0
        try:
            errors = await self._write(batch)
        except TARGET_LOST as err:
            LOG.warning("local repair of port %d not written: target lost (%s)", event.port, err)
            self.installed = None
            self._reconcile_pending = True
            return None, 0
        commit_mono, commit_wall = time.monotonic_ns(), time.time_ns()
        if errors:
            first = errors[0]
            LOG.error(
                "local repair of port %d: %d of %d updates failed; first: %s: code %d: %s",
                event.port,
                len(errors),
                len(batch),
                batch[first.index].entry.key,
                first.code,
                first.message,
            )
            self.installed = None
            self._reconcile_pending = True
            self._wake.set()
            return None, 0
        self.installed = self.installed.replaced(u.entry for u in batch)
        record = RepairRecord(event.port, len(batch), commit_mono - event.monotonic_ns)
        self.repairs.append(record)
        if self._on_repair is not None:
            self._on_repair(record)
        LOG.info(
            REPAIR_LOG_FORMAT,
            event.port,
            record.groups,
            record.latency_ns / 1e6,
        )
        return record, commit_wall

    async def _message(self, msg: control_pb2.ControllerMessage, received_wall_ns: int) -> None:
        self._received_wall_ns = received_wall_ns
        kind = msg.WhichOneof("msg")
        name = getattr(msg, kind or "desired_state").switch_name
        if self.switch_name and name and name != self.switch_name:
            LOG.error("ignored a %s for switch %r: this agent is %r", kind, name, self.switch_name)
            return
        if kind == "desired_state":
            state = state_pb2.DesiredState()
            state.CopyFrom(msg.desired_state)
            if not state.digest:
                state.digest = state_digest(state)
            self.held = state
        elif kind == "state_delta":
            delta = msg.state_delta
            if self.held is None:
                LOG.warning(
                    "StateDelta %d->%d before any snapshot; asking for one",
                    delta.from_generation,
                    delta.to_generation,
                )
                self._request_snapshot()
                return
            try:
                new = apply_delta(self.held, delta)
            except DeltaError as err:
                LOG.warning("%s; asking for a snapshot", err)
                self._request_snapshot()
                return
            self.held = new
            if delta.digest and delta.digest != new.digest:
                LOG.warning(
                    "generation %d: digest differs from the controller's; asking for a snapshot",
                    new.generation,
                )
                self._request_snapshot()
        else:
            return
        # The controller has spoken since ports came back: its groups decide now.
        self.held_out.clear()
        await self._sync()

    async def _reconcile(self) -> None:
        await self.target.ensure_pipeline()
        await self._read_back()
        if self.held is None and self.adopted is None and self.installed is not None:
            entries = dict(self.installed.entries)
            for acl in control_acl():
                entries.setdefault(acl.key, acl)
            self.adopted = Pipeline(entries)
            LOG.info(
                "no controller state yet: adopted the %d entries the target holds",
                len(self.installed),
            )
            # Adopted, the read-back is the baseline, not compared with one: the control
            # entries it lacks (every fresh switch's first boot) are this agent's own first
            # writes, not a target that diverged behind its back.
            self._checked(ReadBack(self._unchecked_read_ns))
            self._unchecked_read_ns = 0
        await self._sync()
        self._reconciling = False
        self._on_read_back(self.read_back)  # the health report: no longer reconciling

    async def _read_back(self) -> None:
        self.installed, _ = await self.target.read_pipeline()
        self._unchecked_read_ns = time.time_ns()

    async def _sync(self) -> None:
        """Write the difference between what the target holds and what is wanted."""
        installed, excluded = self.installed, self.excluded()
        if self.held is None and self.adopted is None:
            if self._unchecked_read_ns:
                self._checked(ReadBack(self._unchecked_read_ns))  # nothing to compare with
                self._unchecked_read_ns = 0
            return
        if installed is None or not self.target.primary.is_set():
            return
        staged: Iterable[list[Update]]
        translation: Translation | None = None
        if self.held is not None:
            # The routes are translated while the first Writes are out (staged_diff).
            translation = Translation(self.held)
            self.problems = translation.problems
            head = repair(translation.head, excluded)
            staged = staged_diff(installed, head, translation)
        else:
            assert self.adopted is not None
            head = repair(self.adopted, excluded)
            staged = diff(installed, head)
        stages, failures = await self._write_stages(staged)
        wanted = head if translation is None else translation.joined(head)
        # After the writes: the routes' problems are found while the first ones are out.
        errors: list[control_pb2.ObjectError] = [
            control_pb2.ObjectError(object=p.object, code=3, message=p.message)  # INVALID_ARG.
            for p in self.problems
        ]
        failed = False
        for update, err in failures:
            failed = True
            errors.append(
                control_pb2.ObjectError(
                    object=object_name(update.entry),
                    code=err.code,
                    message=f"{update.op.value} {update.entry.key}: {err.message}",
                )
            )
        written = sum(len(stage) for stage in stages)
        read_ns, self._unchecked_read_ns = self._unchecked_read_ns, 0
        if failed:
            await self._read_back()
        else:
            self.installed = wanted
        if read_ns:
            ops = collections.Counter(u.op for stage in stages for u in stage)
            if written:
                LOG.warning(
                    "read-back: the target differed from what this agent installed "
                    "(%d missing, %d unexpected, %d changed)%s",
                    ops[Op.INSERT],
                    ops[Op.DELETE],
                    ops[Op.MODIFY],
                    "; repair failed" if failed else "; repaired",
                )
            self._checked(
                ReadBack(
                    read_ns,
                    ops[Op.INSERT],
                    ops[Op.DELETE],
                    ops[Op.MODIFY],
                    time.time_ns() if written and not failed else 0,
                )
            )
        if self.held is not None:
            self.applied_generation = self.held.generation
            self.applied_digest = self.held.digest
            self._on_applied(
                control_pb2.Applied(
                    generation=self.held.generation,
                    errors=errors,
                    digest=self.held.digest,
                    wall_ns=time.time_ns(),
                    updates_written=written,
                    received_wall_ns=self._received_wall_ns,
                )
            )
        if written:
            LOG.info(WROTE_LOG_FORMAT, written, self.applied_generation)
        self.synced.set()

    def _checked(self, result: ReadBack) -> None:
        self.read_back = result
        self._on_read_back(result)

    async def _write_stages(
        self, stages: Iterable[list[Update]]
    ) -> tuple[list[list[Update]], list[tuple[Update, UpdateError]]]:
        """The stages of `diff` in Writes of at most WRITE_CHUNK updates. A stage starts only
        when the previous one is committed. Inside a stage the updates are independent, so up
        to WRITES_IN_FLIGHT of its Writes are outstanding at once (the target is never idle
        waiting for the next one) -- except in a stage that creates members, whose Writes go
        one at a time so members are created in port order. The next chunk, and the next
        stage (`staged_diff` makes them as they are asked for), are made while the previous
        Writes are in flight. Returns the stages written and the updates the target refused."""
        written: list[list[Update]] = []
        failures: list[tuple[Update, UpdateError]] = []
        in_flight: collections.deque[tuple[list[Update], asyncio.Future[list[UpdateError]]]]
        in_flight = collections.deque()

        async def settle(keep: int) -> None:
            while len(in_flight) > keep:
                chunk, future = in_flight.popleft()
                failures.extend((chunk[e.index], e) for e in await future)

        try:
            for stage in stages:
                written.append(stage)
                ordered = any(isinstance(u.entry, MemberEntry) for u in stage)
                outstanding = 1 if ordered else WRITES_IN_FLIGHT
                for start in range(0, len(stage), WRITE_CHUNK):
                    chunk = stage[start : start + WRITE_CHUNK]
                    encoded = self.codec.encode_updates(chunk)
                    await settle(0 if start == 0 else outstanding - 1)
                    self.writes += 1
                    self.updates_written += len(chunk)
                    in_flight.append((chunk, asyncio.ensure_future(self.target.write(encoded))))
                    # One turn: the Write goes out (P4Target.write) before the next is encoded.
                    await asyncio.sleep(0)
            await settle(0)
        finally:
            # Only when a Write raised (target lost): the others' results no longer matter;
            # the target is read back and reconciled.
            for _, future in in_flight:
                future.cancel()
        return written, failures

    async def _write(self, batch: list[Update]) -> list[UpdateError]:
        self.writes += 1
        self.updates_written += len(batch)
        return await self.target.write(self.codec.encode_updates(batch))
