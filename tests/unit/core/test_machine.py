"""The decision core, scenario by scenario: what it pushes, to whom, when, and what it
records. The random interleavings are in test_machine_model.py; the cases here pin the
behaviours by name, including every bug the model found."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from controller.core import machine
from controller.core.clock import Now
from controller.core.convergence import DEFER_LIMIT_NS
from controller.core.effects import Persist, Push
from controller.core.records import AlarmRecord, EventRecord, SwitchGenerations
from controller.core.switches import SwitchView, UnknownSwitch
from controller.daemon.store import SqliteStore
from railfabric.delta import StateIndex
from railfabric.digest import state_digest
from railfabric.v1 import admin_pb2, control_pb2, state_pb2
from tests.unit.core.harness import LAB, Harness, S, forwarding

pytestmark = pytest.mark.unit

FABRICS = Path(__file__).resolve().parent / "fabrics"
SHAPES = [LAB, FABRICS / "three-tier.yaml", FABRICS / "pods.yaml"]


def connected(fabric: Path = LAB, hold_down_s: float = 2) -> Harness:
    """Every agent connected and every link observed up, with what that caused forgotten."""
    h = Harness(fabric, hold_down_s)
    h.connect_all()
    assert h.core.tracker.down_links() == []
    h.take_pushed()
    h.core.events.clear()
    return h


def events_of(h: Harness, kind: int) -> list[admin_pb2.Event]:
    return [e for e in h.core.events if e.type == kind]


def uplinks(h: Harness, tor: str) -> list[str]:
    return sorted(link.key for link in h.core.links() if tor in (link.a[0], link.b[0]))


def test_hello_gets_a_snapshot_once_and_nothing_when_in_step() -> None:
    h = connected()
    name = "tor-r1-b1"
    h.hello(name)
    assert h.take_pushed() == []
    h.agents[name].held.digest = "v2:" + "0" * 64  # type: ignore[union-attr]
    h.hello(name)
    assert h.take_pushed() == [name]


def test_views_keep_the_fields_switches_share_once_and_every_snapshot_is_whole() -> None:
    """A view's state leaves out the fields its switch has alike with others (port layout's
    QoS, a ToR's traffic matrix classes): the ToRs' views hold one object of them. What goes
    to an agent (its snapshot, the admin's copy, a coalesced outbox's resync) is the whole
    state, its digest the state's own (the harness's agents check every snapshot's), and
    after a cut and a compaction (a rebuild's states) it still is."""
    h = Harness()
    h.connect_all()
    key = next(iter(h.core.links())).key
    h.cut(key)
    h.settle()
    h.core.routing_log_limit = 0  # the next computation compacts: states from a rebuild
    h.restore(key)
    h.settle()
    assert not h.rebuilds and h.core.quiescent()
    assert events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    tors = [v for name, v in h.core.views.items() if name.startswith("tor")]
    assert len(tors) > 1 and all(v.shared is tors[0].shared for v in tors)
    for name, v in h.core.views.items():
        assert not (v.state.ecn or v.state.matrix.classes), name
        whole = v.whole_state()
        assert whole.ecn and len(whole.matrix.classes) == (len(tors) if v in tors else 0)
        assert state_digest(whole) == whole.digest == v.state.digest
        assert h.agents[name].held == whole, name
        wire = h.core.current_wire(name)
        assert wire is not None and wire.generation == whole.generation
        assert control_pb2.ControllerMessage.FromString(wire.wire).desired_state == whole


def test_a_view_keeps_the_report_before_the_last_serialized_without_what_the_core_took() -> None:
    """Of a switch's Counters the view keeps the last, and the one before serialized without
    the traffic matrix, NAK samples and probe results the core took in when it came; its
    neighbours serialized too. Read back, each is what the agent said, and the growth
    between the last two reports follows every report."""
    h = Harness()
    h.connect_all()
    tor = "tor-r1-b1"
    v = h.core.views[tor]
    classes = len(v.whole_state().matrix.classes)
    sent = []
    for i, drops in enumerate((0, 5, 5)):
        msg = control_pb2.Counters(wall_ns=h.now.wall_ns + i * 5 * S)
        msg.ports.add(port=3, drops=drops, rx_packets=1_000 * (i + 1))
        msg.roce_cells.append(3 * 64 + 3 * 8 + 1)
        msg.roce_packets.append(10 * (i + 1))
        msg.matrix_packets.extend([i] * classes)
        msg.matrix_bytes.extend([100 * i] * classes)
        msg.nak_samples.add(port=3, src_ipv4=1, dst_ipv4=2)
        sent.append(msg.SerializeToString())
        h.run(h.core.counters(tor, msg, h.now))
        assert control_pb2.Counters.FromString(sent[-1]) == v.last_counters
        if i == 0:
            assert v.prev_counters is None and v.growth == ()
            continue
        before = control_pb2.Counters.FromString(sent[-2])
        for taken in ("matrix_packets", "matrix_bytes", "nak_samples"):
            before.ClearField(taken)
        assert v.prev_counters == before and before.ports and before.roce_cells
        assert v.growth == (((3, "drops", 5),) if i == 1 else ())
    assert v.matrix_reports and len(v.matrix_reports[-1].packets) == classes
    assert v.neighbors is None
    heard = control_pb2.Neighbors()
    heard.neighbors.add(port=3, chassis_id="02:00:00:00:00:01", port_id="2", system_name="x")
    h.run(h.core.neighbors(tor, heard, h.now))
    assert v.neighbors == heard and v.neighbors is not v.neighbors


def test_port_names_from_every_hello_are_kept_as_one_string_each() -> None:
    """Every switch names its ports alike (eth1, ...): what Hellos bring is kept as one
    string per name, not one per port of every switch (23 MiB on ref-100k, 9 interned)."""
    h = Harness()
    kept = []
    for name in ("tor-r1-b1", "tor-r2-b1"):
        port = min(h.core.views[name].ports)
        # Built at run time, as a parsed message's strings are: never the same object.
        ifname = "".join(["eth", str(port)])
        ports = [control_pb2.PortInfo(port=port, ifname=ifname, oper_up=True)]
        h.agents[name].connected = True
        h.run(h.core.hello(control_pb2.Hello(switch_name=name, ports=ports), h.now))
        kept.append(h.core.views[name].port_names[port])
    assert kept[0] == kept[1] and kept[0] is kept[1]


def test_unknown_switch_is_refused_with_the_closest_name_and_a_bounded_echo() -> None:
    h = Harness()
    with pytest.raises(UnknownSwitch, match=r"unknown switch 'tor-r1-b9'; did you mean"):
        h.core.hello(control_pb2.Hello(switch_name="tor-r1-b9"), h.now)
    with pytest.raises(UnknownSwitch) as err:
        h.core.hello(control_pb2.Hello(switch_name="x" * 10_000), h.now)
    assert len(str(err.value)) < 200


def test_link_down_pushes_deltas_to_exactly_the_switches_whose_state_changes() -> None:
    h = connected()
    before = {n: forwarding(v.state) for n, v in h.core.views.items()}
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    truth = h.fresh_forwarding()
    changed = {n for n in truth if truth[n] != before[n]}
    assert changed and set(h.take_pushed()) == changed
    h.advance(S)
    h.ack_all()
    (conv,) = events_of(h, admin_pb2.EVENT_KIND_CONVERGED)
    assert conv.convergence.link == key and not conv.convergence.usable
    assert conv.convergence.switches == len(changed)
    assert conv.convergence.event_to_applied_ns == S
    for name in changed:
        assert forwarding(h.agents[name].held) == truth[name]  # type: ignore[arg-type]


def test_link_returns_after_the_hold_down_ends_first_then_the_rest() -> None:
    h = connected(hold_down_s=2)
    before = {n: forwarding(v.state) for n, v in h.core.views.items()}
    key = uplinks(h, "tor-r1-b1")[0]
    link = h.core.planned_link(key)
    h.cut(key)
    h.ack_all()
    h.take_pushed()
    h.restore(key)
    assert h.take_pushed() == []  # held down
    h.advance(2 * S)
    assert sorted(h.take_pushed()) == sorted({link.a[0], link.b[0]})
    h.ack(link.a[0])
    assert h.take_pushed() == []  # the spine has not applied yet
    h.ack(link.b[0])
    remote = h.take_pushed()
    assert remote and not set(remote) & {link.a[0], link.b[0]}
    h.ack_all()
    assert {n: forwarding(v.state) for n, v in h.core.views.items()} == before
    assert [e.convergence.usable for e in events_of(h, admin_pb2.EVENT_KIND_CONVERGED)] == [
        False,
        True,
    ]


def test_held_back_deltas_go_out_when_the_ends_do_not_answer() -> None:
    h = connected(hold_down_s=0)
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    h.ack_all()
    h.take_pushed()
    h.restore(key)
    assert len(h.take_pushed()) == 2
    assert h.deadline == h.now.mono_ns + DEFER_LIMIT_NS
    h.advance(DEFER_LIMIT_NS - 1)
    assert h.take_pushed() == []
    h.warnings.clear()
    h.advance(1)
    released = h.take_pushed()
    assert len(released) > 2
    # One line for the event, not one per switch.
    link = h.core.planned_link(key)
    (line,) = h.warnings
    assert line.startswith(f"make-before-break: {len(released)} deltas of {key} (")
    assert line.endswith(f"for {', '.join(sorted((link.a[0], link.b[0])))} to apply theirs")


@pytest.mark.parametrize("fabric", SHAPES, ids=lambda p: p.stem)
def test_two_links_returning_together_leave_every_switch_as_a_fresh_computation(
    fabric: Path,
) -> None:
    """The bug of the issue: two link-ups each held deltas for the same remote switches, and
    the later batch left first. Here the second link's ends answer first, the first's late."""
    h = connected(fabric, hold_down_s=1)
    tor = min(n for n in h.core.views if n.startswith("tor-"))
    first, second = uplinks(h, tor)[:2]
    before = {n: forwarding(v.state) for n, v in h.core.views.items()}
    for key in (first, second):
        h.cut(key)
    h.ack_all()
    h.set_carrier(first, True)
    h.set_carrier(second, True)
    l1, l2 = h.core.planned_link(first), h.core.planned_link(second)
    h.report(l1.a)
    h.report(l1.b)
    h.advance(S // 5)
    h.report(l2.a)
    h.report(l2.b)
    h.advance(S * 4 // 5)  # the first link is usable: its remote deltas are held ...
    h.advance(S // 5)  # ... and the second's, both within the deferral limit
    assert h.core.tracker.usable(first) and h.core.tracker.usable(second)
    for end in (l2.a[0], l2.b[0]):
        h.ack(end)  # the second link's ends answer ...
    h.advance(S // 20)
    for end in (l1.a[0], l1.b[0]):
        h.ack(end)  # ... before the first's
    h.settle()
    h.check_matches_fresh_computation()
    assert {n: forwarding(v.state) for n, v in h.core.views.items()} == before


def test_lab_tor_r2_b1_sends_tor_r1_b1s_prefix_over_both_uplinks_after_a_double_return() -> None:
    h = connected(hold_down_s=1)
    first, second = uplinks(h, "tor-r1-b1")
    for key in (first, second):
        h.cut(key)
    h.ack_all()
    h.restore(first)
    h.advance(S // 2)
    h.restore(second)
    h.advance(2 * S)
    h.settle()
    routes = forwarding(h.core.views["tor-r2-b1"].state)
    prefix = next(p for p in routes if p[1] == 29 and p[0] == (10 << 24))
    assert routes[prefix] == frozenset({3, 4})


def test_a_delta_leaves_only_from_the_generation_the_session_was_sent() -> None:
    """A Hello mid-flight resets the session's chain: what follows is a snapshot or extends
    the snapshot, never a delta from an older generation."""
    h = connected(hold_down_s=0)
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)  # deltas queued for several agents, none applied
    for name in h.agents:
        h.hello(name)  # every agent asks again before applying
    h.restore(key)
    h.settle()  # Agent.queue asserts every delta starts where its session stands
    h.check_matches_fresh_computation()


def test_a_restart_keeps_generations_and_link_state_and_pushes_nothing() -> None:
    h = connected()
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    h.ack_all()
    h.take_pushed()
    held = {n: (a.held.generation, a.held.digest) for n, a in h.agents.items() if a.held}
    h.restart_controller()
    assert not h.core.tracker.usable(key)
    for name, (generation, digest) in held.items():
        v = h.core.views[name]
        assert (v.state.generation, v.state.digest) == (generation, digest), name
        h.hello(name)
    assert h.take_pushed() == []


def test_a_restart_that_lost_pushed_generations_sends_full_states_and_converges() -> None:
    """The controller pushed a cut's deltas and the agents applied them, then died before the
    cut's records were durable (pushes leave before the commit with the embedded store): it
    comes back believing the generations before the cut. A switch whose Hello says another
    generation or digest than the one the controller holds then is not converged and gets
    a full state; one whose state the controller has recomputed to what it holds (the cut
    port reported down again) is converged, rightly; the fabric ends as a fresh computation
    says."""
    h = connected()
    before = h.store.load()
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    h.settle()
    moved = [
        n
        for n, a in h.agents.items()
        if a.held and a.held.generation != before.switches[n].generation
    ]
    assert moved, "the cut changed no switch's state"
    h.restart_controller(store_held=before)
    # Switches the cut changed but that are not its ends say Hello first: the restarted
    # controller has not heard of the cut yet and holds the generation before it.
    ends = {end[0] for end in (h.core.planned_link(key).a, h.core.planned_link(key).b)}
    order = sorted(h.agents, key=lambda n: (n in ends or n not in moved, n))
    unknown = 0
    for name in order:
        h.take_pushed()
        held = h.agents[name].held
        assert held is not None
        h.hello(name)
        v = h.core.views[name]
        if (v.state.generation, v.state.digest) != (held.generation, held.digest):
            assert not v.converged and h.take_pushed() == [name], name
            assert h.agents[name].inbox[-1].WhichOneof("msg") == "desired_state", name
            unknown += 1
    assert unknown, "no agent held a generation the restarted controller had no record of"
    h.settle()
    assert not h.core.tracker.usable(key)
    h.check_matches_fresh_computation()
    h.check_acked_hold_what_the_controller_believes()


def test_a_restart_after_flaps_rebuilds_the_same_group_ids() -> None:
    h = connected(hold_down_s=0)
    first, second = uplinks(h, "tor-r1-b1")[0], uplinks(h, "tor-r2-b1")[0]
    for key, up in [(first, False), (second, False), (first, True)]:
        h.restore(key) if up else h.cut(key)
        h.settle()
    states = {n: v.state.digest for n, v in h.core.views.items()}
    h.take_pushed()
    h.restart_controller()
    assert {n: v.state.digest for n, v in h.core.views.items()} == states
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []


def test_swapped_cables_raise_alarms_that_clear_when_fixed() -> None:
    h = connected()
    l1, l2 = (h.core.planned_link(k) for k in uplinks(h, "tor-r1-b1"))
    tor = l1.a[0]

    def heard(pairs: list[tuple[int, tuple[str, int]]]) -> control_pb2.Neighbors:
        return control_pb2.Neighbors(
            neighbors=[
                control_pb2.LldpNeighbor(port=p, system_name=peer[0], port_id=str(peer[1]))
                for p, peer in pairs
            ]
        )

    h.run(h.core.neighbors(tor, heard([(l1.a[1], l2.b), (l2.a[1], l1.b)]), h.now))
    p1, p2 = f"{l1.b[0]} port {l1.b[1]}", f"{l2.b[0]} port {l2.b[1]}"
    assert sorted(a.message for a in h.core.alarms.active.values()) == sorted(
        [
            f"{tor} port {l1.a[1]} expected {p1}, sees {p2}",
            f"{tor} port {l2.a[1]} expected {p2}, sees {p1}",
        ]
    )
    h.restart_controller()  # alarms are kept
    assert len(h.core.alarms) == 2
    h.run(h.core.neighbors(tor, heard([(l1.a[1], l1.b), (l2.a[1], l2.b)]), h.now))
    assert h.core.alarms.active == {}


def test_a_new_intent_sends_full_states_and_keeps_what_agents_reported(tmp_path: Path) -> None:
    h = connected()
    name = "tor-r1-b1"
    v = h.core.views[name]
    refused = control_pb2.ObjectError(object="route 10.0.0.0/29", code=8, message="table full")
    applied = control_pb2.Applied(
        generation=v.state.generation, digest=v.state.digest, errors=[refused]
    )
    h.run(h.core.applied(name, applied, h.now))
    assert not h.core.views[name].converged
    h.reload()
    assert h.take_pushed() == []  # the same intent changes nothing
    # ... and what the agent reported is kept: the refused objects still count.
    assert not h.core.views[name].converged
    assert h.core.views[name].applied_errors == [refused]
    other = tmp_path / "lab.yaml"
    other.write_text(LAB.read_text().replace("mtu_bytes: 9100", "mtu_bytes: 4200"))
    h.reload(other)
    assert sorted(h.take_pushed()) == sorted(h.agents)  # PFC headroom depends on the MTU


def test_reload_carries_every_observed_field_of_a_switch_view() -> None:
    """A field added to SwitchView is carried over a reload unless it is declared as coming
    from the intent; this fails when someone adds an intent field without saying so."""
    names = {f.name for f in dataclasses.fields(SwitchView)}
    assert {"name", "state", "ports", "shared", "index"} == SwitchView.INTENT_FIELDS
    old = SwitchView.of("s", state_pb2.DesiredState(generation=3))
    new = SwitchView.of("s", state_pb2.DesiredState(generation=4))
    for i, f in enumerate(sorted(names - SwitchView.INTENT_FIELDS)):
        default = getattr(new, f)
        value: object
        if isinstance(default, bool):
            value = not default
        elif isinstance(default, str):
            value = f"value-{i}"
        elif isinstance(default, list):
            value = [control_pb2.ObjectError(object=str(i))]
        elif f.endswith("counters"):
            value = control_pb2.Counters(wall_ns=i + 1)
        elif f == "neighbors":
            value = control_pb2.Neighbors()
        else:
            value = 100 + i
        setattr(old, f, value)
    carried = new.carried_from(old)
    for f in names - SwitchView.INTENT_FIELDS:
        assert getattr(carried, f) == getattr(old, f), f
    assert carried.state.generation == 4


def test_a_long_routing_history_is_compacted_once_the_fabric_is_healthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(machine, "ROUTING_LOG_LIMIT", 3)
    h = connected(hold_down_s=0)
    before = {n: forwarding(v.state) for n, v in h.core.views.items()}
    key = uplinks(h, "tor-r1-b1")[0]
    for _ in range(2):
        h.cut(key)
        h.settle()
        h.restore(key)
        h.settle()
    assert len(h.core.routing_log) == 0
    assert events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    assert {n: forwarding(v.state) for n, v in h.core.views.items()} == before
    h.take_pushed()
    h.restart_controller()
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []


def test_a_rebuild_taken_in_after_deltas_moved_a_switch_on_sends_its_next_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job serializes each snapshot at the generation the switch was expected to take; a
    switch sent deltas while it ran (a cable cut and back: routing as the job left it) is at a
    later one, and its snapshot is made again at the generation after that."""
    monkeypatch.setattr(machine, "ROUTING_LOG_LIMIT", 3)
    h = connected(hold_down_s=0)
    h.defer_rebuilds = True

    def applied() -> None:  # settle() would take the rebuild in
        for _ in range(3):
            for name in h.agents:
                h.ack(name)
            h.advance(S)

    key = uplinks(h, "tor-r1-b1")[0]
    for step in (h.cut, h.restore, h.cut, h.restore):
        step(key)
        applied()
    assert len(h.rebuilds) == 1
    asked = {n: v.state.generation for n, v in h.core.views.items()}
    other = uplinks(h, "tor-r2-b1")[0]
    h.cut(other)
    applied()
    h.restore(other)
    applied()
    assert len(h.rebuilds) == 1  # still under way
    moved = {n for n, v in h.core.views.items() if v.state.generation > asked[n] + 1}
    assert moved  # the cut and its return reached some switches twice
    h.take_pushed()
    h.finish_rebuild()
    assert events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    h.settle()
    h.check_acked_hold_what_the_controller_believes()
    h.check_matches_fresh_computation()
    h.check_no_error()
    assert moved & set(h.pushed)  # the compaction renamed their group ids: snapshots
    for name in moved & set(h.pushed):
        held = h.agents[name].held
        assert held is not None
        assert held.generation == h.core.views[name].state.generation > asked[name] + 2


def test_compaction_counts_computations_not_the_steps_joined_in_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of many links is one computation to replay: no reason to compact."""
    monkeypatch.setattr(machine, "ROUTING_LOG_LIMIT", 3)
    h = Harness(hold_down_s=0)
    key = uplinks(h, "tor-r1-b1")[0]
    h.set_carrier(key, False)  # not everything comes up: discovered links are routed as a batch
    h.connect_all()
    assert len(h.core.routing_log) == len(list(h.core.links())) - 1 > 3
    h.set_carrier(key, True)
    h.restore(key)
    h.settle()
    # Every link usable and two computations logged (more than 3 steps): kept.
    assert h.core.unroutable_links() == []
    assert _computations(h) == 2
    assert len(h.core.routing_log) == len(list(h.core.links()))


def test_applied_for_a_generation_never_sent_is_refused() -> None:
    h = connected()
    name = "tor-r1-b1"
    v = h.core.views[name]
    for generation in (v.state.generation + 1, 10**12, 2**64 - 1):
        effects = h.core.applied(name, control_pb2.Applied(generation=generation), h.now)
        assert not any(isinstance(e, Persist) for e in effects)
    assert h.core.views[name].applied_generation == v.state.generation
    assert h.core.refused == {"applied_unsent": 3}


def test_port_status_for_a_port_the_switch_does_not_have_is_refused_not_an_event() -> None:
    h = connected()
    count = len(h.core.events)
    for port in (0, 999, 2**32 - 1):
        h.run(h.core.port_status("tor-r1-b1", control_pb2.PortStatus(port=port), h.now))
    assert len(h.core.events) == count
    assert h.core.refused == {"port_status_unknown_port": 3}


def test_store_unavailable_is_a_critical_alarm_raised_and_cleared() -> None:
    h = connected()
    effects = h.core.store_health(False, "database or disk is full", h.now)
    (persist,) = [e for e in effects if isinstance(e, Persist)]
    (alarm,) = [r for r in persist.records if isinstance(r, AlarmRecord)]
    assert (alarm.id, alarm.severity) == ("store_unavailable", "critical")
    assert "database or disk is full" in alarm.message
    assert h.core.store_health(False, "still full", h.now) == []  # raised once
    h.run(h.core.store_health(True, "", h.now))
    assert "store_unavailable" not in h.core.alarms


def test_one_input_is_one_persist_with_one_record_for_all_generations() -> None:
    h = connected()
    effects = h.core.port_status(
        "tor-r1-b1", control_pb2.PortStatus(port=3, up=False, wall_ns=h.now.wall_ns), h.now
    )
    persists = [e for e in effects if isinstance(e, Persist)]
    assert len(persists) == 1
    gens = [r for r in persists[0].records if isinstance(r, SwitchGenerations)]
    assert len(gens) == 1 and len(gens[0].entries) == len(
        [e for e in effects if isinstance(e, Push)]
    )
    kinds = [r.event.type for r in persists[0].records if isinstance(r, EventRecord)]
    assert kinds[:2] == [admin_pb2.EVENT_KIND_PORT_DOWN, admin_pb2.EVENT_KIND_LINK_DOWN]
    assert effects.index(persists[0]) == 0  # records first: pushes wait for them


def test_timers_run_on_the_monotonic_clock_whatever_the_wall_clock_does() -> None:
    h = connected(hold_down_s=2)
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    h.settle()
    h.restore(key)
    # An NTP step sends wall time back an hour: the hold-down still ends 2 s later.
    h.now = Now(h.now.mono_ns, h.now.wall_ns - 3600 * S)
    h.advance(2 * S - 1)
    assert not h.core.tracker.usable(key)
    h.advance(1)
    assert h.core.tracker.usable(key)


def test_local_repair_events_carry_the_agents_figures_as_fields() -> None:
    h = connected()
    down = control_pb2.PortStatus(port=3, up=False, wall_ns=h.now.wall_ns)
    h.run(h.core.port_status("tor-r1-b1", down, h.now))
    (e,) = events_of(h, admin_pb2.EVENT_KIND_PORT_DOWN)
    assert (e.switch_name, e.port, e.kind) == ("tor-r1-b1", 3, "port_down")
    assert not events_of(h, admin_pb2.EVENT_KIND_LOCAL_REPAIR)
    repair = control_pb2.LocalRepair(
        port=3, detected_wall_ns=down.wall_ns, groups_repaired=2, latency_ns=1_250_000
    )
    h.run(h.core.local_repair("tor-r1-b1", repair, h.now))
    (r,) = events_of(h, admin_pb2.EVENT_KIND_LOCAL_REPAIR)
    assert (r.switch_name, r.port, r.kind) == ("tor-r1-b1", 3, "local_repair")
    assert (r.port_change.local_repair_ns, r.port_change.groups_repaired) == (1_250_000, 2)
    assert r.port_change.detected_wall_ns == down.wall_ns and not r.port_change.up
    # A port the switch does not have: refused and counted, no event.
    h.run(h.core.local_repair("tor-r1-b1", control_pb2.LocalRepair(port=99), h.now))
    assert len(events_of(h, admin_pb2.EVENT_KIND_LOCAL_REPAIR)) == 1
    assert h.core.refused == {"local_repair_unknown_port": 1}


def test_an_older_agents_repair_figures_in_port_status_still_reach_the_event() -> None:
    """An agent of the previous release repaired before it reported, and sent the figures in
    PortStatus (proto/README.md's compatibility rule)."""
    h = connected()
    msg = control_pb2.PortStatus(
        port=3, up=False, wall_ns=h.now.wall_ns, groups_repaired=2, local_repair_ns=1_250_000
    )
    h.run(h.core.port_status("tor-r1-b1", msg, h.now))
    (e,) = events_of(h, admin_pb2.EVENT_KIND_PORT_DOWN)
    assert e.port_change.local_repair_ns == 1_250_000 and e.port_change.groups_repaired == 2
    assert (e.switch_name, e.port, e.kind) == ("tor-r1-b1", 3, "port_down")


def test_the_core_reads_no_clock_and_touches_no_socket_store_or_log() -> None:
    core = Path(machine.__file__).parent
    forbidden = {"time", "socket", "sqlite3", "logging", "asyncio", "grpc", "threading", "os"}
    for source in sorted(core.glob("*.py")):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            assert not set(names) & forbidden, f"{source.name} imports {names}"


def test_a_second_agent_for_a_switch_is_an_alarm_naming_both_until_one_leaves() -> None:
    h = connected()
    h.run(
        h.core.duplicate_agent("tor-r1-b1", "ipv4:127.0.0.1:40001", "ipv4:127.0.0.1:40002", h.now)
    )
    (alarm,) = h.core.alarms.active.values()
    assert (alarm.kind, alarm.severity, alarm.switch) == (
        "duplicate_agent",
        "critical",
        "tor-r1-b1",
    )
    assert "127.0.0.1:40001" in alarm.message and "127.0.0.1:40002" in alarm.message
    h.run(h.core.duplicate_agent_gone("tor-r1-b1", h.now))
    assert not h.core.alarms.active


# -- observed truth: links are what agents report, not what the plan says


def test_links_are_unknown_and_unrouted_until_both_ends_report() -> None:
    h = Harness()
    assert set(h.core.tracker.down_links()) == {link.key for link in h.core.links()}
    h.hello("tor-r1-b1")
    h.check_no_route_over_unusable_links()
    state = h.core.views["tor-r1-b1"].state
    assert all(
        h.core.tracker.link_of(("tor-r1-b1", nh.port)) is None
        for g in state.groups
        for nh in g.next_hops
    ), "a ToR alone must not route over links to spines that never reported"
    for key in uplinks(h, "tor-r1-b1"):
        assert "has not reported" in h.core.link_reason(key)
    h.connect_all()
    assert h.core.tracker.down_links() == []
    h.check_matches_fresh_computation()


def test_an_unmapped_port_is_an_alarm_and_its_link_is_not_routed() -> None:
    h = connected()
    name = "tor-r1-b1"
    key = uplinks(h, name)[0]
    port = next(p for s, p in (h.core.planned_link(key).a, h.core.planned_link(key).b) if s == name)
    h.hello(name, unmapped=frozenset({port}))
    (alarm,) = h.core.alarms.active.values()
    assert alarm.id == f"port_unmapped:{name}:{port}" and alarm.kind == "port_unmapped"
    assert f"{name} port {port} " in alarm.message
    assert not h.core.tracker.usable(key)
    assert "not in its port map" in h.core.link_reason(key)
    h.settle()
    h.check_no_route_over_unusable_links()
    h.check_matches_fresh_computation()
    h.hello(name)  # the agent restarted with its whole port map
    assert not h.core.alarms.active
    h.settle()
    assert h.core.tracker.usable(key)


def test_an_agent_reconnect_inside_the_grace_changes_no_route() -> None:
    h = connected()
    h.disconnect("spine-p1-1")
    h.advance(machine.SESSION_GRACE_NS - S)
    assert h.core.tracker.down_links() == []
    h.hello("spine-p1-1")
    assert h.take_pushed() == []  # nothing rewritten: the agent still holds its state
    h.advance(2 * S)
    assert h.core.tracker.down_links() == [] and h.take_pushed() == []


def test_past_the_grace_routes_go_around_a_switch_without_agent_and_return_with_it() -> None:
    h = connected()
    h.disconnect("spine-p1-1")
    h.advance(machine.SESSION_GRACE_NS + S)
    gone = {link.key for link in h.core.links() if "spine-p1-1" in (link.a[0], link.b[0])}
    assert set(h.core.tracker.down_links()) == gone
    (ended,) = events_of(h, admin_pb2.EVENT_KIND_SESSION_GRACE_ENDED)
    assert ended.switch_name == "spine-p1-1"
    for key in gone:
        assert "spine-p1-1" in h.core.link_reason(key)
    h.ack_all()
    h.check_no_route_over_unusable_links()
    h.settle()  # the agent comes back
    assert h.core.tracker.down_links() == []
    h.check_matches_fresh_computation()


def test_a_controller_restart_inside_the_grace_writes_nothing() -> None:
    h = connected()
    h.restart_controller()
    h.take_pushed()
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []
    h.advance(machine.SESSION_GRACE_NS + S)
    assert h.core.tracker.down_links() == [] and h.take_pushed() == []


def test_a_start_without_the_store_leaves_agents_forwarding_until_their_links_join() -> None:
    """A controller that lost its store starts with no link observed. Agents that hold a
    state of their own keep it until the links their Hellos report have joined routing: a
    snapshot at the Hello would take every uplink out of every switch's tables meanwhile
    (the whole fabric cut off until discovery ends, seconds on ref-100k). A change decided
    meanwhile waits too; then each gets its state, and it is what routing says."""
    h = connected()
    h.ack_all()
    before = {name: forwarding(a.held) for name, a in h.agents.items() if a.held is not None}
    assert len(before) == len(h.agents)
    h.store.close()
    h.store = SqliteStore.open(":memory:")
    h.restart_controller()
    assert h.store.load().meta[machine.ROUTING_BASELINE] == machine.NO_LINK_USABLE
    for name in h.agents:
        h.hello(name)
    cut = uplinks(h, "tor-r1-b1")[0]
    h.set_carrier(cut, False)
    h.report(h.core.planned_link(cut).a)
    assert h.take_pushed() == []
    assert {name: forwarding(a.held) for name, a in h.agents.items() if a.held} == before
    assert all(not v.converged for v in h.core.views.values())
    h.advance(machine.DISCOVERY_SETTLE_NS + S)
    # Once they joined, a snapshot to every switch whose agent holds another state.
    views = h.core.views
    stale = {n for n, a in h.agents.items() if a.held and a.held.digest != views[n].state.digest}
    assert stale and sorted(h.take_pushed()) == sorted(stale)
    h.settle()
    h.check_no_route_over_unusable_links()
    h.check_matches_fresh_computation()


def test_a_fresh_agent_gets_its_state_at_hello_while_links_are_discovered() -> None:
    """An agent with nothing to forward with gets what there is at once (its hosts reach each
    other), and the links' state once they join."""
    h = Harness()
    h.hello("tor-r1-b1")
    assert h.take_pushed() == ["tor-r1-b1"]


def test_the_grace_counts_from_when_sessions_can_reach_the_core_not_from_the_start() -> None:
    """At 100k GPUs the start takes longer than the grace, with every agent's session held
    at the daemon's gate meanwhile: no switch may be forgotten for that wait."""
    h = connected()
    h.restart_controller(start_ns=machine.SESSION_GRACE_NS + S)
    h.take_pushed()
    h.advance(machine.SESSION_GRACE_NS - S)
    assert h.core.tracker.down_links() == []
    assert not events_of(h, admin_pb2.EVENT_KIND_SESSION_GRACE_ENDED)
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []
    h.advance(2 * S)
    assert h.core.tracker.down_links() == [] and h.take_pushed() == []


def test_an_unreachable_target_makes_the_switch_not_converged_with_the_reason() -> None:
    h = connected()
    name = "tor-r1-b1"
    lost = control_pb2.TargetHealth(reachable=False, error="connection refused")
    h.run(h.core.target_health(name, lost, h.now))
    v = h.core.views[name]
    assert not v.converged and "P4 target unreachable: connection refused" in (
        v.not_converged_reason
    )
    (alarm,) = h.core.alarms.active.values()
    assert alarm.id == f"target_unhealthy:{name}" and alarm.severity == "critical"
    # Back and primary, but not read back yet: what the target holds is not known.
    back = control_pb2.TargetHealth(reachable=True, primary=True, reconciling=True)
    h.run(h.core.target_health(name, back, h.now))
    assert not v.converged and "reconciling" in v.not_converged_reason
    assert not h.core.alarms.active  # every (re)connection passes through it: no alarm
    ok = control_pb2.TargetHealth(reachable=True, primary=True, last_read_back_wall_ns=1)
    h.run(h.core.target_health(name, ok, h.now))
    assert v.converged and not h.core.alarms.active
    diverged = control_pb2.TargetHealth(
        reachable=True, primary=True, last_read_back_wall_ns=2, missing=3
    )
    h.run(h.core.target_health(name, diverged, h.now))
    assert "3 missing" in v.not_converged_reason
    (event,) = events_of(h, admin_pb2.EVENT_KIND_TARGET_DIVERGED)
    assert "NOT repaired" in event.message
    diverged.repaired_wall_ns = h.now.wall_ns
    h.run(h.core.target_health(name, diverged, h.now))
    assert v.converged


def test_a_taken_target_raises_mastership_lost_naming_the_new_primary() -> None:
    """Another client took the target's primary from the agent: `mastership_lost:SW`, not
    `target_unhealthy`, naming that client's election id; raised again when yet another
    client holds it; cleared when the agent is primary again. Not converged meanwhile."""
    h = connected()
    name = "tor-r1-b1"
    v = h.core.views[name]
    ok = control_pb2.TargetHealth(
        reachable=True,
        primary=True,
        last_read_back_wall_ns=1,
        primary_election_id="10",
        election_id="10",
    )
    h.run(h.core.target_health(name, ok, h.now))
    assert v.converged and not h.core.alarms.active
    taken = control_pb2.TargetHealth(
        reachable=True,
        primary=False,
        error="backup: the client with election id 20 is primary",
        last_read_back_wall_ns=1,
        primary_election_id="20",
        election_id="10",
    )
    h.run(h.core.target_health(name, taken, h.now))
    (alarm,) = h.core.alarms.active.values()
    assert (alarm.id, alarm.kind, alarm.severity) == (
        f"mastership_lost:{name}",
        "mastership_lost",
        "critical",
    )
    assert "election id 20" in alarm.message and "the agent's is 10" in alarm.message
    assert not v.converged and "mastership lost" in v.not_converged_reason
    h.run(h.core.target_health(name, taken, h.now))  # the same report again: nothing new
    assert len(events_of(h, admin_pb2.EVENT_KIND_ALARM_RAISED)) == 1
    taken.primary_election_id = "30"
    h.run(h.core.target_health(name, taken, h.now))
    (alarm,) = h.core.alarms.active.values()
    assert "election id 30" in alarm.message
    assert len(events_of(h, admin_pb2.EVENT_KIND_ALARM_RAISED)) == 2
    h.run(h.core.target_health(name, ok, h.now))
    assert v.converged and not h.core.alarms.active


def test_mastership_lost_is_only_for_a_reachable_target_held_by_another_client() -> None:
    h = connected()
    name = "tor-r1-b1"
    v = h.core.views[name]
    cases = [
        # unreachable: target_unhealthy, whatever the last primary was
        (control_pb2.TargetHealth(reachable=False, primary_election_id="20"), "target_unhealthy"),
        # nobody is primary (no answer naming one yet)
        (control_pb2.TargetHealth(reachable=True, election_id="10"), "target_unhealthy"),
        # an older agent that does not say who is primary
        (control_pb2.TargetHealth(reachable=True, error="backup: ..."), "target_unhealthy"),
        (
            control_pb2.TargetHealth(reachable=True, primary_election_id="20", election_id="10"),
            "mastership_lost",
        ),
    ]
    for health, kind in cases:
        h.run(h.core.target_health(name, health, h.now))
        assert [a.kind for a in h.core.alarms.active.values()] == [kind], health
        assert not v.converged


def test_path_shows_the_hops_routing_avoids_with_the_reason() -> None:
    h = Harness()
    h.hello("tor-r1-b1")
    src = h.core.views["tor-r1-b1"].state.neighbors
    dst = h.core.views["tor-r1-b2"].state.neighbors
    host = state_pb2.PEER_KIND_HOST
    src_ip = next(n.peer_ipv4 for n in src if n.kind == host)
    dst_ip = next(n.peer_ipv4 for n in dst if n.kind == host)
    request = admin_pb2.PredictPathRequest(
        src_ip=".".join(str(src_ip >> s & 255) for s in (24, 16, 8, 0)),
        dst_ip=".".join(str(dst_ip >> s & 255) for s in (24, 16, 8, 0)),
    )
    reply = h.core.predict_path(request)
    assert not reply.delivered_to and reply.error
    (hop,) = reply.hops
    assert {a.peer.switch_name for a in hop.avoided} == {"spine-p1-1", "spine-p1-2"}
    assert all(a.state == admin_pb2.LINK_STATE_UNKNOWN for a in hop.avoided)
    assert all("has not reported port" in a.reason for a in hop.avoided)
    h.connect_all()
    reply = h.core.predict_path(request)
    assert reply.delivered_to and not any(hop.avoided for hop in reply.hops)


def test_a_cold_start_begins_routing_with_no_link_usable_and_a_restart_replays_it() -> None:
    """Nothing is observed at a cold start: routing starts from no usable link (one
    computation, not one per link), and the store says so, so a restart's replay of the
    routing log gives every switch the same state (group ids included)."""
    h = Harness()
    assert h.store.load().meta[machine.ROUTING_BASELINE] == machine.NO_LINK_USABLE
    h.connect_all()
    # Every link discovered at once: routing from scratch over all of them, said in the store.
    assert h.store.load().meta[machine.ROUTING_BASELINE] == machine.EVERY_LINK_USABLE
    h.cut(uplinks(h, "tor-r1-b1")[0])
    h.settle()
    before = {name: v.state.digest for name, v in h.core.views.items()}
    h.take_pushed()
    h.restart_controller()
    assert {name: v.state.digest for name, v in h.core.views.items()} == before
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []


def _computations(h: Harness) -> int:
    return sum(1 for step in h.core.routing_log if not step.joined)


def test_links_discovered_by_a_storm_of_hellos_are_routed_in_one_computation() -> None:
    """A cold start's Hellos discover every link; routing takes them together once none has
    been discovered for DISCOVERY_SETTLE_NS, not one computation (and a delta to every switch
    it changes) per Hello."""
    h = Harness()
    for name in h.agents:
        h.hello(name)
        h.advance(machine.DISCOVERY_SETTLE_NS // 10)
    assert _computations(h) == 0
    # Observed up, not routed yet, and the reason says so.
    key = uplinks(h, "tor-r1-b1")[0]
    assert h.core.tracker.usable(key) and not h.core.routable(key)
    assert key in h.core.unroutable_links()
    assert h.core.link_reason(key).startswith("discovered: joins routing")
    assert not h.core.quiescent()
    h.check_no_route_over_unusable_links()
    h.advance(machine.DISCOVERY_SETTLE_NS)
    # Every link discovered at once: routing from scratch, the log starting again from every
    # link usable (what a restart replays), and an event that says so.
    assert h.core.unroutable_links() == [] and h.core.routing_log == []
    (event,) = events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    assert event.message.startswith(f"{len(list(h.core.links()))} links discovered together")
    h.settle()
    h.check_matches_fresh_computation()


def test_routing_from_scratch_is_taken_in_after_the_changes_decided_meanwhile() -> None:
    """The computation from scratch runs off the event loop (a Rebuild): meanwhile a cut is
    routed at once on the routing there is, the discovered links wait and say why, and the
    result, once taken in, catches up with the cut in one more computation that a restart
    replays to the same group ids."""
    h = Harness()
    h.defer_rebuilds = True
    for name in h.agents:
        h.hello(name)
    h.advance(machine.DISCOVERY_SETTLE_NS)
    assert len(h.rebuilds) == 1 and not h.core.quiescent()
    joining = uplinks(h, "tor-r1-b1")
    assert not h.core.routable(joining[0]) and joining[0] in h.core.unroutable_links()
    assert "computation from scratch under way" in h.core.link_reason(joining[0])
    assert not events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    h.check_decided_routes_match_a_fresh_computation()
    h.cut(joining[1])  # a discovered link that goes away: the result must leave it out
    assert not h.core.routable(joining[1])
    h.check_decided_routes_match_a_fresh_computation()
    h.finish_rebuild()
    assert h.core.routable(joining[0]) and not h.core.routable(joining[1])
    assert events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    # The log from every link usable: the catch-up, one computation taking the cut link out.
    assert [(s.link, s.usable) for s in h.core.routing_log] == [(joining[1], False)]
    h.settle()
    h.check_matches_fresh_computation()
    h.take_pushed()
    h.restart_controller()
    for name in h.agents:
        h.hello(name)
    assert h.take_pushed() == []


def test_a_rebuild_for_an_intent_replaced_meanwhile_is_dropped() -> None:
    h = Harness()
    h.defer_rebuilds = True
    for name in h.agents:
        h.hello(name)
    h.advance(machine.DISCOVERY_SETTLE_NS)
    assert len(h.rebuilds) == 1
    h.reload()  # the same file, loaded afresh: the discovered links join this routing
    assert h.core.unroutable_links() == [] and h.core.quiescent()
    generations = {n: v.state.generation for n, v in h.core.views.items()}
    h.finish_rebuild()
    assert h.rebuilds == []
    assert {n: v.state.generation for n, v in h.core.views.items()} == generations
    assert not events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    h.settle()
    h.check_matches_fresh_computation()


def test_links_discovered_while_others_are_out_join_routing_in_one_computation() -> None:
    h = Harness()
    h.set_carrier(uplinks(h, "tor-r1-b1")[0], False)
    for name in h.agents:
        h.hello(name)
    assert _computations(h) == 0
    h.advance(machine.DISCOVERY_SETTLE_NS)
    assert _computations(h) == 1
    assert len(h.core.routing_log) == len(list(h.core.links())) - 1
    h.settle()
    h.check_matches_fresh_computation()


def test_discovery_that_never_pauses_is_routed_within_its_longest_wait() -> None:
    """Once the fabric is up, agents back after their grace (their links discovered again)
    closer together than the settle time: the batch goes once its first link has waited
    DISCOVERY_MAX_NS, not when the Hellos end."""
    h = connected(FABRICS / "pods.yaml")
    keys = [link.key for link in h.core.links()]
    names = sorted(h.agents)
    for name in names:
        h.disconnect(name)
    h.advance(machine.SESSION_GRACE_NS + S)
    h.ack_all()
    assert set(h.core.unroutable_links()) == set(keys)
    computations = _computations(h)
    step = machine.DISCOVERY_SETTLE_NS * 9 // 10
    assert len(names) * step > machine.DISCOVERY_MAX_NS
    first = routed = None
    for name in names:
        h.hello(name)
        waiting = any(h.core.tracker.usable(k) and not h.core.routable(k) for k in keys)
        if first is None and waiting:
            first = h.now.mono_ns
        if routed is None and _computations(h) > computations:
            routed = h.now.mono_ns
        h.advance(step)
    assert first is not None and routed is not None
    # `routed` is the first Hello seen after the batch went, at most one step after it.
    assert routed - step <= first + machine.DISCOVERY_MAX_NS <= routed
    h.settle()
    h.check_matches_fresh_computation()


def test_after_a_start_discovered_links_wait_for_the_fabric_to_check_in() -> None:
    """Agents reconnecting over seconds after the controller starts: no routing while more
    than DISCOVERY_QUORUM of the switches have not said Hello; then one computation, with the
    Hellos queued right behind the one that made the quorum (DISCOVERY_MAX_NS starts there)."""
    h = Harness(FABRICS / "pods.yaml")
    names = sorted(h.agents)
    step = machine.DISCOVERY_SETTLE_NS * 9 // 10
    quorum = next(
        i
        for i in range(1, len(names) + 1)
        if len(names) - i <= machine.DISCOVERY_QUORUM * len(names)
    )
    # The discovery began long before the quorum: without a fresh DISCOVERY_MAX_NS, routing
    # would go at the quorum's Hello and leave the later ones to another computation.
    assert quorum * step > machine.DISCOVERY_MAX_NS and quorum < len(names)
    for i, name in enumerate(names, start=1):
        h.hello(name)
        if i < len(names):
            h.advance(step)
        if i < quorum or i == len(names):
            assert h.core.routing_log == [] and not events_of(
                h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED
            ), f"routed with {len(names) - i} switches not heard"
    h.advance(machine.DISCOVERY_SETTLE_NS)
    # Every link in the one computation from scratch: nothing left out, nothing after.
    (event,) = events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    assert "discovered together" in event.message and "left out" not in event.message
    assert _computations(h) == 0 and h.core.routing_log == []
    assert h.core.unroutable_links() == []
    h.settle()
    h.check_matches_fresh_computation()


def test_after_a_start_switches_that_never_say_hello_delay_routing_a_bounded_time() -> None:
    h = Harness(FABRICS / "pods.yaml")
    silent = {n for n in h.agents if n.startswith("tor-")}
    assert len(silent) > machine.DISCOVERY_QUORUM * len(h.agents)
    for name in sorted(set(h.agents) - silent):
        h.hello(name)
    start = h.now.mono_ns
    h.advance(machine.DISCOVERY_START_MAX_NS - S)
    assert _computations(h) == 0
    h.advance(S)
    assert _computations(h) == 1 and h.now.mono_ns - start == machine.DISCOVERY_START_MAX_NS


def test_a_discovered_link_that_goes_away_before_routing_took_it_is_never_routed() -> None:
    h = Harness()
    for name in h.agents:
        h.hello(name)
    key = uplinks(h, "tor-r1-b1")[0]
    h.cut(key)
    assert key not in {step.link for step in h.core.routing_log}
    h.advance(machine.DISCOVERY_SETTLE_NS)
    routed = {step.link for step in h.core.routing_log}
    assert key not in routed and len(routed) == len(list(h.core.links())) - 1
    h.settle()
    assert h.core.unroutable_links() == [key]
    h.check_matches_fresh_computation()


def test_a_cold_start_with_a_few_links_out_routes_from_scratch_and_replays_the_same() -> None:
    h = Harness(FABRICS / "pods.yaml")
    out = uplinks(h, "tor-r1-b1")[0]
    h.set_carrier(out, False)
    for name in h.agents:
        h.hello(name)
    h.advance(machine.DISCOVERY_SETTLE_NS)
    (event,) = events_of(h, admin_pb2.EVENT_KIND_ROUTING_COMPACTED)
    assert event.message.endswith("(1 links left out)")
    # From scratch, then the link left out in one computation: what a restart replays.
    assert [(s.link, s.usable) for s in h.core.routing_log] == [(out, False)]
    h.settle()
    h.check_matches_fresh_computation()
    before = {name: v.state.digest for name, v in h.core.views.items()}
    h.restart_controller()
    assert {name: v.state.digest for name, v in h.core.views.items()} == before


def _views_after_a_cut(monkeypatch: pytest.MonkeyPatch, floor: int, share: float) -> bool:
    """Whether the switches a cut changed got new state objects (packed), each holding what
    a from-scratch computation holds."""
    monkeypatch.setattr(machine, "PACK_FLOOR_BYTES", floor)
    monkeypatch.setattr(machine, "PACK_SHARE", share)
    h = Harness(LAB)
    h.connect_all()
    before = {name: v.state for name, v in h.core.views.items()}
    digests = {name: v.state.digest for name, v in h.core.views.items()}
    key = sorted(link.key for link in h.core.links())[0]
    h.cut(key)
    # Not at the cut itself, whose pushes must not wait: by a later tick.
    assert all(v.state is before[n] for n, v in h.core.views.items())
    h.settle()
    h.check_matches_fresh_computation()
    changed = [n for n, v in h.core.views.items() if v.state.digest != digests[n]]
    assert changed
    fresh = [n for n in changed if h.core.views[n].state is not before[n]]
    assert fresh in ([], changed), fresh  # all packed, or none
    for name in fresh:
        assert h.core.views[name].index.written == 0  # type: ignore[union-attr]
    return bool(fresh)


def test_a_state_changed_in_place_is_packed_once_enough_was_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A state changed in place keeps what each change replaced until it is packed afresh
    (railfabric.delta.packed), by a tick after the event: with no floor the first change
    makes it due, with the defaults a cut's few hundred bytes do not (a state of the lab is
    ~1 KiB: 8 KiB is the floor)."""
    defaults = machine.PACK_FLOOR_BYTES, machine.PACK_SHARE
    assert _views_after_a_cut(monkeypatch, 0, 0.0)
    assert not _views_after_a_cut(monkeypatch, *defaults)


def test_switches_sent_the_same_deltas_do_not_all_pack_at_one_cut() -> None:
    """A remote cut on ref-100k sends 1,648 ToRs the same ~900-byte delta; their states are
    ~62 KB. Packing one costs ~0.3 ms: all at one cut it would be ~0.5 s, more than twice
    that cut's time, so the name-hashed stretch spreads them."""
    names = [f"tor-r{r}-b{b}" for r in range(1, 9) for b in range(1, 207)]
    size, per_cut = 62_000, 900
    index = {n: StateIndex(state_pb2.DesiredState()) for n in names}
    for i in index.values():
        i.size = size
    due_at: dict[str, int] = {}
    for cut in range(1, 400):
        for name in names:
            if name in due_at:
                continue
            index[name].written += per_cut
            if machine._pack_due(name, state_pb2.DesiredState(), index[name]):
                due_at[name] = cut
    assert len(due_at) == len(names)  # every one within 2x the unstretched share
    per_cut_max = max(Counter(due_at.values()).values())
    assert per_cut_max <= 0.05 * len(names), per_cut_max
