"""A decision core driven by simulated agents, for the core's tests.

The agents are a model, not a fake of anything that exists here: each holds the state it was
sent, applies snapshots and deltas in order with the one `apply_delta` the real agent uses
(so a gap in the generation chain or a delta that does not apply fails the test at once), and
acknowledges when told to. The store is the real SQLite store in memory, so a controller
restart resumes from exactly what the core asked to persist.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from controller import export
from controller.core.clock import Now
from controller.core.effects import Effect, Level, Log, Persist, Push, Rebuild, Schedule
from controller.core.links import DampingParams
from controller.core.machine import DecisionCore, DrainError, DrainRefused
from controller.core.records import Restored, as_records
from controller.daemon.core_planner import CorePlanner, load_planner
from controller.daemon.store import SqliteStore
from controller.fabric import Fabric
from controller.intent import load_fabric
from railfabric.delta import apply_delta
from railfabric.digest import state_digest
from railfabric.v1 import control_pb2, state_pb2

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "examples" / "lab-2rail.yaml"
S = 1_000_000_000

Forwarding = dict[tuple[int, int], frozenset[int]]
# Fresh forwarding per fabric and set of links routing avoids: most steps change none, and
# examples meet the same sets again.
_FRESH_ROUTES: dict[tuple[Path, frozenset[str]], dict[str, Forwarding]] = {}


def forwarding(state: state_pb2.DesiredState) -> Forwarding:
    """prefix -> set of next-hop ports: what the switch does, whatever its group ids are."""
    groups = {g.id: frozenset(nh.port for nh in g.next_hops) for g in state.groups}
    return {(r.prefix.address, r.prefix.length): groups[r.group_id] for r in state.routes}


@dataclass
class Agent:
    name: str
    held: state_pb2.DesiredState | None = None
    inbox: list[control_pb2.ControllerMessage] = field(default_factory=list)
    connected: bool = False
    # What the agent will hold once it applied its inbox: each message is applied here as it
    # is queued, so a gap in the chain or a delta that does not apply fails at the push.
    tail: state_pb2.DesiredState | None = None

    def queue(self, msg: control_pb2.ControllerMessage) -> None:
        if msg.WhichOneof("msg") == "desired_state":
            self.tail = state_pb2.DesiredState()
            self.tail.CopyFrom(msg.desired_state)
            # Whole: the fields the core keeps out of its views' states were joined in.
            assert state_digest(self.tail) == self.tail.digest, f"{self.name}: snapshot digest"
        else:
            delta = msg.state_delta
            assert self.tail is not None, f"{self.name}: delta before any snapshot"
            assert delta.from_generation == self.tail.generation, (
                f"{self.name}: gap in the chain: delta {delta.from_generation}->"
                f"{delta.to_generation} queued after generation {self.tail.generation}"
            )
            self.tail = apply_delta(self.tail, delta)
            assert self.tail.digest == delta.digest, f"{self.name}: digest differs"
        self.inbox.append(msg)

    def receive(self) -> None:
        """Apply everything delivered so far, in order."""
        if self.inbox:
            self.held = self.tail
            self.inbox.clear()

    def drop_inbox(self) -> None:
        """The session ended: what was queued is lost."""
        self.inbox.clear()
        self.tail = self.held


class Harness:
    def __init__(
        self, fabric: Path = LAB, hold_down_s: float = 2.0, routing_log_limit: int | None = None
    ) -> None:
        self.fabric = fabric
        # The cores' compaction threshold (DecisionCore.routing_log_limit), when not the default.
        self.routing_log_limit = routing_log_limit
        self._loaded: Fabric | None = None  # the intent, parsed once for fresh computations
        self.damping = DampingParams(hold_down_ns=int(hold_down_s * S))
        self.store = SqliteStore.open(":memory:")
        self.now = Now(mono_ns=1_000 * S, wall_ns=1_700_000_000 * S)
        self.deadline: int | None = None
        self.transactions = 0
        # Switches pushed to, in order, since the last `take_pushed`.
        self.pushed: list[str] = []
        # Log lines at ERROR the core asked for: a correct core never needs one.
        self.errors: list[str] = []
        self.warnings: list[str] = []
        # Computations from scratch the core asked for (Rebuild), run when `run` is done
        # with its effects unless deferred (`finish_rebuild` runs one, other inputs between).
        self.defer_rebuilds = False
        self.rebuilds: list[Rebuild] = []
        self.core = self._start()
        self.agents = {name: Agent(name) for name in self.core.views}
        # Physical carrier of every switch-to-switch port.
        self.carrier = {end: True for link in self.core.links() for end in (link.a, link.b)}

    def _start(self, start_ns: int = 0) -> DecisionCore:
        core = DecisionCore(load_planner(self.fabric), self.damping)
        if self.routing_log_limit is not None:
            core.routing_log_limit = self.routing_log_limit
        self.deadline = None
        self.rebuilds = []  # a dead controller's: nobody takes them in
        self.run(core.start(self.store.load(), self.now), core)
        # The daemon's gate holds sessions, and its timers wait, until the start is done.
        self._to(self.now.mono_ns + start_ns)
        self.run(core.sessions_open(self.now), core)
        return core

    def restart_controller(self, store_held: Restored | None = None, start_ns: int = 0) -> None:
        """The controller process dies and starts again from its store; sessions drop. Drains
        survive it. `store_held`: what the store held when it died, instead of everything
        committed (a crash that lost the last transactions after their pushes had left).
        `start_ns`: how long its start takes (agents' sessions wait at the gate meanwhile)."""
        drained = dict(self.core.drains)
        if store_held is not None:
            self.store.close()
            self.store = SqliteStore.open(":memory:")
            self.store.commit(as_records(store_held))
            held = {d.link for d in store_held.drains}
            drained = {k: d for k, d in drained.items() if k in held}
        self.core = self._start(start_ns)
        assert self.core.drains == drained, "drains differ after a restart"
        for agent in self.agents.values():
            agent.connected = False
            agent.drop_inbox()

    # -- time
    def advance(self, ns: int) -> None:
        """Let `ns` pass, running every timer the core scheduled on time."""
        end = self.now.mono_ns + ns
        while self.deadline is not None and self.deadline <= end:
            self._to(max(self.deadline, self.now.mono_ns))
            self.deadline = None
            self.run(self.core.tick(self.now))
        self._to(end)

    def _to(self, mono_ns: int) -> None:
        dt = mono_ns - self.now.mono_ns
        self.now = Now(self.now.mono_ns + dt, self.now.wall_ns + dt)

    # -- effects
    def run(self, effects: Iterable[Effect], core: DecisionCore | None = None) -> None:
        for e in effects:
            if isinstance(e, Persist):
                self.store.commit(e.records)
                self.transactions += 1
            elif isinstance(e, Push):
                agent = self.agents[e.switch]
                assert agent.connected, f"push to {e.switch}, which has no session"
                agent.queue(e.message)
                self.pushed.append(e.switch)
            elif isinstance(e, Schedule):
                self.deadline = e.at_mono_ns
            elif isinstance(e, Log) and e.level >= Level.ERROR:
                self.errors.append(e.text)
            elif isinstance(e, Log) and e.level == Level.WARNING:
                self.warnings.append(e.text)
            elif isinstance(e, Rebuild):
                self.rebuilds.append(e)
        while self.rebuilds and not self.defer_rebuilds:
            self.finish_rebuild()

    def finish_rebuild(self) -> None:
        """The oldest Rebuild's job ends (off the loop, in the daemon) and the core takes it."""
        e = self.rebuilds.pop(0)
        self.run(self.core.rebuilt(e.token, e.job(), self.now))

    # -- agents
    def hello(self, name: str, unmapped: frozenset[int] = frozenset()) -> None:
        """The agent connects (or asks for a snapshot); `unmapped` ports are missing from
        its port map."""
        agent = self.agents[name]
        agent.connected = True
        agent.drop_inbox()
        held = agent.held
        # Every port of the intent is in the agent's port map; host-facing ones have carrier.
        ports = [
            control_pb2.PortInfo(port=port, oper_up=self.carrier.get((name, port), True))
            for port in sorted(self.core.views[name].ports - unmapped)
        ]
        hello = control_pb2.Hello(
            switch_name=name,
            ports=ports,
            applied_generation=held.generation if held else 0,
            applied_digest=held.digest if held else "",
        )
        self.run(self.core.hello(hello, self.now))

    def disconnect(self, name: str) -> None:
        agent = self.agents[name]
        if agent.connected:
            agent.connected = False
            agent.drop_inbox()
            self.run(self.core.disconnected(name, self.now))

    def ack(self, name: str) -> None:
        agent = self.agents[name]
        agent.receive()
        if agent.connected and agent.held is not None:
            applied = control_pb2.Applied(
                generation=agent.held.generation,
                digest=agent.held.digest,
                wall_ns=self.now.wall_ns,
            )
            self.run(self.core.applied(name, applied, self.now))

    def report(self, end: tuple[str, int]) -> None:
        """The agent at `end` reports its port's carrier (if it has a session)."""
        if self.agents[end[0]].connected:
            msg = control_pb2.PortStatus(
                port=end[1], up=self.carrier[end], wall_ns=self.now.wall_ns
            )
            self.run(self.core.port_status(end[0], msg, self.now))

    def take_pushed(self) -> list[str]:
        out, self.pushed = self.pushed, []
        return out

    def ack_all(self) -> None:
        for name in self.agents:
            self.ack(name)

    def cut(self, key: str) -> None:
        """The cable loses carrier and the first end reports it."""
        self.set_carrier(key, False)
        self.report(self.core.planned_link(key).a)

    def restore(self, key: str) -> None:
        """The cable gets carrier back and both ends report it."""
        self.set_carrier(key, True)
        link = self.core.planned_link(key)
        self.report(link.a)
        self.report(link.b)

    # -- operators
    def drain(self, target: str, force: bool = False, who: str = "operator/tests") -> bool:
        """An operator drains `target`; False when the core refused (nothing changed then).
        A drain the what-if check lets through cuts no ToR pair, and one it refuses does, as
        a from-scratch computation sees it."""
        drained = dict(self.core.drains)
        before = self.tor_reachability()
        try:
            plan = self.core.plan_drain(target)
            self.run(self.core.drain(target, who, "model", force, self.now))
        except DrainRefused:
            assert self.core.drains == drained
            after = self.tor_reachability(plan.links)
            assert before - after, f"{target}: refused, but no ToR pair loses its path"
            return False
        except DrainError:
            assert self.core.drains == drained
            return False
        if not force:
            cut = before - self.tor_reachability()
            assert not cut, f"{target}: drained, but ToR pairs lost their path: {sorted(cut)}"
        return True

    def undrain(self, target: str) -> bool:
        drained = dict(self.core.drains)
        try:
            self.run(self.core.undrain(target, "operator/tests", "model", self.now))
        except DrainError:
            assert self.core.drains == drained
            return False
        return True

    def tor_reachability(self, also_out: Collection[str] = ()) -> set[tuple[str, str]]:
        """(ToR, ToR) pairs where the first has a route to the second's prefix in a
        from-scratch computation over the links routing avoids (and `also_out`)."""
        routing = self._fresh_planner(also_out).routing
        tors = {s.name: s.prefix for s in routing.topo.fabric.switches if s.prefix is not None}
        return {
            (x, y)
            for x in tors
            for y, prefix in tors.items()
            if x != y and routing.next_hops_by_prefix(x).get(prefix)
        }

    def reload(self, fabric: Path | None = None) -> None:
        """SIGHUP with the same file (or another one)."""
        self.run(self.core.reload(load_planner(fabric or self.fabric), self.now))

    def check_no_route_over_unusable_links(self) -> None:
        tracker = self.core.tracker
        for name, v in self.core.views.items():
            for g in v.state.groups:
                for nh in g.next_hops:
                    key = tracker.link_of((name, nh.port))
                    assert key is None or tracker.usable(key), (
                        f"{name} group {g.id} uses port {nh.port} of {key}, which is "
                        f"{tracker.state(key).value}"
                    )

    def decided_state(self, name: str) -> state_pb2.DesiredState:
        """The switch's state with the deltas make-before-break still holds applied: what the
        core decided for it."""
        state = self.core.views[name].state
        for held in self.core.held_deltas(name):
            delta = state_pb2.StateDelta()
            delta.CopyFrom(held)
            delta.from_generation, delta.to_generation = state.generation, state.generation + 1
            state = apply_delta(state, delta)
        return state

    def check_no_route_over_drained_links(self) -> None:
        """No decided state uses a drained link (a drain's removal may still be held back
        while the traffic moves: make before break); at quiescence, no state at all."""
        tracker, drains = self.core.tracker, self.core.drains
        if not drains:
            return
        for name in self.core.views:
            state = self.decided_state(name)
            if self.core.quiescent():
                assert state is self.core.views[name].state
            for g in state.groups:
                for nh in g.next_hops:
                    key = tracker.link_of((name, nh.port))
                    assert key not in drains, f"{name} group {g.id} uses drained {key}"

    def check_decided_routes_match_a_fresh_computation(self) -> None:
        """What the core decided for every switch (its state, and what make-before-break
        still holds back) forwards as a from-scratch computation over the links routing avoids
        now, drained ones included: only the delivery may lag, never the decision."""
        key = (self.fabric, frozenset(self.core.unroutable_links()))
        fresh = _FRESH_ROUTES.get(key)
        if fresh is None:
            if len(_FRESH_ROUTES) > 10_000:
                _FRESH_ROUTES.clear()
            routing = self._fresh_planner().routing
            fresh = _FRESH_ROUTES[key] = {
                name: {
                    (prefix.address, prefix.length): frozenset(ports)
                    for prefix, ports in routing.next_hops_by_prefix(name).items()
                }
                for name in self.core.views
            }
        for name in self.core.views:
            decided = forwarding(self.decided_state(name))
            assert decided == fresh[name], f"{name}: decided routes differ"

    def check_acked_hold_what_the_controller_believes(self) -> None:
        for name, agent in self.agents.items():
            v = self.core.views[name]
            acked = agent.connected and v.applied_generation == v.state.generation
            if acked and agent.held and agent.held.generation == v.state.generation:
                assert agent.inbox or agent.held.digest == v.state.digest, name

    def check_no_error(self) -> None:
        assert not self.errors, self.errors

    def check_matches_fresh_computation(self) -> None:
        self.check_no_error()
        fresh = self.fresh_forwarding()
        for name, v in self.core.views.items():
            assert forwarding(v.state) == fresh[name], f"{name}: routes differ from a fresh run"
            agent = self.agents[name]
            assert agent.held is not None and agent.held.digest == v.state.digest, name
            assert v.converged, name

    def set_carrier(self, link_key: str, up: bool) -> None:
        link = self.core.planned_link(link_key)
        self.carrier[link.a] = self.carrier[link.b] = up

    def connect_all(self) -> None:
        for name in self.agents:
            self.hello(name)
        self.settle()

    def settle(self) -> None:
        """Every agent reports its carrier and applies everything until nothing moves, with
        time running past every hold-down and deferral. Agents without a session say Hello."""
        for name, agent in self.agents.items():
            if not agent.connected:
                self.hello(name)
        for end in self.carrier:
            self.report(end)
        for _ in range(100):
            for name in self.agents:
                self.ack(name)
            idle = not any(a.inbox for a in self.agents.values())
            if self.core.quiescent() and idle and self.deadline is None:
                return
            if self.rebuilds:
                self.finish_rebuild()
                continue
            self.advance(max(S, (self.deadline or 0) - self.now.mono_ns))
        raise AssertionError("the core did not settle")

    # -- the from-scratch truth
    def _fresh_planner(self, also_out: Collection[str] = ()) -> CorePlanner:
        """The intent computed from scratch over the links routing avoids (unusable or
        drained), and `also_out`."""
        if self._loaded is None:
            self._loaded = load_fabric(self.fabric)
        return CorePlanner(self._loaded, set(self.core.unroutable_links()) | set(also_out))

    def fresh_forwarding(self, also_out: Collection[str] = ()) -> dict[str, Forwarding]:
        """Every switch's forwarding computed from scratch over the links routing avoids
        (unusable or drained), and `also_out`."""
        planner = self._fresh_planner(also_out)
        return {
            name: forwarding(export.desired_state(planner.routing, name))
            for name in self.core.views
        }


__all__ = ["LAB", "Agent", "CorePlanner", "Harness", "S", "forwarding"]
