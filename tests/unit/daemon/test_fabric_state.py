"""The controller's live view on the real lab fabric: what it sends, to whom, and when."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import export
from controller.daemon import fabric_state
from controller.daemon.core_planner import CorePlanner, load_planner
from controller.daemon.fabric_state import (
    DEFER_LIMIT_NS,
    ConvergenceResult,
    FabricState,
    UnknownSwitch,
    convergence_message,
    parse_convergence,
)
from controller.daemon.linkstate import DampingParams
from controller.daemon.store import Store
from controller.routing import FabricRouting, LinkEvent
from railfabric.delta import apply_delta
from railfabric.v1 import control_pb2, state_pb2

pytestmark = pytest.mark.unit

LAB = Path(__file__).resolve().parents[3] / "examples" / "lab-2rail.yaml"
S = 1_000_000_000


class Recorder:
    """Collects what FabricState sends, per switch (the gRPC layer is tested elsewhere)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, control_pb2.ControllerMessage]] = []
        self.converged: list[ConvergenceResult] = []

    def send(self, switch: str, msg: control_pb2.ControllerMessage) -> None:
        self.sent.append((switch, msg))

    def take(self) -> dict[str, control_pb2.ControllerMessage]:
        out = dict(self.sent)
        assert len(out) == len(self.sent), "two messages to one switch in one step"
        self.sent.clear()
        return out


def make(store: Store, hold_down_s: float = 2) -> tuple[FabricState, Recorder, CorePlanner]:
    rec = Recorder()
    planner = load_planner(LAB)
    damping = DampingParams(hold_down_ns=int(hold_down_s * S))
    return FabricState(planner, store, damping, rec.send, rec.converged.append), rec, planner


def connect_all(fs: FabricState, rec: Recorder) -> dict[str, state_pb2.DesiredState]:
    """Every agent says hello with nothing applied, then applies what it got."""
    held = {}
    for name in fs.views:
        reply = fs.hello(control_pb2.Hello(switch_name=name), 1)
        assert reply is not None and reply.WhichOneof("msg") == "desired_state"
        held[name] = reply.desired_state
        fs.applied(
            name,
            control_pb2.Applied(
                generation=reply.desired_state.generation, digest=reply.desired_state.digest
            ),
            2,
        )
    assert all(v.converged for v in fs.views.values())
    return held


Forwarding = dict[tuple[int, int], tuple[tuple[int, int], ...]]


def forwarding(state: state_pb2.DesiredState) -> Forwarding:
    """prefix -> next hops (port, MAC): what the switch does, whatever its group ids are."""
    groups = {g.id: tuple((nh.port, nh.dmac) for nh in g.next_hops) for g in state.groups}
    return {(r.prefix.address, r.prefix.length): groups[r.group_id] for r in state.routes}


def expected(down: list[LinkEvent]) -> dict[str, Forwarding]:
    """Every switch's forwarding computed from scratch with `down` links: the ground truth."""
    routing = FabricRouting(load_planner(LAB).fabric, down=down)
    return {
        sw.name: forwarding(export.desired_state(routing, sw.name))
        for sw in routing.topo.fabric.switches
    }


def test_hello_gets_a_snapshot_once_and_nothing_when_in_step() -> None:
    fs, rec, _ = make(Store(":memory:"))
    held = connect_all(fs, rec)
    name = next(iter(held))
    same = control_pb2.Hello(
        switch_name=name, applied_generation=held[name].generation, applied_digest=held[name].digest
    )
    assert fs.hello(same, 3) is None
    stale = control_pb2.Hello(
        switch_name=name, applied_generation=held[name].generation, applied_digest="something else"
    )
    assert fs.hello(stale, 4) is not None


def test_unknown_switch_is_refused_with_the_closest_name() -> None:
    fs, _, _ = make(Store(":memory:"))
    with pytest.raises(UnknownSwitch, match=r"unknown switch 'tor-r0-b9'; did you mean"):
        fs.hello(control_pb2.Hello(switch_name="tor-r0-b9"), 1)


def test_link_down_pushes_deltas_to_exactly_the_switches_whose_state_changes() -> None:
    fs, rec, planner = make(Store(":memory:"))
    held = connect_all(fs, rec)
    link = planner.links()[0]
    fs.port_status(
        link.a[0], control_pb2.PortStatus(port=link.a[1], up=False, wall_ns=10 * S), 10 * S
    )
    sent = rec.take()
    truth = expected([LinkEvent(link.a[0], link.a[1], False)])
    changed = {name for name, fwd in truth.items() if fwd != forwarding(held[name])}
    assert changed, "a spine uplink must change some switch's routes"
    assert set(sent) == changed
    for name, msg in sent.items():
        delta = msg.state_delta
        held[name] = apply_delta(held[name], delta)
        assert held[name].digest == delta.digest == fs.views[name].state.digest
        assert forwarding(held[name]) == truth[name]
    # The far end reporting the same cable changes nothing more.
    fs.port_status(link.b[0], control_pb2.PortStatus(port=link.b[1], up=False), 10 * S)
    assert rec.take() == {}
    assert not rec.converged
    for name in sent:
        fs.applied(
            name,
            control_pb2.Applied(
                generation=held[name].generation, digest=held[name].digest, wall_ns=11 * S
            ),
            11 * S,
        )
    (result,) = rec.converged
    assert result.link == link.key
    assert result.switches == len(changed)
    assert result.event_to_applied_ms == pytest.approx(1000.0)


