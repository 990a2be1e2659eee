"""`railctl diff` and the reload guard's figures: an intent against the running one, routes
compared as port sets under today's unroutable links."""

from __future__ import annotations

import pytest

from controller.daemon import intent_diff, reloads
from controller.daemon.core_planner import CorePlanner
from controller.intent import load_fabric, to_explicit_yaml
from controller.yamlnodes import IntentError
from railfabric.v1 import control_pb2
from tests.unit.core.harness import LAB, Harness

pytestmark = pytest.mark.unit

CABLE = "- {a: 'tor-r1-b1:3', b: 'spine-p1-1:1', speed: 100G, length_m: 10.0}\n"


def connected() -> Harness:
    h = Harness(LAB)
    h.connect_all()
    return h


def planner(text: str) -> CorePlanner:
    return reloads.prepare(reloads.load_text(text, "new.yaml"), "lab-2rail", "new.yaml")


def test_the_running_intent_against_itself_changes_nothing() -> None:
    h = connected()
    reply = intent_diff.diff(intent_diff.running(h.core), planner(LAB.read_text()))
    assert reply.fabric_name == "lab-2rail"
    assert not (reply.switches or reply.links_added or reply.links_removed)
    assert reply.routes_installed == sum(len(v.state.routes) for v in h.core.views.values())
    assert (reply.routes_added, reply.routes_withdrawn, reply.routes_changed) == (0, 0, 0)
    assert intent_diff.withdraw_share(reply) == 0.0


def test_a_removed_cable_shows_as_a_link_and_the_routes_it_moves() -> None:
    h = connected()
    text = to_explicit_yaml(load_fabric(LAB))
    assert CABLE in text
    reply = intent_diff.diff(intent_diff.running(h.core), planner(text.replace(CABLE, "")))
    assert list(reply.links_removed) == ["tor-r1-b1:3--spine-p1-1:1"]
    assert not reply.links_added and not reply.switches_removed
    by_switch = {sw.switch_name: sw for sw in reply.switches}
    # spine-p1-1 can no longer reach tor-r1-b1's prefix: withdrawn; the ToRs lose a port.
    spine = by_switch["spine-p1-1"]
    assert [(c.prefix.length, list(c.old_ports), list(c.new_ports)) for c in spine.removed] == [
        (29, [1], [])
    ]
    tor = by_switch["tor-r2-b1"]
    assert any(list(c.old_ports) == [3, 4] and list(c.new_ports) == [4] for c in tor.changed)
    assert reply.routes_withdrawn == 1
    assert intent_diff.withdraw_share(reply) == 1 / reply.routes_installed


def test_the_new_side_keeps_todays_drained_and_unusable_links_out() -> None:
    h = connected()
    h.run(h.core.drain("tor-r1-b1:3", "operator/tests", "", False, h.now))
    h.settle()
    reply = intent_diff.diff(intent_diff.running(h.core), planner(LAB.read_text()))
    assert not reply.switches  # the drained link is out on both sides


def test_a_file_of_another_fabric_or_that_does_not_load_is_refused_as_a_reload_would() -> None:
    with pytest.raises(IntentError, match=r"new.yaml: name: the file is fabric 'x'"):
        planner(LAB.read_text().replace("name: lab-2rail", "name: x"))
    with pytest.raises(IntentError, match=r"new.yaml:\d+: .*rialz"):
        planner(LAB.read_text().replace("rails: 2", "rails: 2\nrialz: 3"))


def test_the_running_side_is_what_the_core_held_when_taken() -> None:
    """The diff runs off the loop while the core goes on applying deltas to its states in
    place: what `running` took must not move with them."""
    h = connected()
    run = intent_diff.running(h.core)
    h.run(h.core.port_status("tor-r1-b1", control_pb2.PortStatus(port=3, up=False), h.now))
    reply = intent_diff.diff(run, planner(LAB.read_text()))
    assert not reply.switches, "the running side saw the cut made after it was taken"
    assert not reply.links_added and not reply.links_removed
