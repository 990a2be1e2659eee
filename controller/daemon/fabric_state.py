"""The controller's live view of the fabric: desired state per switch with generations, what
each agent has applied, link state, convergence measurements, events and alarms.

Synchronous and I/O-free apart from the store; the gRPC services (service.py, admin.py) call
it and ship what it returns. Time is passed in (`now_ns`, Unix ns).
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.daemon.cabling import Heard, check_switch
from controller.daemon.linkstate import DampingParams, LinkState, LinkTracker, Transition
from controller.daemon.planner import PlannedLink, Planner
from controller.daemon.store import AlarmRecord, EventRecord, LinkRecord, Store
from railfabric.delta import DeltaError, apply_delta, delta_size
from railfabric.digest import state_digest
from railfabric.v1 import control_pb2, state_pb2

log = logging.getLogger(__name__)

# Outbound messages for one switch; Send is called with each in order.
Send = Callable[[str, control_pb2.ControllerMessage], None]


class UnknownSwitch(ValueError):
    pass


@dataclass
class SwitchView:
    name: str
    state: state_pb2.DesiredState
    applied_generation: int = 0
    applied_digest: str = ""
    applied_errors: list[control_pb2.ObjectError] = field(default_factory=list)
    connected: bool = False
    agent_version: str = ""
    last_seen_ns: int = 0
    last_counters: control_pb2.Counters | None = None
    prev_counters: control_pb2.Counters | None = None
    neighbors: control_pb2.Neighbors | None = None

    @property
    def converged(self) -> bool:
        return (
            self.applied_generation == self.state.generation
            and self.applied_digest == self.state.digest
            and not self.applied_errors
        )


@dataclass
class Convergence:
    """One link event and the generations it caused, until every switch has applied them."""

    link: str
    event_ns: int
    reported_ns: int
    computed_ns: int
    waiting: dict[str, int]
    last_applied_ns: int = 0
    # Latest time an agent received a delta of this event (Applied.received_wall_ns).
    last_received_ns: int = 0
    switches: int = 0
    entries: int = 0


@dataclass
class _Deferred:
    """Deltas held back until the switches in `after` have applied the given generations."""

    event_id: int
    after: dict[str, int]
    deltas: dict[str, state_pb2.StateDelta]
    deadline_ns: int


# The routing log is replayed at start-up, so it is kept short: past this many rows, the first
# moment every link is usable and nothing is in flight, routing restarts from scratch.
ROUTING_LOG_LIMIT = 1000

# A link-up's remote deltas wait at most this long for the link's own switches to apply theirs.
DEFER_LIMIT_NS = 500_000_000


@dataclass(frozen=True)
class ConvergenceResult:
    link: str
    event_to_applied_ms: float
    report_ms: float
    compute_ms: float
    # Controller -> last agent's receipt, and that receipt -> the last Applied.
    push_ms: float
    apply_ms: float
    switches: int
    entries: int


_CONVERGED = re.compile(
    r"link (?P<link>\S+): (?P<switches>\d+) switches applied (?P<entries>\d+) objects "
    r"(?P<total>[\d.]+) ms after the event \(report (?P<report>[\d.]+) ms, "
    r"compute (?P<compute>[\d.]+) ms, push (?P<push>[\d.]+) ms, apply (?P<apply>[\d.]+) ms\)"
)


def convergence_message(r: ConvergenceResult) -> str:
    """The text of a "converged" event; `parse_convergence` reads it back."""
    return (
        f"link {r.link}: {r.switches} switches applied {r.entries} objects "
        f"{r.event_to_applied_ms:.1f} ms after the event (report {r.report_ms:.1f} ms, "
        f"compute {r.compute_ms:.1f} ms, push {r.push_ms:.1f} ms, apply {r.apply_ms:.1f} ms)"
    )


def parse_convergence(message: str) -> ConvergenceResult | None:
    """The figures of a "converged" event's message (see `convergence_message`)."""
    m = _CONVERGED.search(message)
    if m is None:
        return None
    return ConvergenceResult(
        link=m["link"],
        event_to_applied_ms=float(m["total"]),
        report_ms=float(m["report"]),
        compute_ms=float(m["compute"]),
        push_ms=float(m["push"]),
        apply_ms=float(m["apply"]),
        switches=int(m["switches"]),
        entries=int(m["entries"]),
    )


