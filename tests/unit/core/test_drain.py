"""Operators' drains in the decision core, by name: what a drain names, the what-if check and
its refusal, make before break in both directions, and drains across carrier changes,
restarts and reloads. The random interleavings are in test_machine_model.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.core import drains
from controller.core.drains import DrainConflict, DrainError, DrainNotFound, DrainRefused
from controller.core.effects import Level, Log, Persist
from controller.core.planner import Isolation
from controller.core.records import DrainCleared, DrainRecord
from controller.intent import load_fabric, to_explicit_yaml
from railfabric.v1 import admin_pb2
from tests.unit.core.harness import LAB, Harness, S, forwarding

pytestmark = pytest.mark.unit

FABRICS = Path(__file__).resolve().parent / "fabrics"
WHO = "operator/alice"
# The lab: ToR port 3 goes to spine-p1-1, port 4 to spine-p1-2 (ports 1-2: servers).
LINK = "tor-r1-b1:3"
KEY = "tor-r1-b1:3--spine-p1-1:1"


def connected(fabric: Path = LAB) -> Harness:
    h = Harness(fabric)
    h.connect_all()
    h.take_pushed()
    h.core.events.clear()
    return h


def drain(h: Harness, target: str, force: bool = False, reason: str = "optic swap") -> None:
    h.run(h.core.drain(target, WHO, reason, force, h.now))


def undrain(h: Harness, target: str) -> None:
    h.run(h.core.undrain(target, WHO, "done", h.now))


def uses(h: Harness, switch: str, port: int) -> bool:
    return any(port in ports for ports in forwarding(h.core.views[switch].state).values())


def kinds(h: Harness) -> list[str]:
    return [e.kind for e in h.core.events]


def test_a_drained_link_leaves_routing_with_who_when_and_why() -> None:
    h = connected()
    drain(h, LINK)
    h.settle()
    assert h.core.drains[KEY] == DrainRecord(
        KEY, WHO, "optic swap", h.core.drains[KEY].wall_ns, LINK, False
    )
    assert not uses(h, "tor-r1-b1", 3) and not uses(h, "spine-p1-1", 1)
    assert uses(h, "tor-r1-b1", 4)
    h.check_matches_fresh_computation()  # = from scratch with the drained link out
    assert h.core.tracker.usable(KEY) and not h.core.routable(KEY)
    assert h.core.link_reason(KEY).startswith(f"drained by {WHO} at ")
    assert h.core.link_reason(KEY).endswith(" UTC: optic swap")
    assert KEY in h.core.unroutable_links()
    event = next(e for e in h.core.events if e.type == admin_pb2.EVENT_KIND_DRAIN)
    assert event.kind == "drain" and (event.switch_name, event.port) == ("tor-r1-b1", 3)
    assert (event.drain.who, event.drain.reason, event.drain.target) == (WHO, "optic swap", LINK)
    assert f"drained by {WHO}: optic swap" in event.message
    change = next(e for e in h.core.events if e.type == admin_pb2.EVENT_KIND_LINK_DOWN)
    assert change.link_change.drain and change.link_change.link == KEY
    # The path prediction says why the hop is not taken.
    reply = h.core.predict_path(
        admin_pb2.PredictPathRequest(src_ip="10.0.0.2", dst_ip="10.0.0.18", sport=49152)
    )
    avoided = {a.port: a.reason for a in reply.hops[0].avoided}
    assert avoided[3].startswith(f"drained by {WHO}")


def test_a_drain_moves_the_traffic_first_and_takes_the_drained_switch_out_after() -> None:
    """Make before break: every switch but the link's upper end (the spine it drains) gets
    its delta at once; the spine keeps routing down the link until those applied."""
    h = connected()
    drain(h, LINK)
    first = h.take_pushed()
    assert "spine-p1-1" not in first
    assert {"tor-r1-b1", "tor-r2-b1", "tor-r1-b2", "tor-r2-b2"} <= set(first)
    assert uses(h, "spine-p1-1", 1)  # held back: traffic still arriving there goes down
    assert h.decided_state("spine-p1-1") is not h.core.views["spine-p1-1"].state
    h.check_no_route_over_drained_links()  # what is decided uses the link nowhere
    for name in first[:-1]:
        h.ack(name)
        assert h.take_pushed() == []
    h.ack(first[-1])
    assert h.take_pushed() == ["spine-p1-1"]
    assert not uses(h, "spine-p1-1", 1)


def test_a_failure_is_left_by_everyone_at_once_and_flushes_a_held_drain() -> None:
    h = connected()
    h.cut("tor-r1-b1:4--spine-p1-2:1")
    assert "spine-p1-2" in h.take_pushed()  # not planned: nobody waits
    h.settle()
    h.take_pushed()
    # A drain's held removal on a link whose carrier then goes leaves at once.
    drain(h, "tor-r2-b1:3", force=True)
    assert "spine-p1-1" not in h.take_pushed()
    h.cut("tor-r2-b1:3--spine-p1-1:2")
    assert "spine-p1-1" in h.take_pushed()
    h.check_no_route_over_unusable_links()


def test_undrain_readies_the_drained_switch_first_without_a_hold_down() -> None:
    h = connected()
    drain(h, LINK)
    h.settle()
    h.take_pushed()
    h.core.events.clear()
    undrain(h, "spine-p1-1:1")  # either end names the link
    assert h.take_pushed() == ["spine-p1-1"]
    assert h.core.routable(KEY) and not h.core.drains
    h.ack("spine-p1-1")
    assert "tor-r1-b1" in h.take_pushed()
    h.settle()
    assert uses(h, "tor-r1-b1", 3)
    h.check_matches_fresh_computation()
    assert kinds(h)[0] == "undrain"
    undone = next(e for e in h.core.events if e.type == admin_pb2.EVENT_KIND_UNDRAIN)
    assert undone.drain.who == WHO and undone.drain.reason == "done"


def test_a_drain_that_cuts_a_tor_pair_is_refused_naming_one_unless_forced() -> None:
    h = connected()
    drain(h, LINK)
    before = {n: v.state.generation for n, v in h.core.views.items()}
    iso = h.core.drain_isolation([h.core.plan_drain("tor-r1-b1:4").links[0]])
    assert (iso.tor_pairs, iso.nic_pairs) == (3, 12)  # 2 NICs on each ToR
    with pytest.raises(DrainRefused) as refused:
        drain(h, "tor-r1-b1:4")
    text = str(refused.value)
    assert text.startswith("draining tor-r1-b1:4 would leave tor-r1-b1 without a path to tor-")
    assert "srv-b1-s1/nic1" in text and "2 other ToR pairs" in text
    assert "12 server NIC pairs" in text and "--force" in text
    assert list(h.core.drains) == [KEY]  # nothing changed
    assert {n: v.state.generation for n, v in h.core.views.items()} == before
    effects = h.core.drain("tor-r1-b1:4", WHO, "", True, h.now)
    warned = [e.text for e in effects if isinstance(e, Log) and e.level == Level.WARNING]
    assert warned and warned[0].startswith(f"forced by {WHO}: draining tor-r1-b1:4")
    h.run(effects)
    assert h.core.drains["tor-r1-b1:4--spine-p1-2:1"].forced
    h.settle()
    h.check_matches_fresh_computation()


def test_the_what_if_check_is_pure_and_counts_only_pairs_that_reach_each_other_now() -> None:
    h = connected()
    states = {n: v.state for n, v in h.core.views.items()}
    assert h.core.drain_isolation(h.core.plan_drain("tor-r1-b1").links).tor_pairs == 3
    assert not h.core.drain_isolation(h.core.plan_drain("spine-p1-1").links)
    assert {n: v.state for n, v in h.core.views.items()} == states
    assert forwarding(states["tor-r2-b1"]) == h.fresh_forwarding()["tor-r2-b1"]
    # tor-r1-b1 cut off by failures already: draining its last links cuts nothing more.
    h.cut("tor-r1-b1:3--spine-p1-1:1")
    h.cut("tor-r1-b1:4--spine-p1-2:1")
    assert not h.core.drain_isolation(h.core.plan_drain("tor-r1-b1").links)
    drain(h, "tor-r1-b1")
    assert len(h.core.drains) == 2


def test_a_whole_switch_drains_and_a_second_spine_is_refused() -> None:
    h = connected()
    drain(h, "spine-p1-1", reason="firmware")
    first = h.take_pushed()
    assert "spine-p1-1" not in first and len(set(first)) == 4
    for tor in sorted(set(first))[:-1]:
        h.ack(tor)
        assert h.take_pushed() == []  # the spine waits for every link's traffic to move
    h.ack(sorted(set(first))[-1])
    assert set(h.take_pushed()) == {"spine-p1-1"}
    h.settle()
    assert not any(uses(h, tor, 3) for tor in ("tor-r1-b1", "tor-r2-b1", "tor-r1-b2"))
    assert {d.target for d in h.core.drains.values()} == {"spine-p1-1"}
    assert len(h.core.drains) == 4
    h.check_matches_fresh_computation()
    with pytest.raises(DrainRefused, match="would leave tor-r1-b1 without a path to tor-r2-b1"):
        drain(h, "spine-p1-2")
    h.take_pushed()
    undrain(h, "spine-p1-1")
    assert set(h.take_pushed()) == {"spine-p1-1"}  # ready first, then the ToRs use it
    h.ack("spine-p1-1")
    assert set(h.take_pushed()) == {"tor-r1-b1", "tor-r2-b1", "tor-r1-b2", "tor-r2-b2"}
    h.settle()
    assert not h.core.drains
    h.check_matches_fresh_computation()


def test_draining_twice_or_undraining_what_is_not_drained_is_an_error() -> None:
    h = connected()
    with pytest.raises(DrainConflict, match=r"tor-r1-b1:3 \(.*\) is not drained"):
        undrain(h, LINK)
    with pytest.raises(DrainConflict, match="no link of spine-p1-1 is drained"):
        undrain(h, "spine-p1-1")
    drain(h, LINK)
    with pytest.raises(DrainConflict, match=f"is drained already \\(drained by {WHO} at "):
        drain(h, "spine-p1-1:1")
    # A switch takes the links left to drain, and says which were drained already.
    plan = h.core.plan_drain("spine-p1-1")
    assert KEY in plan.unchanged and len(plan.links) == 3
    drain(h, "spine-p1-1")
    with pytest.raises(DrainConflict, match="every link of spine-p1-1 is drained already"):
        drain(h, "spine-p1-1")
    # Undraining the switch returns every one of its links, whoever drained them.
    assert len(h.core.plan_drain("spine-p1-1", undrain=True).links) == 4


def test_unknown_targets_name_the_closest_switch_or_port() -> None:
    h = connected()
    with pytest.raises(DrainNotFound, match="unknown switch 'spine-p1-3'; did you mean"):
        h.core.plan_drain("spine-p1-3")
    with pytest.raises(DrainNotFound, match="unknown switch 'tor-r1-b7'; did you mean"):
        h.core.plan_drain("tor-r1-b7:3")
    with pytest.raises(
        DrainNotFound,
        match=r"tor-r1-b1 has no switch-to-switch link on port 9; its links are on "
        r"tor-r1-b1:3, tor-r1-b1:4; did you mean 'tor-r1-b1:4'\?",
    ):
        h.core.plan_drain("tor-r1-b1:9")
    with pytest.raises(DrainNotFound, match=r"tor-r1-b1:1 is a server port \(srv-b1-s1/nic1\)"):
        h.core.plan_drain("tor-r1-b1:1")
    with pytest.raises(DrainError, match="name a switch"):
        h.core.plan_drain(" ")
    assert not h.core.drains


def test_a_drained_link_stays_out_through_carrier_changes_and_returns_only_when_up() -> None:
    h = connected()
    drain(h, LINK)
    h.settle()
    h.take_pushed()
    h.cut(KEY)
    assert h.take_pushed() == []  # out of routing already
    h.restore(KEY)
    h.advance(5 * S)
    h.settle()
    assert not h.core.routable(KEY) and not uses(h, "tor-r1-b1", 3)
    h.cut(KEY)
    h.take_pushed()
    undrain(h, LINK)
    assert not h.core.routable(KEY) and h.take_pushed() == []  # its carrier is still out
    h.restore(KEY)
    h.settle()
    assert uses(h, "tor-r1-b1", 3)
    h.check_matches_fresh_computation()


def test_drains_survive_a_restart_and_a_reload_and_persist_as_records() -> None:
    h = connected()
    effects = h.core.drain(LINK, WHO, "optic swap", False, h.now)
    persisted = next(e for e in effects if isinstance(e, Persist))
    assert any(isinstance(r, DrainRecord) and r.link == KEY for r in persisted.records)
    h.run(effects)
    h.settle()
    held = {n: v.state.digest for n, v in h.core.views.items()}
    h.restart_controller()  # asserts the drains came back
    h.settle()
    assert h.core.drains[KEY].who == WHO and not h.core.routable(KEY)
    assert {n: v.state.digest for n, v in h.core.views.items()} == held
    h.reload()
    h.settle()
    assert KEY in h.core.drains
    h.check_matches_fresh_computation()
    effects = h.core.undrain(LINK, WHO, "", h.now)
    persisted = next(e for e in effects if isinstance(e, Persist))
    assert DrainCleared(KEY) in persisted.records
    h.run(effects)
    h.restart_controller()
    assert not h.core.drains


def test_a_reload_without_the_drained_link_drops_its_drain(tmp_path: Path) -> None:
    text = to_explicit_yaml(load_fabric(LAB))
    explicit = tmp_path / "lab.yaml"
    explicit.write_text(text)
    h = connected(explicit)
    drain(h, LINK)
    h.settle()
    cut = tmp_path / "cut.yaml"
    cut.write_text(
        text.replace("- {a: 'tor-r1-b1:3', b: 'spine-p1-1:1', speed: 100G, length_m: 10.0}\n", "")
    )
    h.core.events.clear()
    h.reload(cut)
    assert not h.core.drains
    dropped = next(e for e in h.core.events if e.type == admin_pb2.EVENT_KIND_UNDRAIN)
    assert (
        f"link {KEY} is no longer in the intent: its drain by {WHO} is dropped" == dropped.message
    )


def test_on_three_tiers_the_core_stops_sending_to_the_drained_spine_before_it_moves() -> None:
    """A ToR-spine drain where the spine still reaches the ToR up through the cores: the
    cores drop the spine for that ToR first, so the spine never sends it up into a core
    that would send it back (a loop)."""
    h = connected(FABRICS / "three-tier.yaml")
    tor = "tor-r1-b1"
    key = next(link.key for link in h.core.links() if link.a[0] == tor)
    spine = h.core.planned_link(key).b[0]
    link = h.core.planned_link(key)
    drain(h, f"{link.a[0]}:{link.a[1]}")
    first = h.take_pushed()
    assert spine not in first and any(n.startswith("core") for n in first)
    h.ack_all()
    assert spine in h.take_pushed()
    h.settle()
    h.check_matches_fresh_computation()


def test_refusal_text_names_the_pair_and_the_way_out() -> None:
    iso = Isolation(1, 0, ("a", "b"), ("", ""))
    assert drains.refusal("a:3", iso) == (
        "draining a:3 would leave a without a path to b; drain with force "
        "(railctl drain --force) to take it out anyway"
    )
