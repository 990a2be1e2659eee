"""The decision core: the controller's state and every decision it makes, as a pure state
machine (faucet's `datapath_connect(now, ...)` returning messages is the model).

Each input — Hello, Applied, PortStatus, Neighbors, Counters, a session's end, a timer tick,
an intent reload, the store's health, an operator's drain or undrain — is a method that takes
`now` and returns the effects it wants (controller/core/effects.py): the records of the input
as one `Persist`, then `Push`es in the order they must leave, log lines, and the next
`Schedule`. Nothing here reads a clock, touches a socket or the store, or writes a log line
itself; the daemon's runner does that.

Guarantees the model-based tests (tests/unit/core/test_machine_model.py) check after every step:
each switch's deltas form a gap-free generation chain on its session (a delta leaves only when
it starts at the generation the session was last sent, otherwise a full state does), deferred
deltas leave in event order (convergence.HeldDelta), and at quiescence every switch's desired
state forwards exactly as a from-scratch computation over the current link states, drained
links taken out.
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from controller.core import drains, latency, matrix, roce
from controller.core import events as ev
from controller.core.alarms import Alarms
from controller.core.cabling import MISWIRE, SILENT, CablingCheck, CablingPlan, ServerLldp
from controller.core.clock import Now
from controller.core.convergence import DEFER_LIMIT_NS, Convergence, Gate, Held, HeldDeltas
from controller.core.deadlines import Deadlines
from controller.core.drains import (
    DrainConflict,
    DrainError,
    DrainNotFound,
    DrainPlan,
    DrainRefused,
)
from controller.core.effects import (
    CloseSession,
    Effect,
    Level,
    Log,
    Persist,
    Push,
    Rebuild,
    Schedule,
    StateWire,
)
from controller.core.links import DampingParams, LinkState, LinkTracker, Transition
from controller.core.planner import End, Isolation, PlannedLink, Planner
from controller.core.rebuild import Planned, Rebuilt, planned_state, rebuild
from controller.core.records import (
    AlarmCleared,
    AlarmRecord,
    DrainCleared,
    DrainRecord,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    Restored,
    RoutingReset,
    RoutingStep,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.core.switches import SwitchView, UnknownSwitch, lookup
from railfabric.delta import (
    DeltaError,
    StateIndex,
    apply_delta_in_place,
    delta_size,
    packed,
)
from railfabric.v1 import admin_pb2, control_pb2, state_pb2

__all__ = [
    "DecisionCore",
    "DrainConflict",
    "DrainError",
    "DrainNotFound",
    "DrainRefused",
    "UnknownSwitch",
]

# The routing log is replayed at start-up, a computation per batch of joined steps, so it is
# kept short: past this many computations, the first moment every link is usable and nothing is
# in flight, routing restarts from scratch. (Counted in computations, not steps: a cold start's
# one batch of every link of ref-100k is 135k steps, one replay, and worth no from-scratch
# reload and full state to every switch.)
ROUTING_LOG_LIMIT = 1000
# Recent events kept in memory for the admin API (the store keeps its own bounded history).
EVENTS_IN_MEMORY = 10_000
STORE_ALARM = "store_unavailable"
# Where the routing log starts from (a Meta record): every link usable (the log of a store
# that predates it, and after a compaction) or none (a cold start: nothing is observed yet,
# and taking every link out one at a time would cost one computation per link).
ROUTING_BASELINE = "routing_baseline"
EVERY_LINK_USABLE, NO_LINK_USABLE = "every_link_usable", "no_link_usable"
# How long a switch's links stay as last observed after its session ends (or, at start-up,
# before its agent says Hello again): agents reconnect within their backoff (at most 5 s
# between tries), so a controller restart or an agent reconnect changes no route. Past it, the
# switch's ports count as unobserved and routes go around it.
SESSION_GRACE_NS = 15_000_000_000
# Links discovered (usable for the first time since unknown: a start, an agent back after its
# grace) join routing together: once none has been discovered for DISCOVERY_SETTLE_NS, or
# DISCOVERY_MAX_NS after the first of them. A storm of Hellos would otherwise cost a routing
# run, and a delta to every switch it changes, per Hello (on ref-100k, minutes). Returns after
# a hold-down and links going away are routed at once, as before.
DISCOVERY_SETTLE_NS = 250_000_000
DISCOVERY_MAX_NS = 3_000_000_000
# After the controller starts, while more than DISCOVERY_QUORUM of the switches have not said
# Hello yet, discovered links wait for them (at most DISCOVERY_START_MAX_NS after the first
# discovery): the agents of a large fabric reconnect over tens of seconds (TLS handshakes),
# and a batch every DISCOVERY_MAX_NS meanwhile would send every connected switch a new state
# each time (ref-100k: the storm never caught up). The Hello that makes the quorum starts the
# batch's DISCOVERY_MAX_NS afresh: the last few percent are usually queued right behind it,
# and routing them after the batch cost ref-100k an incremental computation and a delta to
# every ToR (11 s of its storm).
DISCOVERY_QUORUM = 0.05
DISCOVERY_START_MAX_NS = 60_000_000_000


@dataclass
class _Discovered:
    """Links discovered and not routed yet, in discovery order."""

    transitions: dict[str, Transition[str]] = field(default_factory=dict)
    first_mono_ns: int = 0
    last_mono_ns: int = 0
    first_wall_ns: int = 0
    opened_mono_ns: int = 0  # DISCOVERY_MAX_NS counts from here

    def add(self, t: Transition[str], now: Now) -> None:
        if not self.transitions:
            self.first_mono_ns, self.first_wall_ns = now.mono_ns, now.wall_ns
            self.opened_mono_ns = now.mono_ns
        self.transitions[t.link] = t
        self.last_mono_ns = now.mono_ns

    @property
    def deadline_ns(self) -> int | None:
        if not self.transitions:
            return None
        return min(self.last_mono_ns + DISCOVERY_SETTLE_NS, self.opened_mono_ns + DISCOVERY_MAX_NS)


@dataclass
class _Rebuilding:
    """A computation from scratch under way off the event loop (controller/core/rebuild.py):
    its token, why (for its event), and the links discovered that join routing with it."""

    token: int
    why: str
    joining: set[str]


@dataclass
class _Out:
    """What one input produced, turned into effects by `_finish`."""

    records: list[Record] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    generations: dict[str, SwitchGeneration] = field(default_factory=dict)
    pushed: dict[str, int] = field(default_factory=dict)  # switch -> generation
    objects: int = 0
    snapshots: int = 0

    def log(self, level: Level, text: str) -> None:
        self.effects.append(Log(level, text))


@dataclass(slots=True)
class _LatencyRead:
    """DecisionCore._latency_read's reading, and the outliers once read from it."""

    key: tuple[int, ...]
    window: latency.Period
    baseline: latency.Period
    bad: dict[latency.Pair, list[int]]
    outliers: list[latency.LinkOutlier] | None = None