class FabricState:
    # Rebuilt from the intent by _load (at start and on reload).
    tracker: LinkTracker[str]
    plan: dict[tuple[str, int], tuple[str, int]]
    views: dict[str, SwitchView]
    _links: dict[str, PlannedLink]

    def __init__(
        self,
        planner: Planner,
        store: Store,
        damping: DampingParams,
        send: Send,
        on_converged: Callable[[ConvergenceResult], None] | None = None,
    ) -> None:
        self.planner = planner
        self.store = store
        self.send = send
        self.on_converged = on_converged
        self.damping = damping
        self._pending: dict[int, Convergence] = {}
        self._deferred: list[_Deferred] = []
        self._next_event = 0
        # Active alarm ids, mirrored from the store for readers on other threads (metrics).
        self.alarm_ids: set[str] = {a.id for a in store.alarms()}
        self._load()

    def reload(self, planner: Planner, now_ns: int) -> list[str]:
        """Serve a new intent. Switches whose state changed get a full DesiredState at the next
        generation; link states and agent sessions carry over. Returns the switches the new
        intent no longer has (their sessions should be closed)."""
        for record in list(self._deferred):
            self._release(record, now_ns)
        self._pending.clear()
        old = self.views
        self.planner = planner
        self._load()
        for name, v in self.views.items():
            was = old.get(name)
            if was is None:
                continue
            v.connected, v.agent_version, v.last_seen_ns = (
                was.connected,
                was.agent_version,
                was.last_seen_ns,
            )
            v.applied_generation, v.applied_digest = was.applied_generation, was.applied_digest
            v.last_counters, v.prev_counters, v.neighbors = (
                was.last_counters,
                was.prev_counters,
                was.neighbors,
            )
            if v.state.digest != was.state.digest and v.connected:
                self.send(name, control_pb2.ControllerMessage(desired_state=v.state))
                self.event(
                    now_ns,
                    "pushed",
                    name,
                    0,
                    f"generation {v.state.generation} (new intent, full state)",
                    v.state.generation,
                )
        gone = sorted(set(old) - set(self.views))
        self.event(
            now_ns,
            "intent_reloaded",
            "",
            0,
            f"intent {planner.fabric_name} loaded: {len(self.views)} switches"
            + (f"; no longer in the intent: {', '.join(gone)}" if gone else ""),
            0,
        )
        return gone

    # -- start-up: intent + persisted link states + persisted generations
    def _load(self) -> None:
        planner = self.planner
        self._links = {link.key: link for link in planner.links()}
        self.tracker = LinkTracker(
            ((link.key, link.a, link.b) for link in self._links.values()), self.damping
        )
        self.plan = {}
        for link in self._links.values():
            self.plan[link.a], self.plan[link.b] = link.b, link.a
        self.views = {}
        topology = self._topology_digest()
        if self.store.get_meta("topology_digest") != topology:
            # Another fabric: its routing history and generations mean nothing here.
            self.store.clear_routing_log()
            self.store.set_meta("topology_digest", topology)
        for key, link_rec in self.store.links().items():
            if key in self._links:
                self.tracker.restore(
                    key, LinkState(link_rec.state), link_rec.since_ns, link_rec.flaps
                )
        # Replay what routing went through, in order, so group ids come out as the agents
        # hold them; then take out whatever the link states say is still unusable.
        usable = dict.fromkeys(self._links, True)
        for key, ok in self.store.routing_log():
            if key in usable and usable[key] != ok:
                self.planner.set_link_usable(key, ok)
                usable[key] = ok
        for key, ok in usable.items():
            if ok != self.tracker.usable(key):
                self.planner.set_link_usable(key, not ok)
                self.store.append_routing(key, not ok)
        stored = self.store.switches()
        for info in self.planner.switches():
            state = self.planner.full_state(info.name)
            digest = state_digest(state)
            rec = stored.get(info.name)
            if rec is None:
                generation = 1
            elif rec.digest == digest:
                generation = rec.generation
            else:
                generation = rec.generation + 1
            state.generation, state.digest = generation, digest
            self.views[info.name] = SwitchView(info.name, state)
            if rec is None or rec.generation != generation:
                self.store.set_desired(info.name, generation, digest)

    def _topology_digest(self) -> str:
        """Identity of the switches and cables, to tell whether stored history applies."""
        h = hashlib.sha256()
        for info in self.planner.switches():
            h.update(f"{info.name}\n".encode())
        for link in self._links.values():
            h.update(f"{link.key}\n".encode())
        return h.hexdigest()

    def view(self, name: str) -> SwitchView:
        try:
            return self.views[name]
        except KeyError:
            close = difflib.get_close_matches(name, self.views, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownSwitch(f"unknown switch {name!r}{hint}") from None

    # -- agent messages
    def hello(self, hello: control_pb2.Hello, now_ns: int) -> control_pb2.ControllerMessage | None:
        """Attach a session; the full state to send, or None when the agent already has it."""
        v = self.view(hello.switch_name)
        v.connected, v.agent_version, v.last_seen_ns = True, hello.agent_version, now_ns
        v.applied_generation, v.applied_digest = hello.applied_generation, hello.applied_digest
        self.event(
            now_ns,
            "session_up",
            v.name,
            0,
            f"agent {hello.agent_version} connected",
            hello.applied_generation,
        )
        # Carrier changed while the agent was away (or the controller restarted): catch up.
        # Any deltas this causes are sent before the reply below; the agent asks for a
        # snapshot when a delta does not start from what it holds.
        for port in hello.ports:
            end = (v.name, port.port)
            key = self.tracker.link_of(end)
            if key is not None and (end in self.tracker.down_ends(key)) == port.oper_up:
                self._carrier(end, key, port.oper_up, now_ns, event_ns=now_ns)
        if v.converged:
            return None
        return control_pb2.ControllerMessage(desired_state=v.state)

    def disconnected(self, name: str, now_ns: int) -> None:
        v = self.views[name]
        v.connected = False
        self.event(now_ns, "session_down", name, 0, "agent disconnected", v.applied_generation)
        for record in list(self._deferred):
            if name in record.after:  # nothing to wait for any more
                self._release(record, now_ns)

    def applied(self, name: str, msg: control_pb2.Applied, now_ns: int) -> None:
        v = self.views[name]
        v.last_seen_ns = now_ns
        v.applied_generation, v.applied_digest = msg.generation, msg.digest
        v.applied_errors = list(msg.errors)
        self.store.set_applied(name, msg.generation)
        if msg.errors:
            first = msg.errors[0]
            self.event(
                now_ns,
                "apply_failed",
                name,
                0,
                f"{len(msg.errors)} objects refused, first: {first.object}: {first.message}",
                msg.generation,
            )
        for record in list(self._deferred):
            if all(self.views[s].applied_generation >= g for s, g in record.after.items()):
                self._release(record, now_ns)
        applied_ns = msg.wall_ns or now_ns
        for event_id, conv in list(self._pending.items()):
            wanted = conv.waiting.get(name)
            if wanted is not None and msg.generation >= wanted:
                del conv.waiting[name]
                conv.last_applied_ns = max(conv.last_applied_ns, applied_ns)
                conv.last_received_ns = max(conv.last_received_ns, msg.received_wall_ns)
                if not conv.waiting:
                    self._converged(event_id, conv)

    def port_status(self, name: str, msg: control_pb2.PortStatus, now_ns: int) -> None:
        v = self.view(name)
        v.last_seen_ns = now_ns
        end = (name, msg.port)
        key = self.tracker.link_of(end)
        state = "up" if msg.up else "down"
        self.event(
            now_ns,
            f"port_{state}",
            name,
            msg.port,
            f"carrier {state}"
            + (f", {msg.groups_repaired} groups repaired locally" if msg.groups_repaired else ""),
            0,
        )
        if key is None:
            return  # a host-facing port: no switch link to route around
        self._carrier(end, key, msg.up, now_ns, event_ns=msg.wall_ns or now_ns)

    def _carrier(
        self, end: tuple[str, int], key: str, up: bool, now_ns: int, event_ns: int
    ) -> None:
        transitions = self.tracker.report(now_ns, end, up)
        self._persist_link(key)
        self._route(transitions, now_ns, event_ns)

    def next_deadline_ns(self) -> int | None:
        """When `tick` next has work: a hold-down or damping expiry, or a deferral limit."""
        deadlines = [r.deadline_ns for r in self._deferred]
        link_deadline = self.tracker.next_deadline_ns()
        if link_deadline is not None:
            deadlines.append(link_deadline)
        return min(deadlines) if deadlines else None

    def tick(self, now_ns: int) -> None:
        """Hold-down and damping timers, and deferred pushes whose wait ran out."""
        for record in list(self._deferred):
            if record.deadline_ns <= now_ns:
                log.warning(
                    "link-up deltas released after waiting %d ms for %s",
                    DEFER_LIMIT_NS // 1_000_000,
                    ", ".join(sorted(record.after)),
                )
                self._release(record, now_ns)
        transitions = self.tracker.tick(now_ns)
        for t in transitions:
            self._persist_link(t.link)
        self._route(transitions, now_ns, event_ns=now_ns)

    def neighbors(self, name: str, msg: control_pb2.Neighbors, now_ns: int) -> None:
        v = self.view(name)
        v.last_seen_ns, v.neighbors = now_ns, msg
        heard = [Heard(n.port, n.system_name, n.port_id) for n in msg.neighbors]
        miswired, correct = check_switch(name, heard, self.plan)
        for m in miswired:
            if self.store.raise_alarm(
                AlarmRecord(m.alarm_id, "critical", "miswire", name, m.port, m.message, now_ns)
            ):
                self.alarm_ids.add(m.alarm_id)
                self.event(now_ns, "alarm", name, m.port, m.message, 0)
                log.warning("alarm: %s", m.message)
        for port in correct:
            if self.store.clear_alarm(f"miswire:{name}:{port}"):
                self.alarm_ids.discard(f"miswire:{name}:{port}")
                self.event(now_ns, "alarm_cleared", name, port, "cabling matches the plan", 0)

    def counters(self, name: str, msg: control_pb2.Counters, now_ns: int) -> None:
        v = self.view(name)
        v.last_seen_ns = now_ns
        v.prev_counters, v.last_counters = v.last_counters, msg

    # -- routing
    def _route(self, transitions: Iterable[Transition[str]], now_ns: int, event_ns: int) -> None:
        for t in transitions:
            link = self._links[t.link]
            verb = "returns to routing" if t.usable else "leaves routing"
            self.store.append_routing(t.link, t.usable)
            t0 = time.monotonic_ns()
            deltas = self.planner.set_link_usable(t.link, t.usable)
            compute_ns = time.monotonic_ns() - t0
            self.event(
                now_ns,
                "link_up" if t.usable else "link_down",
                link.a[0],
                link.a[1],
                f"link {t.link} {verb}; {len(deltas)} switches change "
                f"(computed in {compute_ns / 1e6:.2f} ms)",
                0,
            )
            event_id = self._next_event
            self._next_event += 1
            conv = self._pending[event_id] = Convergence(
                link=t.link,
                event_ns=event_ns,
                reported_ns=now_ns,
                computed_ns=now_ns + compute_ns,
                waiting={},
            )
            # Make before break: when a link returns, the switches at its ends get their routes
            # first; the rest start sending over it only once those are applied, so no ToR
            # hands traffic to a spine that does not yet have the route back down.
            ends = {link.a[0], link.b[0]} if t.usable else set(deltas)
            first = {s: d for s, d in deltas.items() if s in ends}
            later = {s: d for s, d in deltas.items() if s not in ends}
            self._push_all(event_id, first, now_ns)
            after = {s: g for s, g in conv.waiting.items() if self.views[s].connected}
            if later and after:
                self._deferred.append(_Deferred(event_id, after, later, now_ns + DEFER_LIMIT_NS))
            else:
                self._push_all(event_id, later, now_ns)
            if not conv.waiting and not any(r.event_id == event_id for r in self._deferred):
                del self._pending[event_id]

    def _push_all(
        self, event_id: int, deltas: dict[str, state_pb2.StateDelta], now_ns: int
    ) -> None:
        conv = self._pending[event_id]
        for switch, delta in deltas.items():
            generation = self._push_delta(switch, delta, now_ns)
            if generation is not None:
                conv.waiting[switch] = generation
                conv.switches += 1
                conv.entries += delta_size(delta)

    def _release(self, record: _Deferred, now_ns: int) -> None:
        self._deferred.remove(record)
        self._push_all(record.event_id, record.deltas, now_ns)

    def _push_delta(self, switch: str, delta: state_pb2.StateDelta, now_ns: int) -> int | None:
        # Deltas for one switch go out in the order they were computed: release any held one.
        for record in list(self._deferred):
            if switch in record.deltas and record in self._deferred:
                self._release(record, now_ns)
        v = self.views[switch]
        delta.switch_name = switch
        delta.from_generation = v.state.generation
        delta.to_generation = v.state.generation + 1
        try:
            new = apply_delta(v.state, delta)
        except DeltaError as err:
            # The core produced a delta that does not fit: fall back to its full state, so the
            # switch still gets the right forwarding, and say so loudly.
            log.error("core delta for %s does not apply (%s); sending full state", switch, err)
            new = self.planner.full_state(switch)
            new.generation, new.digest = v.state.generation + 1, state_digest(new)
            delta = state_pb2.StateDelta()
        if new.digest == v.state.digest:
            return None
        delta.digest = new.digest
        v.state = new
        self.store.set_desired(switch, new.generation, new.digest)
        if v.connected:
            if delta.to_generation:
                self.send(switch, control_pb2.ControllerMessage(state_delta=delta))
            else:
                self.send(switch, control_pb2.ControllerMessage(desired_state=new))
        self.event(
            now_ns,
            "pushed",
            switch,
            0,
            f"generation {new.generation} ({delta_size(delta)} objects)",
            new.generation,
        )
        return new.generation

    def _converged(self, event_id: int, conv: Convergence) -> None:
        del self._pending[event_id]
        link = conv.link
        result = ConvergenceResult(
            link=link,
            event_to_applied_ms=(conv.last_applied_ns - conv.event_ns) / 1e6,
            report_ms=(conv.reported_ns - conv.event_ns) / 1e6,
            compute_ms=(conv.computed_ns - conv.reported_ns) / 1e6,
            # Agents that do not report receipt times fold the push into the apply.
            push_ms=max(0, conv.last_received_ns - conv.computed_ns) / 1e6,
            apply_ms=(conv.last_applied_ns - max(conv.last_received_ns, conv.computed_ns)) / 1e6,
            switches=conv.switches,
            entries=conv.entries,
        )
        self.event(
            conv.last_applied_ns,
            "converged",
            "",
            0,
            convergence_message(result),
            0,
        )
        if self.on_converged is not None:
            self.on_converged(result)
        if (
            not self._pending
            and not self._deferred
            and not self.tracker.down_links()
            and self.store.routing_log_size() > ROUTING_LOG_LIMIT
        ):
            self._compact(conv.last_applied_ns)

    def _compact(self, now_ns: int) -> None:
        """Forget the routing history: recompute from scratch and send full states to the
        switches whose group ids that renames. Forwarding does not change (every link is up)."""
        rows = self.store.routing_log_size()
        self.store.clear_routing_log()
        self.reload(self.planner.fresh(), now_ns)
        self.event(
            now_ns,
            "routing_compacted",
            "",
            0,
            f"routing recomputed from scratch after {rows} link changes",
            0,
        )

    def _persist_link(self, key: str) -> None:
        self.store.set_link(
            LinkRecord(
                key,
                self.tracker.state(key).value,
                self.tracker.since_ns(key),
                self.tracker.flaps(key),
            )
        )

    def planned_link(self, key: str) -> PlannedLink:
        return self._links[key]

    def event(  # noqa: PLR0917 - mirrors the Event message
        self, now_ns: int, kind: str, switch: str, port: int, message: str, generation: int
    ) -> None:
        self.store.add_event(EventRecord(now_ns, kind, switch, port, message, generation))