def apply_all(
    fs: FabricState, rec: Recorder, held: dict[str, state_pb2.DesiredState], now_ns: int
) -> set[str]:
    """Agents apply what was just sent and acknowledge it; returns who got something."""
    sent = rec.take()
    for name, msg in sent.items():
        held[name] = apply_delta(held[name], msg.state_delta)
    for name in sent:
        fs.applied(
            name,
            control_pb2.Applied(generation=held[name].generation, digest=held[name].digest),
            now_ns,
        )
    return set(sent)


def test_link_returns_after_the_hold_down_ends_first_then_the_rest() -> None:
    fs, rec, planner = make(Store(":memory:"), hold_down_s=2)
    held = connect_all(fs, rec)
    before = {n: forwarding(s) for n, s in held.items()}
    link = planner.links()[1]
    fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=False), 10 * S)
    apply_all(fs, rec, held, 10 * S)
    fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=True), 11 * S)
    assert rec.take() == {}  # held down
    fs.tick(12 * S)
    assert rec.take() == {}
    fs.tick(13 * S)
    # Make before break: only the link's own switches get their routes back first ...
    sent = rec.take()
    assert set(sent) == {link.a[0], link.b[0]}
    for name, msg in sent.items():
        held[name] = apply_delta(held[name], msg.state_delta)
    fs.applied(
        link.a[0],
        control_pb2.Applied(generation=held[link.a[0]].generation, digest=held[link.a[0]].digest),
        13 * S,
    )
    assert rec.take() == {}  # the spine has not applied yet
    fs.applied(
        link.b[0],
        control_pb2.Applied(generation=held[link.b[0]].generation, digest=held[link.b[0]].digest),
        13 * S,
    )
    # ... and the remote ToRs once those are applied.
    remote = apply_all(fs, rec, held, 13 * S)
    assert remote and not remote & {link.a[0], link.b[0]}
    assert {n: forwarding(s) for n, s in held.items()} == before
    assert fs.tracker.usable(link.key)
    assert [r.link for r in rec.converged] == [link.key, link.key]  # down, then up


def test_held_back_deltas_go_out_when_the_ends_do_not_answer() -> None:
    fs, rec, planner = make(Store(":memory:"), hold_down_s=0)
    held = connect_all(fs, rec)
    link = planner.links()[1]
    fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=False), 10 * S)
    apply_all(fs, rec, held, 10 * S)
    fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=True), 11 * S)
    assert set(rec.take()) == {link.a[0], link.b[0]}
    deadline = fs.next_deadline_ns()
    assert deadline == 11 * S + DEFER_LIMIT_NS
    fs.tick(deadline - 1)
    assert rec.take() == {}
    fs.tick(deadline)
    assert rec.take()


def test_a_restart_keeps_generations_and_link_state(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.sqlite3")
    fs, rec, planner = make(store)
    held = connect_all(fs, rec)
    link = planner.links()[0]
    fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=False), 10 * S)
    for name, msg in rec.take().items():
        held[name] = apply_delta(held[name], msg.state_delta)
    store.close()

    fs2, rec2, _ = make(Store(tmp_path / "c.sqlite3"))
    assert not fs2.tracker.usable(link.key)
    for name, state in held.items():
        assert fs2.views[name].state.generation == state.generation
        assert fs2.views[name].state.digest == state.digest
        hello = control_pb2.Hello(
            switch_name=name, applied_generation=state.generation, applied_digest=state.digest
        )
        if name == link.a[0]:  # its hello says the port is still down
            hello.ports.add(port=link.a[1], oper_up=False)
        assert fs2.hello(hello, 20 * S) is None, name
    assert rec2.take() == {}


def test_swapped_cables_raise_alarms_that_clear_when_fixed() -> None:
    fs, _, planner = make(Store(":memory:"))
    l1, l2 = [link for link in planner.links() if link.a[0] == planner.links()[0].a[0]][:2]
    tor = l1.a[0]
    swapped = control_pb2.Neighbors(
        neighbors=[
            control_pb2.LldpNeighbor(port=l1.a[1], system_name=l2.b[0], port_id=str(l2.b[1])),
            control_pb2.LldpNeighbor(port=l2.a[1], system_name=l1.b[0], port_id=str(l1.b[1])),
        ]
    )
    fs.neighbors(tor, swapped, 1)
    messages = sorted(a.message for a in fs.store.alarms())
    p1, p2 = f"{l1.b[0]} port {l1.b[1]}", f"{l2.b[0]} port {l2.b[1]}"
    assert messages == sorted(
        [
            f"{tor} port {l1.a[1]} expected {p1}, sees {p2}",
            f"{tor} port {l2.a[1]} expected {p2}, sees {p1}",
        ]
    )
    fixed = control_pb2.Neighbors(
        neighbors=[
            control_pb2.LldpNeighbor(port=l1.a[1], system_name=l1.b[0], port_id=str(l1.b[1])),
            control_pb2.LldpNeighbor(port=l2.a[1], system_name=l2.b[0], port_id=str(l2.b[1])),
        ]
    )
    fs.neighbors(tor, fixed, 2)
    assert fs.store.alarms() == []
    assert fs.alarm_ids == set()