class DecisionCore:
    """The controller's decisions. Build it, call `start` once, then feed it inputs."""

    tracker: LinkTracker[str]
    plan: dict[tuple[str, int], tuple[str, int]]
    views: dict[str, SwitchView]
    cabling: CablingCheck

    def __init__(
        self, planner: Planner, damping: DampingParams, grace_ns: int = SESSION_GRACE_NS
    ) -> None:
        if grace_ns < 0:
            raise ValueError(f"session grace must be >= 0 ns, got {grace_ns}")
        self.planner = planner
        self.damping = damping
        self.grace_ns = grace_ns
        self.routing_log_limit = ROUTING_LOG_LIMIT
        self.views = {}
        # Switches without a session whose ports still count as observed, with the monotonic
        # time their grace ends.
        self._absent = Deadlines()
        self.alarms = Alarms()
        self.cabling = CablingCheck(CablingPlan(()), ServerLldp())  # _load makes the real one
        self.events: deque[admin_pb2.Event] = deque(maxlen=EVENTS_IN_MEMORY)
        self.routing_log: list[RoutingStep] = []
        self.refused: dict[str, int] = {}
        # Operators' drains by link key, oldest first: kept out of routing until undrained.
        self.drains: dict[str, DrainRecord] = {}
        self._links: dict[str, PlannedLink] = {}
        self._pending: dict[int, Convergence] = {}
        self._held = HeldDeltas()
        # Switches whose state is due to be packed (_pack_due), in the order they fell due,
        # and when `tick` packs the next of them: after the event that changed them, whose
        # pushes must not wait for it.
        self._to_pack: dict[str, None] = {}
        self._pack_at_ns: int | None = None
        self._discovered = _Discovered()
        self._rebuilding: _Rebuilding | None = None
        # Connected switches whose agent forwards with a state of its own and whose snapshot
        # waits for the discovered links to join routing (`hello`, `_send_awaiting`), at most
        # until `_awaiting_until_ns`; `_cold`: a start with no link observed, until the first
        # discovered links are routed.
        self._awaiting: set[str] = set()
        self._awaiting_until_ns: int | None = None
        self._cold = False
        self._rebuilds = 0  # tokens given out
        # Switches that have not said Hello since the controller started.
        self._unheard: set[str] = set()
        self._next_event = 0
        self._started = False
        self._baseline_usable = True
        # (planner, the rail of each traffic matrix class's destination), made when first needed.
        self._matrix_rails: tuple[Planner, matrix.ClassRails] | None = None
        # RoCE retransmission and congestion: rates, sampled NAKs, their alarms.
        self.roce = roce.RoceMonitor(planner.roce)
        self._roce_context = _RoceContext(self)
        # Latency probe results (the heat map), and the plan as they need it (_load).
        self.latency = latency.LatencyWindows(planner.latency)
        self.latency_fabric = latency.Fabric({}, {})
        self.link_ends: dict[str, tuple[End, End]] = {}
        self.switch_rails: dict[str, int] = {}
        self._latency_reads: _LatencyRead | None = None

    # -- start-up and reload
    def start(self, restored: Restored, now: Now) -> list[Effect]:
        """Resume from what the store kept: alarms, events, link states, the routing log
        (replayed so group ids come out as agents hold them) and generations."""
        assert not self._started, "start is called once"
        self._started = True
        out = _Out()
        self.alarms = Alarms(restored.alarms)
        self.events.extend(restored.events)
        self.routing_log = list(restored.routing_log)
        self.drains = {d.link: d for d in restored.drains}
        topology = topology_digest(self.planner)
        if restored.meta.get("topology_digest") != topology:
            # Another fabric: its routing history and link states mean nothing here.
            self.routing_log = []
            links: Mapping[str, LinkRecord] = {}
            self._baseline_usable = False
            out.records += [
                RoutingReset(),
                Meta("topology_digest", topology),
                Meta(ROUTING_BASELINE, NO_LINK_USABLE),
            ]
        else:
            links = restored.links
            self._baseline_usable = (
                restored.meta.get(ROUTING_BASELINE, EVERY_LINK_USABLE) == EVERY_LINK_USABLE
            )
        previous = {n: (s.generation, s.digest) for n, s in restored.switches.items()}
        self._load(previous, out, now, links=links)
        self._cold = not self._baseline_usable and not self.routing_log
        for name, s in restored.switches.items():
            v = self.views.get(name)
            if v is not None:
                v.applied_generation = s.applied_generation
        # The links as last observed hold while the agents reconnect.
        self._absent.clear()
        for name in self.views:
            self._absent.set(name, now.mono_ns + self.grace_ns)
        self._unheard = set(self.views)
        return self._finish(out, now)

    def sessions_open(self, now: Now) -> list[Effect]:
        """Agents' sessions reach the core from `now` on (the daemon's start-up gate opened).
        The grace of each switch not heard from counts from here, not from `start`: on a
        large fabric the start takes longer than the grace while every session waits at the
        gate, and counting from it would forget every switch's links at once."""
        out = _Out()
        deadline = now.mono_ns + self.grace_ns
        for name, at in list(self._absent.items()):
            self._absent.set(name, max(at, deadline))
        return self._finish(out, now)

    def reload(self, planner: Planner, now: Now) -> list[Effect]:
        """Serve a new intent. Switches whose state changed get a full DesiredState at the
        next generation; link states, timers and everything agents reported carry over;
        sessions of switches the intent no longer has are closed."""
        out = _Out()
        self._reload(planner, now, out)
        return self._finish(out, now)

    def _reload(
        self,
        planner: Planner,
        now: Now,
        out: _Out,
        *,
        announce: bool = True,
        same_intent: bool = False,
    ) -> None:
        """`planner` from now on (`announce`: a new intent, said in an event; `same_intent`:
        the same intent computed afresh, so its cabling plan holds)."""
        # A computation from scratch under way is for the routing replaced here: its links
        # join this one, and its result is dropped when it comes.
        self._rebuilding = None
        for switch in self._held.switches():
            for h in self._held.take_all(switch):
                self._release(switch, h, now, out)
        self._pending.clear()
        old_views, old_tracker = self.views, self.tracker
        self.planner = planner
        previous = {n: (v.state.generation, v.state.digest) for n, v in old_views.items()}
        self._load(previous, out, now, carry=old_tracker, same_intent=same_intent)
        for name, v in list(self.views.items()):
            was = old_views.get(name)
            if was is None:
                continue
            carried = self.views[name] = v.carried_from(was)
            changed = carried.state.digest != was.state.digest
            if changed and carried.connected and name not in self._awaiting:
                self._send_snapshot(carried, out)
        gone = sorted(set(old_views) - set(self.views))
        for name in gone:
            self._absent.discard(name)
            self._unheard.discard(name)
        for name, v in self.views.items():
            if name not in old_views and not v.connected:
                self._absent.set(name, now.mono_ns + self.grace_ns)
        for name in gone:
            if old_views[name].connected:
                out.effects.append(CloseSession(name, "switch is no longer in the fabric intent"))
        if not announce:
            return
        text = f"intent {planner.fabric_name} loaded: {len(self.views)} switches"
        if gone:
            text += f"; no longer in the intent: {', '.join(gone)}"
        self._event(out, ev.event(now.wall_ns, ev.K.EVENT_KIND_INTENT_RELOADED, text))

    def _load(
        self,
        previous: Mapping[str, tuple[int, str]],
        out: _Out,
        now: Now,
        links: Mapping[str, LinkRecord] | None = None,
        carry: LinkTracker[str] | None = None,
        *,
        same_intent: bool = False,
    ) -> None:
        planner = self.planner
        self._links = {link.key: link for link in planner.links()}
        for key in [k for k in self._discovered.transitions if k not in self._links]:
            del self._discovered.transitions[key]
        self.tracker = LinkTracker(
            ((link.key, link.a, link.b) for link in self._links.values()),
            self.damping,
        )
        self.plan = {}
        for link in self._links.values():
            self.plan[link.a], self.plan[link.b] = link.b, link.a
        for key in [k for k in self.drains if k not in self._links]:
            gone = self.drains.pop(key)
            out.records.append(DrainCleared(key))
            self._event(
                out,
                ev.event(
                    now.wall_ns,
                    ev.K.EVENT_KIND_UNDRAIN,
                    f"link {key} is no longer in the intent: its drain by {gone.who} is dropped",
                ),
            )
        if carry is not None:
            self.tracker.carry(carry)
        for key, rec in (links or {}).items():
            if key in self._links and rec.state != LinkState.UNKNOWN.value:
                since = now.mono_of(rec.since_wall_ns)
                self.tracker.restore(key, LinkState(rec.state), since, rec.flaps)
        self.tracker.drain_changed()  # restored, not changed
        # Replay what routing went through, in order, so group ids come out as the agents
        # hold them; then take out whatever the link states say is unusable.
        usable = dict.fromkeys(self._links, self._baseline_usable)
        if not self._baseline_usable:
            planner.set_all_unusable()
        for batch in _computations(self.routing_log):
            changes = [
                (s.link, s.usable) for s in batch if s.link in usable and usable[s.link] != s.usable
            ]
            if changes:
                planner.set_links_usable(changes, deltas=False)
                usable.update(changes)
        catch_up = [(key, not ok) for key, ok in usable.items() if ok != self.routable(key)]
        if catch_up:
            # Whole states are exported below: the deltas would be thrown away.
            planner.set_links_usable(catch_up, deltas=False)
            for i, (key, ok) in enumerate(catch_up):
                self._routing_step(RoutingStep(key, ok, joined=i > 0), out)
        self.views = {}
        for info in planner.switches():
            state, index, shared = planned_state(planner, info.name)
            digest = state.digest
            prev = previous.get(info.name)
            if prev is None:
                generation = 1
            elif prev[1] == digest:
                generation = prev[0]
            else:
                generation = prev[0] + 1
            state.generation, state.digest = generation, digest
            view = self.views[info.name] = SwitchView.of(info.name, state, shared)
            view.index = index
            if prev != (generation, digest):
                out.generations[info.name] = SwitchGeneration(info.name, generation, digest)
        # The cabling check of this plan, with what was heard so far and every cabling alarm
        # (restored or raised under the previous plan) to be looked at again.
        # The plan is the intent's cabling (states' ports and neighbours, which links do not
        # change): the same intent keeps it (rebuilt, it cost seconds on ref-100k).
        self.cabling = CablingCheck(
            self.cabling.plan if same_intent else CablingPlan(v.state for v in self.views.values()),
            planner.server_lldp,
            flagged=[
                (a.switch, a.port)
                for a in self.alarms.active.values()
                if a.kind in (MISWIRE, SILENT)
            ],
            carry=self.cabling,
        )
        self.roce.params = planner.roce
        self.roce.keep_only(self.views)
        self.link_ends = {k: (link.a, link.b) for k, link in self._links.items()}
        self.switch_rails = {i.name: i.rail for i in planner.switches()}
        self.latency_fabric = latency.Fabric.of(
            ((k, link.a, link.b) for k, link in self._links.items()),
            {i.name: i.rail for i in planner.switches() if i.role == admin_pb2.SWITCH_ROLE_TOR},
        )
        if self.latency.same_geometry(planner.latency):
            self.latency.params = planner.latency
        else:  # other slots: what was measured does not fit them
            self.latency = latency.LatencyWindows(planner.latency)

    # -- agent sessions
    def hello(self, hello: control_pb2.Hello, now: Now) -> list[Effect]:
        """Attach a session (or resync one: a Hello mid-session asks for a snapshot). Raises
        UnknownSwitch for a name the intent does not have."""
        v = lookup(self.views, hello.switch_name)
        out = _Out()
        # No pushes while the catch-up below runs: whatever it changes is in the snapshot.
        v.connected, v.sent_generation = False, None
        v.agent_version, v.last_seen_wall_ns = hello.agent_version, now.wall_ns
        v.applied_generation, v.applied_digest = hello.applied_generation, hello.applied_digest
        v.applied_errors = []
        v.port_carrier = {port.port: port.oper_up for port in hello.ports}
        # Interned: every switch names its ports alike (eth1...), and each Hello's names were
        # strings of their own, 23 MiB of ref-100k's 270,336 cabled switch ports (9 interned).
        v.port_names = {port.port: sys.intern(port.ifname) for port in hello.ports}
        self._event(
            out,
            ev.event(
                now.wall_ns,
                ev.K.EVENT_KIND_SESSION_UP,
                f"agent {hello.agent_version} connected",
                switch=v.name,
                generation=hello.applied_generation,
            ),
        )
        self._absent.discard(v.name)
        if v.name in self._unheard:
            waiting = self._waiting_for_quorum()
            self._unheard.discard(v.name)
            if waiting and not self._waiting_for_quorum():
                self._discovered.opened_mono_ns = now.mono_ns
        v.target_health = hello.target_health if hello.HasField("target_health") else None
        # Carrier as the agent sees it now (it may have changed while the agent was away, or
        # the controller restarted): every reported port is an observation, and a port of the
        # intent the agent does not report is not observed at all (its port map lacks it).
        # Routed together at the end: one computation for all of the Hello's links.
        moved: list[Transition[str]] = []
        reported = {info.port for info in hello.ports}
        for info in hello.ports:
            end = (v.name, info.port)
            if self.tracker.link_of(end) is not None:
                moved += self.tracker.report(now.mono_ns, end, info.oper_up)
        # Only a switch that had unmapped ports has any to clear (a Hello names every port).
        unmapped = self.alarms.kind("port_unmapped")
        for number in sorted(v.ports):
            alarm_id = f"port_unmapped:{v.name}:{number}"
            if number in reported:
                if unmapped:
                    self._clear(alarm_id, now, out, switch=v.name, port=number, why="port mapped")
                continue
            text = (
                f"{v.name} port {number} is in the fabric intent but not in the agent's port map: "
                "nothing is known of it and routes do not use it"
            )
            alarm = AlarmRecord(
                alarm_id, "warning", "port_unmapped", v.name, number, text, now.wall_ns
            )
            self._raise(alarm, out)
            if self.tracker.link_of((v.name, number)) is not None:
                moved += self.tracker.forget(now.mono_ns, (v.name, number))
        self._route(moved, now, now.wall_ns, out)
        self._target_alarm(v, now, out)
        v.connected = True
        self._awaiting.discard(v.name)
        if v.converged:
            v.sent_generation = v.state.generation
        elif hello.applied_digest and (self._cold or self._joining(v)):
            # The agent forwards with a state of its own and its links have not joined routing
            # yet (a start without the store's link states, or the agent back after its
            # grace): a snapshot now would take them out of its tables until they join.
            self._awaiting.add(v.name)
            if self._awaiting_until_ns is None:
                self._awaiting_until_ns = now.mono_ns + DISCOVERY_START_MAX_NS
        else:
            self._send_snapshot(v, out)
        return self._finish(out, now)

    def _joining(self, v: SwitchView) -> bool:
        """Some link of `v` was discovered and waits to join routing."""
        found = self._discovered.transitions
        joining = self._rebuilding.joining if self._rebuilding is not None else set()
        for port in v.ports:
            key = self.tracker.link_of((v.name, port))
            if key is not None and (key in found or key in joining):
                return True
        return False

    def _send_awaiting(self, out: _Out) -> None:
        """Discovery is done: the switches `hello` kept waiting get their state (those gone
        or sent it meanwhile are dropped)."""
        for name in sorted(self._awaiting):
            v = self.views.get(name)
            if v is None or not v.connected or v.sent_generation == v.state.generation:
                continue
            if v.converged:
                v.sent_generation = v.state.generation
            else:
                self._send_snapshot(v, out)
        self._awaiting.clear()
        self._awaiting_until_ns = None

    def disconnected(self, name: str, now: Now) -> list[Effect]:
        v = self.views.get(name)
        if v is None:
            return []
        out = _Out()
        v.connected, v.sent_generation = False, None
        self._absent.set(name, now.mono_ns + self.grace_ns)
        self._event(
            out,
            ev.event(
                now.wall_ns,
                ev.K.EVENT_KIND_SESSION_DOWN,
                f"agent disconnected; its links stay as last observed for "
                f"{self.grace_ns / 1e9:g} s",
                switch=name,
                generation=v.applied_generation,
            ),
        )
        # Its held deltas join its state now (it gets a snapshot when it returns), and
        # nothing waits for it any more.
        for h in self._held.take_all(name):
            self._release(name, h, now, out)
        for event_id, conv in list(self._pending.items()):
            if conv.waiting.pop(name, None) is not None and conv.done:
                self._converged(event_id, conv, now, out)
        self._release_ready(now, out)
        return self._finish(out, now)

    def applied(self, name: str, msg: control_pb2.Applied, now: Now) -> list[Effect]:
        v = lookup(self.views, name)
        out = _Out()
        sent = v.sent_generation
        if sent is None or msg.generation > sent:
            self._refuse(
                out,
                "applied_unsent",
                f"{name}: Applied for generation {msg.generation}, which was never sent "
                f"(last sent {sent}); ignored",
            )
            return self._finish(out, now)
        v.last_seen_wall_ns = now.wall_ns
        v.applied_generation, v.applied_digest = msg.generation, msg.digest
        v.applied_errors = list(msg.errors)
        v.updates_written += msg.updates_written
        out.records.append(SwitchApplied(name, msg.generation))
        if msg.errors:
            first = msg.errors[0]
            self._event(
                out,
                ev.event(
                    now.wall_ns,
                    ev.K.EVENT_KIND_APPLY_FAILED,
                    f"{len(msg.errors)} objects refused, first: {first.object}: {first.message}",
                    switch=name,
                    generation=msg.generation,
                ),
            )
        applied_wall = msg.wall_ns or now.wall_ns
        for event_id, conv in list(self._pending.items()):
            wanted = conv.waiting.get(name)
            if wanted is not None and msg.generation >= wanted:
                del conv.waiting[name]
                conv.last_applied_wall_ns = max(conv.last_applied_wall_ns, applied_wall)
                conv.last_received_wall_ns = max(conv.last_received_wall_ns, msg.received_wall_ns)
                if conv.done:
                    self._converged(event_id, conv, now, out)
        self._release_ready(now, out)
        return self._finish(out, now)

    def _port_of(
        self, v: SwitchView, port: int, what: str, *, reason: str, out: _Out, now: Now
    ) -> bool:
        """Whether `port`, named by an agent's `what` message, is one of the switch's; else
        the message is refused, counted under `reason`. A known port's message shows the
        switch alive."""
        if port not in v.ports:
            self._refuse(
                out,
                reason,
                f"{v.name}: {what} for port {port}, "
                "which the switch does not have in the intent; ignored",
            )
            return False
        v.last_seen_wall_ns = now.wall_ns
        return True

    def port_status(self, name: str, msg: control_pb2.PortStatus, now: Now) -> list[Effect]:
        v = lookup(self.views, name)
        out = _Out()
        if not self._port_of(
            v, msg.port, "PortStatus", reason="port_status_unknown_port", out=out, now=now
        ):
            return self._finish(out, now)
        v.port_carrier[msg.port] = msg.up
        change = admin_pb2.PortChange(
            up=msg.up,
            groups_repaired=msg.groups_repaired,
            local_repair_ns=msg.local_repair_ns,
            detected_wall_ns=msg.wall_ns,
        )
        self._event(out, ev.port_change(now.wall_ns, name, msg.port, change))
        end = (name, msg.port)
        key = self.tracker.link_of(end)
        if key is not None:  # else a host-facing port: no switch link to route around
            self._carrier(end, key, msg.up, now, out, event_wall_ns=msg.wall_ns or now.wall_ns)
        return self._finish(out, now)

    def local_repair(self, name: str, msg: control_pb2.LocalRepair, now: Now) -> list[Effect]:
        """An agent's committed local repair: an event with its figures (the routing heard of
        the carrier loss from the PortStatus before it)."""
        v = lookup(self.views, name)
        out = _Out()
        if not self._port_of(
            v, msg.port, "LocalRepair", reason="local_repair_unknown_port", out=out, now=now
        ):
            return self._finish(out, now)
        change = admin_pb2.PortChange(
            up=False,
            groups_repaired=msg.groups_repaired,
            local_repair_ns=msg.latency_ns,
            detected_wall_ns=msg.detected_wall_ns,
        )
        self._event(out, ev.local_repair(now.wall_ns, name, msg.port, change))
        return self._finish(out, now)

    def neighbors(self, name: str, msg: control_pb2.Neighbors, now: Now) -> list[Effect]:
        """A switch's LLDP table against the cabling plan (controller/core/cabling.py)."""
        v = lookup(self.views, name)
        out = _Out()
        v.last_seen_wall_ns, v.neighbors_wire = now.wall_ns, msg.SerializeToString()
        verdict = self.cabling.report(name, msg.neighbors, now.mono_ns, self.alarms.active)
        for f in verdict.raised:
            alarm = AlarmRecord(
                f.alarm_id, f.severity, f.kind, name, f.port, f.message, now.wall_ns
            )
            self._raise(alarm, out)
        for c in verdict.cleared:
            self._clear(c.alarm_id, now, out, switch=name, port=c.port, why=c.why)
        return self._finish(out, now)

    def duplicate_agent(self, name: str, serving: str, waiting: str, now: Now) -> list[Effect]:
        """Two agents claim `name`: the serving one keeps it, the other waits (the daemon
        holds its session); operators must stop one."""
        out = _Out()
        text = (
            f"{name}: two agents claim this switch: {serving} serves, {waiting} waits; "
            "stop one of them"
        )
        alarm = AlarmRecord(
            f"duplicate_agent:{name}", "critical", "duplicate_agent", name, 0, text, now.wall_ns
        )
        self._raise(alarm, out)
        return self._finish(out, now)

    def duplicate_agent_gone(self, name: str, now: Now) -> list[Effect]:
        out = _Out()
        self._clear(
            f"duplicate_agent:{name}", now, out, switch=name, why="one agent left for the switch"
        )
        return self._finish(out, now)

    def counters(self, name: str, msg: control_pb2.Counters, now: Now) -> list[Effect]:
        v = lookup(self.views, name)
        v.last_seen_wall_ns = now.wall_ns
        v.take_counters(msg)
        wrong: list[str] = []  # what the report got wrong, said in one warning
        if v.state.HasField("matrix"):  # a ToR: its row of the traffic matrix
            try:
                matrix.record(v.matrix_reports, msg, self._class_rails())
            except ValueError as err:
                wrong.append(f"counters from {name}: {err}")
        if len(msg.roce_cells) != len(msg.roce_packets):  # roce.counts_of counts none of them
            wrong.append(
                f"counters from {name}: Counters.roce_cells has {len(msg.roce_cells)} cells and "
                f"roce_packets {len(msg.roce_packets)}: the RoCE counts of this report are ignored"
            )
        if msg.HasField("probe_results"):
            problems = self.latency.ingest(
                name, msg.probe_results, now.mono_ns, self.latency_fabric
            )
            if problems:
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                wrong.append(f"counters from {name}: ignored {'; '.join(problems[:3])}{more}")
        bad_report = Log(Level.WARNING, "; ".join(wrong)) if wrong else None
        alarms = self.alarms
        active = roce.Active(alarms.kind(roce.RETRANSMISSION), alarms.kind(roce.CONGESTION))
        verdict = self.roce.report(
            name, msg, now.mono_ns, self._roce_context, active, wall_ns=now.wall_ns
        )
        if not verdict.raised and not verdict.cleared:
            return [] if bad_report is None else [bad_report]
        out = _Out()
        if bad_report is not None:
            out.effects.append(bad_report)
        for c in verdict.cleared:
            self._clear(c.alarm_id, now, out, switch=c.switch, port=c.port, why=c.why)
        for f in verdict.raised:
            alarm = AlarmRecord(
                f.alarm_id, "warning", f.kind, f.switch, f.port, f.message, now.wall_ns
            )
            self._raise(alarm, out)
        return self._finish(out, now)

    def _latency_read(self, now: Now, slots: int) -> _LatencyRead:
        """The window of `slots` slots, the baseline and the bad ToR pairs at `now`: one
        reading per state (reports taken in, slot, plan) for the admin API, the web view and
        Prometheus, and for the heat map and the outliers of one answer."""
        w = self.latency
        key = (w.version, now.mono_ns // w.slot_ns, slots, id(w), id(self.planner))
        cached = self._latency_reads
        if cached is not None and cached.key == key:
            return cached
        fabric = self.latency_fabric
        window = w.window(now.mono_ns, slots)
        baseline = w.baseline(now.mono_ns, fabric.rail_of_tor)
        bad = latency.bad_pairs(w.params, window.mesh, baseline.rails, fabric.rail_of_tor)
        read = self._latency_reads = _LatencyRead(key, window, baseline, bad)
        return read

    def latency_outliers(self, now: Now, window_ns: int | None = None) -> list[latency.LinkOutlier]:
        """The cables the latency probes point at, ranked (controller/core/latency.py): read
        only; `window_ns` (rounded up to whole slots, at most the intent's) or the intent's."""
        w = self.latency
        slots, _span = w.window_slots(now.mono_ns, window_ns)
        read = self._latency_read(now, slots)
        if read.outliers is None:
            read.outliers = latency.outliers(
                w.params,
                read.window,
                read.baseline,
                fabric=self.latency_fabric,
                ends=self.link_ends,
                probe_path=self.planner.probe_path,
                bad=read.bad,
            )
        return read.outliers

    def latency_heat(
        self, by: latency.By, now: Now, window_ns: int | None = None
    ) -> tuple[latency.Heat, int]:
        """The heat map's cells `by` ToR pair, rail pair or cable over `window_ns` (as
        latency_outliers reads it), and the window's length in ns: read only."""
        w = self.latency
        slots, span_ns = w.window_slots(now.mono_ns, window_ns)
        read = self._latency_read(now, slots)
        heat = latency.heat(
            by,
            w.params,
            read.window,
            read.baseline,
            fabric=self.latency_fabric,
            ends=self.link_ends,
            rail_of=self.switch_rails,
            bad=read.bad,
        )
        return heat, span_ns

    def roce_answer(self, switch: str = "") -> admin_pb2.RoceResponse:
        """GetRoce's answer (controller/core/roce.py): read-only."""
        return roce.answer(self.roce, self._roce_context, switch)

    def _class_rails(self) -> matrix.ClassRails:
        """The rail of each traffic matrix class's destination, for the planner of now (a
        reload replaces it, and with it the classes)."""
        cached = self._matrix_rails
        if cached is None or cached[0] is not self.planner:
            rail_of = {i.name: i.rail for i in self.planner.switches()}
            rails = matrix.class_rails(self.planner.matrix_destinations(), rail_of)
            cached = self._matrix_rails = (self.planner, rails)
        return cached[1]

    def target_health(self, name: str, msg: control_pb2.TargetHealth, now: Now) -> list[Effect]:
        """The agent's report on its P4 target: a target it cannot program (or that lost
        entries it could not put back) makes the switch not converged, with an alarm."""
        v = lookup(self.views, name)
        out = _Out()
        v.last_seen_wall_ns = now.wall_ns
        was = v.target_health
        v.target_health = msg
        lost = msg.missing + msg.unexpected + msg.modified
        if lost and (was is None or was.last_read_back_wall_ns != msg.last_read_back_wall_ns):
            repaired = "repaired" if msg.repaired_wall_ns else "NOT repaired"
            self._event(
                out,
                ev.event(
                    now.wall_ns,
                    ev.K.EVENT_KIND_TARGET_DIVERGED,
                    f"read-back found {msg.missing} entries missing, {msg.unexpected} "
                    f"unexpected, {msg.modified} changed behind the agent; {repaired}",
                    switch=name,
                    generation=v.applied_generation,
                ),
            )
        self._target_alarm(v, now, out)
        return self._finish(out, now)

    def _target_alarm(self, v: SwitchView, now: Now, out: _Out) -> None:
        """`mastership_lost:SW` while another client is the reachable target's primary (it
        names that client's election id, raised again when another takes over), else
        `target_unhealthy:SW` for whatever else keeps the agent from the target."""
        lost_id = f"mastership_lost:{v.name}"
        usurper = v.mastership_lost_to
        if usurper is None:
            self._clear(lost_id, now, out, switch=v.name, why="no other client holds the target")
        else:
            text = f"{v.name}: {v.target_problem}"
            held = self.alarms.active.get(lost_id)
            if held is not None and held.message != text:
                self._clear(lost_id, now, out, switch=v.name, why="another client took over")
            alarm = AlarmRecord(
                lost_id, "critical", "mastership_lost", v.name, 0, text, now.wall_ns
            )
            self._raise(alarm, out)
        alarm_id = f"target_unhealthy:{v.name}"
        problem = v.target_problem if usurper is None else None
        if problem is None:
            self._clear(alarm_id, now, out, switch=v.name, why="target programmable again")
            return
        text = f"{v.name}: {problem}"
        self._raise(
            AlarmRecord(alarm_id, "critical", "target_unhealthy", v.name, 0, text, now.wall_ns),
            out,
        )

    # -- timers, the intent file, the store
    def tick(self, now: Now) -> list[Effect]:
        """Hold-down and damping expiries, and held deltas whose wait ran out."""
        out = _Out()
        self._release_ready(now, out)
        self._route(self.tracker.tick(now.mono_ns), now, now.wall_ns, out)
        deadline = self._discovery_deadline_ns()
        if deadline is not None and deadline <= now.mono_ns:
            found, self._discovered = self._discovered, _Discovered()
            # As sets, in C: a cold start discovers ref-100k's 135,168 links at once.
            joining = found.transitions.keys() - self.drains.keys()
            # Most of the fabric at once (a cold start), and little left out: from scratch.
            left_out = len(self._unroutable())
            if 2 * len(joining) > len(self._links) and 10 * left_out < len(self._links):
                self._discovered_from_scratch(joining, left_out, now, out)
            elif joining:
                batch = [t for key, t in found.transitions.items() if key in joining]
                self._route_batch(batch, now, found.first_wall_ns, out, None)
            self._cold = False
        if self._awaiting_until_ns is not None and self._awaiting_until_ns <= now.mono_ns:
            self._send_awaiting(out)  # discovery never ended: what there is, not nothing
        for name in self._absent.pop_due(now.mono_ns):
            self._forget_switch(name, now, out)
        if self._pack_at_ns is not None and self._pack_at_ns <= now.mono_ns:
            self._pack_at_ns = None
            self._pack_some()
        return self._finish(out, now)

    def _pack_some(self) -> None:
        """Pack up to PACK_PER_TICK of the states due (a state replaced or a switch gone since
        it fell due is skipped): the same states, in new messages that hold only themselves."""
        for _ in range(min(PACK_PER_TICK, len(self._to_pack))):
            name = next(iter(self._to_pack))
            del self._to_pack[name]
            v = self.views.get(name)
            if v is not None and v.index is not None and _pack_due(name, v.state, v.index):
                v.state, v.index = packed(v.state, v.index)

    def _forget_switch(self, name: str, now: Now, out: _Out) -> None:
        """The grace of a switch without a session ran out: its ports are unobserved."""
        forgotten = 0
        moved: list[Transition[str]] = []
        for port in sorted(self.views[name].ports):
            end = (name, port)
            key = self.tracker.link_of(end)
            if key is None or end in self.tracker.unobserved_ends(key):
                continue
            forgotten += 1
            moved += self.tracker.forget(now.mono_ns, end)
        self._route(moved, now, now.wall_ns, out)
        if forgotten:
            self._event(
                out,
                ev.event(
                    now.wall_ns,
                    ev.K.EVENT_KIND_SESSION_GRACE_ENDED,
                    f"no agent for {self.grace_ns / 1e9:g} s: {forgotten} link ends no longer "
                    "observed, routes go around them",
                    switch=name,
                ),
            )

    def next_deadline_ns(self) -> int | None:
        """The monotonic time `tick` next has work, or None."""
        deadlines = (
            self._held.next_deadline_ns(),
            self.tracker.next_deadline_ns(),
            self._absent.earliest_ns(),
            self._discovery_deadline_ns(),
            self._pack_at_ns,
            self._awaiting_until_ns,
        )
        present = [d for d in deadlines if d is not None]
        return min(present) if present else None

    def _discovery_deadline_ns(self) -> int | None:
        """When the discovered links join routing (DISCOVERY_* above); while a computation
        from scratch is under way, they wait for it to be taken in."""
        deadline = self._discovered.deadline_ns
        if deadline is None or self._rebuilding is not None:
            return None
        if self._waiting_for_quorum():
            return max(deadline, self._discovered.first_mono_ns + DISCOVERY_START_MAX_NS)
        return deadline

    def _waiting_for_quorum(self) -> bool:
        return len(self._unheard) > DISCOVERY_QUORUM * len(self.views)

    def intent_refused(self, error: str, now: Now) -> list[Effect]:
        out = _Out()
        out.log(Level.ERROR, f"reload refused, still serving the previous intent: {error}")
        self._event(out, ev.event(now.wall_ns, ev.K.EVENT_KIND_INTENT_REFUSED, error))
        return self._finish(out, now)

    def store_health(self, available: bool, reason: str, now: Now) -> list[Effect]:
        """The store stopped (or resumed) taking writes. Deciding and forwarding go on from
        memory either way; the alarm tells operators that a restart now would lose state."""
        out = _Out()
        if available:
            self._clear(STORE_ALARM, now, out, why="the store takes writes again")
        else:
            text = (
                f"the controller's store cannot be written ({reason}); deciding from memory, "
                "retrying, and nothing is lost unless the controller stops before it recovers"
            )
            self._raise(
                AlarmRecord(STORE_ALARM, "critical", STORE_ALARM, "", 0, text, now.wall_ns), out
            )
        return self._finish(out, now)

    # -- operators' drains (controller/core/drains.py)
    def plan_drain(self, target: str, *, undrain: bool = False) -> DrainPlan:
        """What a drain (or undrain) of `target` would change; DrainNotFound names the closest
        switch or port, DrainConflict says that nothing would (pure)."""
        name, keys = self._drain_target(target)
        if undrain:
            change = [k for k in keys if k in self.drains]
            if not change:
                what = f"no link of {name} is" if ":" not in name else f"{name} ({keys[0]}) is not"
                raise DrainConflict(f"{what} drained")
        else:
            change = [k for k in keys if k not in self.drains]
            if not change:
                d = self.drains[keys[0]]
                what = "every link of " + name if len(keys) > 1 else f"{name} ({keys[0]})"
                raise DrainConflict(
                    f"{what} is drained already ({drains.drained_text(d)}); "
                    "undrain it first to drain it again"
                )
        unchanged = tuple(k for k in keys if k not in change)
        return DrainPlan(name, tuple(change), unchanged)

    def drain_isolation(self, links: Iterable[str]) -> Isolation:
        """What-if: the ToR pairs that reach each other now and would not with `links` out of
        routing too (pure: computed on copies, routes do not change)."""
        routed = [k for k in links if self.routable(k)]
        return self.planner.isolation(routed) if routed else Isolation()

    def drain(self, target: str, who: str, reason: str, force: bool, now: Now) -> list[Effect]:
        """An operator takes the link `target` names ("SWITCH:PORT") or every link of a switch
        ("SWITCH") out of routing, make before break: the switches that move traffic off the
        links first, the upper end of each link (the switch drained) once they applied. Raises
        DrainNotFound, DrainConflict, or DrainRefused when ToR pairs that have a path now would
        have none (unless `force`); then nothing changed."""
        plan = self.plan_drain(target)
        isolation = self.drain_isolation(plan.links)
        if isolation and not force:
            raise DrainRefused(drains.refusal(plan.target, isolation))
        out = _Out()
        if isolation:
            out.log(Level.WARNING, f"forced by {who}: {drains.refusal(plan.target, isolation)}")
        moved: list[Transition[str]] = []
        for key in plan.links:
            d = DrainRecord(key, who, reason, now.wall_ns, plan.target, bool(isolation))
            self.drains[key] = d
            out.records.append(d)
            self._event(out, ev.drain(now.wall_ns, self.drain_message(d)))
            if self.tracker.usable(key) and key not in self._discovered.transitions:
                moved.append(Transition(key, False, self.tracker.state(key)))
        self._route(moved, now, now.wall_ns, out, planned=self._drained_side(plan))
        out.log(Level.INFO, f"{plan.target} drained by {who}: {len(plan.links)} links")
        return self._finish(out, now)

    def undrain(self, target: str, who: str, reason: str, now: Now) -> list[Effect]:
        """Return the drained links `target` names to routing, make before break (the upper
        end of each link first, the switches that send through it once it applied); no
        hold-down. A link whose carrier is not up stays out until it is. Raises
        DrainNotFound or DrainConflict (nothing named is drained)."""
        plan = self.plan_drain(target, undrain=True)
        out = _Out()
        moved: list[Transition[str]] = []
        for key in plan.links:
            was = self.drains.pop(key)
            out.records.append(DrainCleared(key))
            back = DrainRecord(key, who, reason, now.wall_ns, plan.target, was.forced)
            self._event(out, ev.drain(now.wall_ns, self.drain_message(back), undrain=True))
            self._discovered.transitions.pop(key, None)  # the operator returns it now
            if self.tracker.usable(key):
                moved.append(Transition(key, True, self.tracker.state(key)))
        self._route(moved, now, now.wall_ns, out, planned=self._drained_side(plan))
        out.log(Level.INFO, f"{plan.target} undrained by {who}: {len(plan.links)} links")
        return self._finish(out, now)

    def drain_message(self, d: DrainRecord) -> admin_pb2.LinkDrain:
        link = self._links[d.link]
        return admin_pb2.LinkDrain(
            link=d.link,
            a=admin_pb2.LinkEnd(switch_name=link.a[0], port=link.a[1]),
            b=admin_pb2.LinkEnd(switch_name=link.b[0], port=link.b[1]),
            who=d.who,
            reason=d.reason,
            wall_ns=d.wall_ns,
            target=d.target,
            forced=d.forced,
        )

    def _drained_side(self, plan: DrainPlan) -> frozenset[str]:
        """The switches a drain moves traffic away from: the switch named, or the upper end of
        the link named (links are planned lower tier first)."""
        if ":" not in plan.target or plan.target in self.views:
            return frozenset({plan.target})
        return frozenset(self._links[k].b[0] for k in (*plan.links, *plan.unchanged))

    def _drain_target(self, target: str) -> tuple[str, list[str]]:
        """(the target as the core names it, the link keys it names, in port order)."""
        target = target.strip()
        if not target:
            raise DrainError("name a switch (SWITCH) or a switch port (SWITCH:PORT)")
        switch, port = target, None
        if target not in self.views:
            name, sep, number = target.rpartition(":")
            if sep and number.isdigit() and len(number) <= 4:
                switch, port = name, int(number)
        try:
            v = lookup(self.views, switch)
        except UnknownSwitch as err:
            raise DrainNotFound(str(err)) from None
        linked = [p for p in sorted(v.ports) if self.tracker.link_of((switch, p)) is not None]
        if port is None:
            if not linked:
                raise DrainNotFound(f"{switch} has no switch-to-switch link")
            return switch, [k for p in linked if (k := self.tracker.link_of((switch, p)))]
        key = self.tracker.link_of((switch, port))
        if key is not None:
            return f"{switch}:{port}", [key]
        choices = ", ".join(f"{switch}:{p}" for p in linked) or "none"
        peer = self.cabling.plan.planned((switch, port))
        if peer is not None and peer.kind == state_pb2.PEER_KIND_HOST:
            what = f"{switch}:{port} is a server port ({peer.name}/{peer.nic})"
        else:
            what = f"{switch} has no switch-to-switch link on port {port}"
        close = min(linked, key=lambda p: (abs(p - port), p), default=None)
        hint = f"; did you mean '{switch}:{close}'?" if close is not None else ""
        raise DrainNotFound(f"{what}; its links are on {choices}{hint}")

    # -- queries (the admin API and metrics read these on the event loop)
    def routable(self, key: str) -> bool:
        """Routing uses the link: usable as observed, not drained, not waiting to join with
        the links discovered with it."""
        return (
            self.tracker.usable(key)
            and key not in self.drains
            and key not in self._discovered.transitions
            and (self._rebuilding is None or key not in self._rebuilding.joining)
        )

    def unroutable_links(self) -> list[str]:
        """Links routing avoids: unusable as observed, drained, or discovered and waiting."""
        return sorted(self._unroutable())

    def _unroutable(self) -> set[str]:
        """The links `routable` says no to, found at once."""
        joining = self._rebuilding.joining if self._rebuilding is not None else set()
        return (
            self.tracker.down_set() | set(self.drains) | set(self._discovered.transitions) | joining
        )

    def held_deltas(self, switch: str) -> list[state_pb2.StateDelta]:
        """The deltas make-before-break still holds for `switch`, oldest first (read-only)."""
        return [h.delta for h in self._held.peek(switch)]

    def view(self, name: str) -> SwitchView:
        return lookup(self.views, name)

    def current_wire(self, name: str) -> StateWire | None:
        """The snapshot of the state `name` should hold now (its chain's head), None if the
        intent no longer has the switch: what a coalesced outbox sends instead of queued
        steps."""
        v = self.views.get(name)
        return None if v is None else StateWire.of(v.state, v.shared)

    def planned_link(self, key: str) -> PlannedLink:
        return self._links[key]

    def links(self) -> Iterable[PlannedLink]:
        return self._links.values()

    def predict_path(self, request: admin_pb2.PredictPathRequest) -> admin_pb2.PredictPathResponse:
        """The planner's path under the observed link states, each hop with the links of
        its switch that routing avoids and why (ValueError for a bad request)."""
        reply = self.planner.predict_path(request)
        for hop in reply.hops:
            for port in sorted(self.views[hop.switch_name].ports):
                key = self.tracker.link_of((hop.switch_name, port))
                if key is None or self.routable(key):
                    continue
                link = self._links[key]
                peer = link.b if link.a == (hop.switch_name, port) else link.a
                hop.avoided.append(
                    admin_pb2.AvoidedLink(
                        port=port,
                        peer=admin_pb2.LinkEnd(switch_name=peer[0], port=peer[1]),
                        state=_LINK_STATE[self.tracker.state(key)],
                        reason=self.link_reason(key),
                    )
                )
        return reply

    def link_reason(self, key: str) -> str:
        """Why routing does not use the link, for people; empty when it does."""
        drained = self.drains.get(key)
        observed = self._observed_reason(key)
        if drained is None:
            return observed
        text = drains.drained_text(drained)
        return f"{text}; and {observed}" if observed else text

    def _observed_reason(self, key: str) -> str:
        t = self.tracker
        state = t.state(key)
        if state is LinkState.UP:
            if key in self._discovered.transitions:
                return (
                    "discovered: joins routing with the links discovered with it, once none "
                    f"is found for {DISCOVERY_SETTLE_NS / 1e9:g} s (at most "
                    f"{DISCOVERY_MAX_NS / 1e9:g} s)"
                )
            if self._rebuilding is not None and key in self._rebuilding.joining:
                return "discovered: joins routing with the computation from scratch under way"
            return ""
        if state is LinkState.HOLD_DOWN:
            return (
                f"carrier back on both ends; held down {self.damping.hold_down_ns / 1e9:g} s "
                "before routes return"
            )
        if state is LinkState.DAMPED:
            return f"flapped {t.flaps(key)} times: damped until its flap penalty decays"
        if state is LinkState.DOWN and t.down_ends(key):
            ends = " and ".join(f"{s} port {p}" for s, p in sorted(t.down_ends(key)))
            return f"carrier lost at {ends}"
        why = []
        for switch, port in sorted(t.unobserved_ends(key)):
            v = self.views.get(switch)
            if v is not None and v.connected:
                why.append(f"{switch} port {port} is not in its port map")
            else:
                why.append(f"{switch} has not reported port {port}: no agent session")
        prefix = "down when last observed; " if state is LinkState.DOWN else ""
        return prefix + ("; ".join(why) or "not observed")

    def quiescent(self) -> bool:
        """Nothing held back, no convergence in flight, no discovered link waiting, no
        computation from scratch under way."""
        return (
            not self._held
            and not self._pending
            and not self._discovered.transitions
            and self._rebuilding is None
        )

    # -- routing
    def _carrier(
        self, end: tuple[str, int], key: str, up: bool, now: Now, out: _Out, *, event_wall_ns: int
    ) -> None:
        self._route(self.tracker.report(now.mono_ns, end, up), now, event_wall_ns, out)

    def _routing_step(self, step: RoutingStep, out: _Out) -> None:
        self.routing_log.append(step)
        out.records.append(step)

    def _route(
        self,
        transitions: Iterable[Transition[str]],
        now: Now,
        event_wall_ns: int,
        out: _Out,
        planned: frozenset[str] | None = None,
    ) -> None:
        """Apply link transitions to routing and send what they change: the links that went
        away first, then those that return, each set in one computation (an agent's Hello
        brings up to a switch's radix of links at once; one by one they cost a routing run
        and a delta per switch each). `planned` marks an operator's drain or undrain: the
        switches it moves last (drain) or first (undrain)."""
        gone: list[Transition[str]] = []
        back: list[Transition[str]] = []
        for t in transitions:
            if planned is None:
                if t.discovered:
                    self._discovered.add(t, now)  # routed by tick, with the others found
                    continue
                if self._discovered.transitions.pop(t.link, None) is not None:
                    continue  # went away before routing used it: nothing to take out
                if self._rebuilding is not None and t.link in self._rebuilding.joining:
                    self._rebuilding.joining.discard(t.link)
                    continue  # the same, and the rebuild's catch-up leaves it out
            link = self._links[t.link]
            if planned is None and not t.usable:
                # A link that went away: what its own switches hold back (a drain's removal
                # waiting for the traffic to move) leaves now; nothing may wait on a dead link.
                for switch in (link.a[0], link.b[0]):
                    for h in self._held.take_all(switch):
                        self._release(switch, h, now, out)
            if planned is None and t.link in self.drains:
                continue  # out of routing already, and until it is undrained
            (back if t.usable else gone).append(t)
        for batch in (gone, back):
            if batch:
                self._route_batch(batch, now, event_wall_ns, out, planned)

    def _route_batch(
        self,
        batch: Sequence[Transition[str]],
        now: Now,
        event_wall_ns: int,
        out: _Out,
        planned: frozenset[str] | None,
    ) -> None:
        usable = batch[0].usable
        for i, t in enumerate(batch):
            self._routing_step(RoutingStep(t.link, t.usable, joined=i > 0), out)
        deltas = self.planner.set_links_usable([(t.link, t.usable) for t in batch])
        self.roce.routing_changed()
        compute_ns = self.planner.last_compute_ns
        for t in batch:
            link = self._links[t.link]
            self._event(
                out,
                ev.link_change(
                    now.wall_ns,
                    admin_pb2.LinkChange(
                        link=t.link,
                        a=admin_pb2.LinkEnd(switch_name=link.a[0], port=link.a[1]),
                        b=admin_pb2.LinkEnd(switch_name=link.b[0], port=link.b[1]),
                        usable=t.usable,
                        state=_LINK_STATE[t.state],
                        switches_changed=len(deltas),
                        compute_ns=compute_ns,
                        drain=planned is not None,
                    ),
                ),
            )
        event_id = self._next_event
        self._next_event += 1
        conv = self._pending[event_id] = Convergence(
            link=",".join(t.link for t in batch),
            usable=usable,
            event_wall_ns=event_wall_ns,
            reported_wall_ns=now.wall_ns,
            compute_ns=compute_ns,
        )
        # Make before break: returning links' own switches first, the rest once those
        # applied; links that went away are left by everyone at once. A drain moves the
        # traffic first and takes the drained switch's entries out once that applied (every
        # link of a drain is in one batch, so no removal leaves before all traffic moved); an
        # undrain readies the drained switch first.
        if planned is not None:
            ends = set(planned) if usable else set(deltas) - planned
        elif usable:
            ends = {end[0] for t in batch for end in (self._links[t.link].a, self._links[t.link].b)}
        else:
            ends = set(deltas)
        for switch, delta in deltas.items():
            if switch in ends:
                self._push_now(switch, delta, event_id, now, out)
        gate = Gate(conv.waiting)
        for switch, delta in deltas.items():
            if switch in ends:
                continue
            if gate.waiting:
                deadline = now.mono_ns + DEFER_LIMIT_NS
                self._held.hold(switch, Held(event_id, delta, gate, deadline))
                conv.held += 1
            else:
                self._push_now(switch, delta, event_id, now, out)
        if conv.done:
            del self._pending[event_id]  # nothing to wait for (no agent connected)

    def _gate_open(self, switch: str, generation: int) -> bool:
        v = self.views.get(switch)
        return v is None or not v.connected or v.applied_generation >= generation

    def _release_ready(self, now: Now, out: _Out) -> None:
        # Deltas released by the deadline, not by their gate: one line per event (a storm of
        # returning links would otherwise log a line per switch, thousands).
        late: dict[int, tuple[str, list[str], set[str]]] = {}
        for switch, h, last in self._held.take_ready(now.mono_ns, self._gate_open):
            waited = {s for s, g in h.gate.waiting.items() if not self._gate_open(s, g)}
            if waited:
                conv = self._pending.get(h.event_id)
                link = f" of {conv.link}" if conv is not None else ""
                _, switches, ends = late.setdefault(h.event_id, (link, [], set()))
                switches.append(switch)
                ends |= waited
            # The last delta held for a switch takes it to the planner's state: no newer
            # computation changed the switch, or its delta would be queued behind this one.
            self._release(switch, h, now, out, newest=last)
        for link, switches, ends in late.values():
            shown = ", ".join(sorted(switches)[:5]) + (", ..." if len(switches) > 5 else "")
            out.log(
                Level.WARNING,
                f"make-before-break: {len(switches)} deltas{link} ({shown}) released after "
                f"waiting {DEFER_LIMIT_NS // 1_000_000} ms for {', '.join(sorted(ends))} "
                f"to apply theirs",
            )

    def _push_now(
        self, switch: str, delta: state_pb2.StateDelta, event_id: int, now: Now, out: _Out
    ) -> None:
        # Deltas for one switch leave in the order they were computed: flush what is held.
        for h in self._held.take_all(switch):
            self._release(switch, h, now, out)
        self._apply(switch, delta, event_id, out, newest=True)

    def _release(self, switch: str, h: Held, now: Now, out: _Out, *, newest: bool = False) -> None:
        conv = self._pending.get(h.event_id)
        if conv is not None:
            conv.held -= 1
        self._apply(switch, h.delta, h.event_id, out, newest=newest)
        if conv is not None and conv.done and h.event_id in self._pending:
            self._converged(h.event_id, conv, now, out)

    def _apply(
        self,
        switch: str,
        delta: state_pb2.StateDelta,
        event_id: int,
        out: _Out,
        *,
        newest: bool = False,
    ) -> None:
        """Extend `switch`'s chain by one generation and send it, as a delta when the session
        is at the chain's head, else as a full state. `newest`: nothing computed after the
        delta is held for the switch, so the planner's state is the chain's next step."""
        v = self.views[switch]
        delta.switch_name = switch
        delta.from_generation = v.state.generation
        delta.to_generation = v.state.generation + 1
        size = delta_size(delta)
        snapshot = False
        routes_touched = len(delta.upsert_routes) + len(delta.delete_routes)
        if newest and routes_touched * 4 > len(v.state.routes):
            # A delta that rewrites a good part of the routes (a cold start's links joining
            # routing: a ToR goes from its host routes to 1,600; a spine whose downlinks
            # return): the planner's state is the new state, and building it whole costs
            # 2-5 ms on ref-100k where applying the delta costs about 15 us a route. The delta
            # still goes out, with the new state's digest, which the agent checks.
            new, index, shared = self._planned_state(v)
            if new.digest == v.state.digest:
                return
            v.state, v.index, v.shared = new, index, shared
        else:
            # In place, at the cost of what the delta touches: a remote failure on ref-100k
            # sends 1,648 switches a delta of one group and one route each, and copying each
            # 1,600-route state for it was most of that cut's time.
            if v.index is None:  # a view made other than by _load or _planned_state
                v.index = StateIndex(v.state)
            try:
                if not apply_delta_in_place(v.state, delta, v.index):
                    return
                if _pack_candidate(switch, v.index):
                    self._to_pack[switch] = None
            except DeltaError as err:
                # Cannot happen with in-order deltas; if it does, the planner's current state
                # is still right: send that, with what was held for the switch (included).
                out.log(Level.ERROR, f"core delta for {switch} does not apply ({err}); full state")
                for h in self._held.take_all(switch):
                    conv = self._pending.get(h.event_id)
                    if conv is not None:
                        conv.held -= 1
                planned, index, shared = self._planned_state(v)
                if planned.digest == v.state.digest:
                    return
                v.state, v.index, v.shared = planned, index, shared
                snapshot, size = True, 0
        new = v.state
        if not snapshot:
            delta.digest = new.digest
        out.generations[switch] = SwitchGeneration(switch, new.generation, new.digest)
        out.objects += size
        if not v.connected or switch in self._awaiting:
            return  # its snapshot covers this
        if not snapshot and size and v.sent_generation == delta.from_generation:
            out.effects.append(Push(switch, control_pb2.ControllerMessage(state_delta=delta)))
            out.pushed[switch] = new.generation
        else:
            self._send_snapshot(v, out)
        v.sent_generation = new.generation
        conv = self._pending.get(event_id)
        if conv is not None:
            conv.waiting[switch] = new.generation
            conv.switches += 1
            conv.entries += size

    def _planned_state(self, v: SwitchView) -> Planned:
        """The planner's state for `v` as the next generation of its chain."""
        planned = planned_state(self.planner, v.name)
        planned.state.generation = v.state.generation + 1
        return planned

    def _send_snapshot(self, v: SwitchView, out: _Out, wire: StateWire | None = None) -> None:
        """`wire`: `v.state`'s, when made already."""
        self._awaiting.discard(v.name)  # what it waited for
        out.effects.append(Push(v.name, wire or StateWire.of(v.state, v.shared)))
        v.sent_generation = v.state.generation
        out.pushed[v.name] = v.state.generation
        out.snapshots += 1

    def _converged(self, event_id: int, conv: Convergence, now: Now, out: _Out) -> None:
        del self._pending[event_id]
        if conv.switches == 0:
            return  # every switch it changed left before applying: nothing was measured
        computed = conv.reported_wall_ns + conv.compute_ns
        figures = admin_pb2.ConvergenceFigures(
            link=conv.link,
            usable=conv.usable,
            event_to_applied_ns=conv.last_applied_wall_ns - conv.event_wall_ns,
            report_ns=conv.reported_wall_ns - conv.event_wall_ns,
            compute_ns=conv.compute_ns,
            push_ns=max(0, conv.last_received_wall_ns - computed),
            apply_ns=conv.last_applied_wall_ns - max(conv.last_received_wall_ns, computed),
            switches=conv.switches,
            entries=conv.entries,
        )
        self._event(out, ev.converged(conv.last_applied_wall_ns or now.wall_ns, figures))
        if (
            not self._pending
            and not self._held
            and len(self.routing_log) > self.routing_log_limit
            and sum(not step.joined for step in self.routing_log) > self.routing_log_limit
            and self.tracker.all_usable()
        ):
            self._compact(now, out)

    def _discovered_from_scratch(
        self, joining: set[str], left_out: int, now: Now, out: _Out
    ) -> None:
        """Most of the fabric was discovered at once and few links are left out of routing
        (a cold start): routing from scratch over every link, then the links left out taken
        out in one computation (as a restart replays it), a full state to every switch whose
        state changed. Incrementally, ref-100k's 135k links were one computation of 20 s and
        deltas thrown away for whole states; from scratch it is one computation of about
        1.5 s, and every state built: off the event loop (`_from_scratch`)."""
        why = f"{len(joining)} links discovered together joined routing, recomputed from scratch"
        why += f" ({left_out} links left out)" if left_out else ""
        self._from_scratch(why, out, joining=joining)

    def _compact(self, now: Now, out: _Out) -> None:
        """Forget the routing history: recompute from scratch and send full states to the
        switches whose group ids that renames. Forwarding does not change (every link is up)."""
        why = f"routing recomputed from scratch after {len(self.routing_log)} link changes"
        self._from_scratch(why, out)

    def _from_scratch(self, why: str, out: _Out, joining: set[str] | None = None) -> None:
        """Ask for routing from scratch without the links routing avoids (a `Rebuild` off the
        event loop; `rebuilt` takes it in). Meanwhile decisions go on with the routing there
        is, and `joining` (discovered links) waits for it. One at a time: a compaction asked
        for meanwhile is left to the next convergence."""
        if self._rebuilding is not None:
            return
        # Before the joining links wait: the computation has them.
        unroutable = self._unroutable()
        unusable = [key for key in self._links if key in unroutable]
        self._rebuilds += 1
        self._rebuilding = _Rebuilding(self._rebuilds, why, set(joining or ()))
        generations = {name: v.state.generation + 1 for name, v in self.views.items()}
        job = partial(rebuild, self.planner, unusable, generations)
        out.effects.append(Rebuild(self._rebuilds, job))

    def rebuilt(self, token: int, result: Rebuilt, now: Now) -> list[Effect]:
        """A `Rebuild`'s result: the new routing, caught up with the link changes decided
        since it was asked for (one more computation), its log starting again from every link
        usable (what a restart replays), and a full state to every switch whose state changed.
        A result for a routing the core no longer has (a new intent came first) is dropped."""
        out = _Out()
        rebuilding = self._rebuilding
        if rebuilding is None or rebuilding.token != token:
            return self._finish(out, now)
        for switch in self._held.switches():
            for h in self._held.take_all(switch):
                self._release(switch, h, now, out)
        self._pending.clear()
        self._rebuilding = None  # its links join routing now
        self.routing_log = []
        self._baseline_usable = True
        out.records += [RoutingReset(), Meta(ROUTING_BASELINE, EVERY_LINK_USABLE)]
        for i, key in enumerate(result.unusable):
            self._routing_step(RoutingStep(key, False, joined=i > 0), out)
        planner = result.planner
        # The links whose routability changed since the job was asked for: one set against
        # the other (asking `routable` of each of ref-100k's 135,168 links took 0.17 s).
        unroutable = self._unroutable()
        differs = unroutable ^ set(result.unusable)
        catch_up = [(key, key not in unroutable) for key in self._links if key in differs]
        changed: set[str] = set()
        if catch_up:
            changed = set(planner.set_links_usable(catch_up))
            for i, (key, ok) in enumerate(catch_up):
                self._routing_step(RoutingStep(key, ok, joined=i > 0), out)
        self.planner = planner
        self.roce.routing_changed()
        for name, v in self.views.items():
            wire: StateWire | None = None
            if name in changed:
                state, index, shared = planned_state(planner, name)
            else:
                (state, index, shared), wire = result.states[name]
            if state.digest == v.state.digest:
                continue
            if state.generation != v.state.generation + 1:  # moved on while the job ran
                state.generation, wire = v.state.generation + 1, None
            v.state, v.index, v.shared = state, index, shared
            out.generations[name] = SwitchGeneration(name, state.generation, state.digest)
            if v.connected:
                self._send_snapshot(v, out, wire)
        self._event(out, ev.event(now.wall_ns, ev.K.EVENT_KIND_ROUTING_COMPACTED, rebuilding.why))
        return self._finish(out, now)

    # -- alarms and events
    def _raise(self, alarm: AlarmRecord, out: _Out) -> None:
        if not self.alarms.raise_(alarm):
            return
        out.records.append(alarm)
        out.log(Level.WARNING, f"alarm: {alarm.message}")
        self._event(
            out,
            ev.event(
                alarm.raised_wall_ns,
                ev.K.EVENT_KIND_ALARM_RAISED,
                alarm.message,
                switch=alarm.switch,
                port=alarm.port,
            ),
        )

    def _clear(
        self, alarm_id: str, now: Now, out: _Out, *, switch: str = "", port: int = 0, why: str
    ) -> None:
        if self.alarms.clear(alarm_id) is None:
            return
        out.records.append(AlarmCleared(alarm_id))
        self._event(
            out, ev.event(now.wall_ns, ev.K.EVENT_KIND_ALARM_CLEARED, why, switch=switch, port=port)
        )

    def _refuse(self, out: _Out, reason: str, text: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        out.log(Level.WARNING, text)

    def _event(self, out: _Out, event: admin_pb2.Event) -> None:
        self.events.append(event)
        out.records.append(EventRecord(event))

    def _finish(self, out: _Out, now: Now) -> list[Effect]:
        if (
            self._awaiting
            and not self._cold
            and not self._discovered.transitions
            and self._rebuilding is None
        ):
            self._send_awaiting(out)
        if out.pushed:
            summary = admin_pb2.PushSummary(
                switches=len(out.pushed), objects=out.objects, snapshots=out.snapshots
            )
            only = next(iter(out.pushed.items())) if len(out.pushed) == 1 else ("", 0)
            self._event(out, ev.pushed(now.wall_ns, summary, *only))
        records = list(out.records)
        if out.generations:
            records.append(SwitchGenerations(tuple(out.generations.values())))
        for key in sorted(self.tracker.drain_changed()):
            state, since_ns, flaps = self.tracker.shown(key)
            records.append(LinkRecord(key, _STORED_STATE[state], now.wall_of(since_ns), flaps))
        effects: list[Effect] = [Persist(tuple(records))] if records else []
        effects += out.effects
        if self._to_pack and self._pack_at_ns is None:
            self._pack_at_ns = now.mono_ns + PACK_DELAY_NS
        deadline = self.next_deadline_ns()
        if deadline is not None:
            effects.append(Schedule(deadline))
        return effects


class _RoceContext:
    """The fabric as the RoCE monitor sees it (controller/core/roce.py's Context): paths by
    the planner's own prediction (what PredictPath answers), host ports and cable peers from
    the desired states and the plan."""

    def __init__(self, core: DecisionCore) -> None:
        self._core = core

    def predict(self, flow: roce.Flow, qp: int | None) -> roce.Placed | None:
        src, dst, sport = flow
        hops = self._core.planner.roce_hops(src, dst, sport, qp)
        if not hops:
            return None
        return roce.Placed((hops[0][0], hops[-1][0]), tuple(h for h in hops if h[1]))

    def host_ports(self, switch: str) -> frozenset[int]:
        v = self._core.views.get(switch)
        if v is None or not v.state.HasField("matrix"):
            return frozenset()
        return frozenset(v.state.matrix.source_ports)

    def report_rates(self, switch: str) -> roce.ReportRates:
        v = self._core.views.get(switch)
        if v is None:
            return roce.report_rates(None, None)
        return roce.report_rates(v.prev_counters, v.last_counters)

    def peer(self, end: roce.End) -> str:
        core = self._core
        key = core.tracker.link_of(end)
        if key is not None:
            link = core.planned_link(key)
            other = link.b if link.a == end else link.a
            return f"{other[0]}:{other[1]}"
        v = core.views.get(end[0])
        if v is not None:
            for n in v.state.neighbors:
                if n.port == end[1]:
                    return n.peer_name
        return ""


# A state changed in place still holds what each change replaced (railfabric.delta.packed):
# on ref-100k the core grew by ~4 MiB with each ToR-spine cable cut and restore, without end.
# A state is due to be packed once the bytes written into it exceed PACK_SHARE of its size,
# measured by a tick once the writes first pass PACK_FLOOR_BYTES (ByteSize reads every route,
# ~0.14 ms; a packed state's size is known). Both limits are stretched 1-2x by a hash of the
# switch's name, so that the 1,648 switches a remote cut sends the same deltas do not all
# fall due at one cut. Due states are packed by `tick`, off the path of the event that changed
# them: packed at once, they added ~22 ms to a ToR-spine cut of ~190 ms in bench.core.
PACK_SHARE = 0.5
PACK_FLOOR_BYTES = 8_192
# States packed by one tick (~0.3 ms each on ref-100k), PACK_DELAY_NS after the input that
# made them due or after the previous tick's share.
PACK_PER_TICK = 64
PACK_DELAY_NS = 1_000_000_000


def _pack_stretch(switch: str) -> float:
    return 1 + zlib.crc32(switch.encode()) / 2**32


def _pack_candidate(switch: str, index: StateIndex) -> bool:
    """Whether the state may be due (cheap, on the path of the change): past its share of
    its size, or past the floor when its size is not known yet."""
    if index.size is None:
        return index.written > PACK_FLOOR_BYTES * _pack_stretch(switch)
    return index.written > PACK_SHARE * index.size * _pack_stretch(switch)


def _pack_due(switch: str, state: state_pb2.DesiredState, index: StateIndex) -> bool:
    """Whether the state is due to be packed, its size measured if a candidate's is not
    known (by `tick`, off the change's path)."""
    if index.size is None and _pack_candidate(switch, index):
        index.size = state.ByteSize()
    return index.size is not None and index.written > PACK_SHARE * index.size * _pack_stretch(
        switch
    )


_LINK_STATE = {
    LinkState.UP: admin_pb2.LINK_STATE_UP,
    LinkState.DOWN: admin_pb2.LINK_STATE_DOWN,
    LinkState.HOLD_DOWN: admin_pb2.LINK_STATE_HOLD_DOWN,
    LinkState.DAMPED: admin_pb2.LINK_STATE_DAMPED,
    LinkState.UNKNOWN: admin_pb2.LINK_STATE_UNKNOWN,
}


# A LinkState's stored value, read from a dict: Enum.value is a property, and a cold start
# stores every link's state (135,168 on ref-100k).
_STORED_STATE = {state: state.value for state in LinkState}


def link_state_message(state: LinkState) -> admin_pb2.LinkState.ValueType:
    return _LINK_STATE[state]


def _computations(log: Iterable[RoutingStep]) -> Iterator[list[RoutingStep]]:
    """The routing log as the computations that made it (joined steps together)."""
    batch: list[RoutingStep] = []
    for step in log:
        if batch and not step.joined:
            yield batch
            batch = []
        batch.append(step)
    if batch:
        yield batch


def topology_digest(planner: Planner) -> str:
    """Identity of the switches and cables, to tell whether stored history applies."""
    h = hashlib.sha256()
    for info in planner.switches():
        h.update(f"{info.name}\n".encode())
    for link in planner.links():
        h.update(f"{link.key}\n".encode())
    return h.hexdigest()
