"""The core's planner: a rebuild's planner shares what the intent alone decides."""

from __future__ import annotations

import pytest

from controller.daemon.core_planner import CorePlanner, load_planner
from controller.intent import load_fabric
from tests.unit.core.harness import LAB

pytestmark = pytest.mark.unit


def test_a_fresh_planner_shares_the_intents_links_switches_and_compiled_fabric() -> None:
    """The links, switches and compiled fabric are the same objects (a rebuild's planner
    made its own: 44.6 MiB on ref-100k), while routing is its own: a link taken out of one
    does not reach the other."""
    planner = load_planner(LAB)
    routing = planner.routing  # compiles the fabric
    names = [sw.name for sw in planner.switches()]
    before = {name: planner.state_parts(name) for name in names}
    fresh = planner.fresh()
    assert fresh.links() is planner.links() and fresh.switches() is planner.switches()
    assert fresh.routing is not routing and fresh.routing.topo is routing.topo
    changed = fresh.set_links_usable([(planner.links()[0].key, False)])
    assert changed, "taking a link out changed no switch"
    assert planner.routing is routing
    assert {name: planner.state_parts(name) for name in names} == before


def test_links_are_shared_only_with_a_planner_of_the_same_intent() -> None:
    planner = load_planner(LAB)
    with pytest.raises(ValueError, match="same intent"):
        CorePlanner(load_fabric(LAB), like=planner)