def test_a_restart_after_flaps_rebuilds_the_same_group_ids(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.sqlite3")
    fs, rec, planner = make(store, hold_down_s=0)
    held = connect_all(fs, rec)
    first, second = planner.links()[0], planner.links()[5]
    for t, (link, up) in enumerate([(first, False), (second, False), (first, True)], start=10):
        fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=up), t * S)
        apply_all(fs, rec, held, t * S)
        fs.tick((t + 1) * S)  # releases what make-before-break held back
        apply_all(fs, rec, held, (t + 1) * S)
    fresh = expected([LinkEvent(second.a[0], second.a[1], False)])
    assert {n: forwarding(s) for n, s in held.items()} == fresh
    store.close()

    fs2, rec2, _ = make(Store(tmp_path / "c.sqlite3"))
    for name, state in held.items():
        assert fs2.views[name].state.digest == state.digest, name
        hello = control_pb2.Hello(
            switch_name=name, applied_generation=state.generation, applied_digest=state.digest
        )
        assert fs2.hello(hello, 20 * S) is None, name
    assert rec2.take() == {}


def test_converged_event_messages_parse_back_to_their_figures() -> None:
    result = ConvergenceResult(
        link="tor-r1-b1:3--spine-p1-1:1",
        event_to_applied_ms=41.5,
        report_ms=3.2,
        compute_ms=0.3,
        push_ms=20.0,
        apply_ms=18.0,
        switches=3,
        entries=12,
    )
    message = convergence_message(result)
    assert message.startswith("link tor-r1-b1:3--spine-p1-1:1: 3 switches applied 12 objects")
    assert parse_convergence(message) == result
    assert parse_convergence("link x: something else") is None


def test_a_new_intent_sends_full_states_to_the_switches_it_changes(tmp_path: Path) -> None:
    fs, rec, _ = make(Store(":memory:"))
    held = connect_all(fs, rec)
    assert fs.reload(load_planner(LAB), 5 * S) == []
    assert rec.take() == {}  # the same intent changes nothing
    other = tmp_path / "lab.yaml"
    other.write_text(LAB.read_text().replace("mtu_bytes: 9100", "mtu_bytes: 4200"))
    assert fs.reload(load_planner(other), 6 * S) == []
    sent = rec.take()
    assert set(sent) == set(held)  # PFC headroom depends on the MTU on every port
    for name, msg in sent.items():
        state = msg.desired_state
        assert state.generation == held[name].generation + 1
        assert state.digest != held[name].digest
        assert fs.views[name].connected and not fs.views[name].converged


def test_a_long_routing_history_is_compacted_once_the_fabric_is_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fabric_state, "ROUTING_LOG_LIMIT", 3)
    store = Store(tmp_path / "c.sqlite3")
    fs, rec, planner = make(store, hold_down_s=0)
    held = connect_all(fs, rec)
    before = {n: forwarding(s) for n, s in held.items()}

    def drain(now_ns: int) -> None:
        """Agents apply deltas or full states until the controller has nothing more to say."""
        while sent := rec.take():
            for name, msg in sent.items():
                kind = msg.WhichOneof("msg")
                held[name] = (
                    msg.desired_state
                    if kind == "desired_state"
                    else apply_delta(held[name], msg.state_delta)
                )
            for name in sent:
                fs.applied(
                    name,
                    control_pb2.Applied(generation=held[name].generation, digest=held[name].digest),
                    now_ns,
                )
            fs.tick(now_ns + S)  # releases what make-before-break held back

    first, second = planner.links()[0], planner.links()[5]
    steps = [(first, False), (second, False), (first, True), (second, True)]
    for t, (link, up) in enumerate(steps, start=10):
        fs.port_status(link.a[0], control_pb2.PortStatus(port=link.a[1], up=up), t * S)
        drain(t * S)
    assert store.routing_log_size() == 0
    assert [e.kind for e in store.events(50)].count("routing_compacted") == 1
    assert {n: forwarding(s) for n, s in held.items()} == before
    assert all(v.converged for v in fs.views.values())
    store.close()
    fs2, _, _ = make(Store(tmp_path / "c.sqlite3"))
    for name, state in held.items():
        hello = control_pb2.Hello(
            switch_name=name, applied_generation=state.generation, applied_digest=state.digest
        )
        assert fs2.hello(hello, 30 * S) is None, name
