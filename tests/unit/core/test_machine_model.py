"""Model-based tests of the decision core: random interleavings of link cuts and returns
(reported by either end, late, or not at all), flaps inside the hold-down, several links at
once, acks late or never, agents leaving and saying Hello again, controller restarts from the
store, intent reloads, computations from scratch taken in steps after they were asked for,
and operators draining and undraining links and whole switches (forced
or not). After every step: no exception and no error logged, every queued message extends its
agent's chain, no switch routes over a link that is not usable, no decided state routes over
a drained link (make before break may still hold the drained switch's removal back), what the
core decided for every switch forwards as a from-scratch computation over the links routing
avoids (drained ones included), drains survive restarts, a drain the what-if check lets
through cuts no ToR pair and one it refuses does, acked agents hold what the controller
believes. At the end, once everything settled: every switch forwards exactly as a
from-scratch computation over the same link states with the drained links taken out, and
holds it.

Sizes: the `ci` hypothesis profile (default) runs 2,000 examples of 50 steps; `make
test-deep` sets HYPOTHESIS_PROFILE=deep for more.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from controller.core import machine
from railfabric.v1 import control_pb2
from tests.unit.core.harness import LAB, Harness, S

pytestmark = pytest.mark.unit

FABRICS = Path(__file__).resolve().parent / "fabrics"

settings.register_profile(
    "ci",
    max_examples=2000,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "deep",
    max_examples=20_000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# 20 s runs past the session grace: absent agents' links become unobserved.
DELAYS = st.sampled_from([1_000_000, 100_000_000, 400_000_000, 600_000_000, 2 * S, 5 * S, 20 * S])


class CoreModel(RuleBasedStateMachine):
    fabric = LAB

    def __init__(self) -> None:
        super().__init__()
        # Compactions often (routing from scratch off the loop: a Rebuild), and taken in
        # some steps later, other inputs between (a_rebuild_ends).
        self.h = Harness(self.fabric, routing_log_limit=3)
        self.h.connect_all()
        self.h.defer_rebuilds = True
        self.links = sorted(link.key for link in self.h.core.links())
        self.ends = sorted(self.h.carrier)
        self.switches = sorted(self.h.agents)

    # -- the physical fabric and what agents report
    @rule(data=st.data())
    def cut(self, data: st.DataObject) -> None:
        self.h.set_carrier(data.draw(st.sampled_from(self.links)), False)

    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self.h.set_carrier(data.draw(st.sampled_from(self.links)), True)

    @rule(data=st.data(), up=st.booleans())
    def two_links_change_together(self, data: st.DataObject, up: bool) -> None:
        a, b = data.draw(st.lists(st.sampled_from(self.links), min_size=2, max_size=2, unique=True))
        for key in (a, b):
            self.h.set_carrier(key, up)
        for key in (a, b):
            link = self.h.core.planned_link(key)
            self.h.report(link.a)
            self.h.report(link.b)

    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        self.h.report(data.draw(st.sampled_from(self.ends)))

    @rule(data=st.data())
    def local_repair(self, data: st.DataObject) -> None:
        """An agent's committed local repair, reported after its PortStatus (or late, after
        the port came back): an event for people, never a routing input."""
        name, port = data.draw(st.sampled_from(self.ends))
        if not self.h.agents[name].connected:
            return
        before = self._decided()
        msg = control_pb2.LocalRepair(port=port, groups_repaired=1, latency_ns=1_000_000)
        self.h.run(self.h.core.local_repair(name, msg, self.h.now))
        assert self._decided() == before

    def _decided(self) -> tuple[int, dict[str, bool], dict[str, int]]:
        """What the core has pushed and decided: pushes, usable links, generations."""
        core = self.h.core
        usable = {key: core.tracker.usable(key) for key in self.links}
        return len(self.h.pushed), usable, {n: v.state.generation for n, v in core.views.items()}

    @rule(dt=DELAYS)
    def advance(self, dt: int) -> None:
        self.h.advance(dt)

    # -- agents
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self.h.ack(data.draw(st.sampled_from(self.switches)))

    @rule()
    def ack_all(self) -> None:
        for name in self.switches:
            self.h.ack(name)

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        self.h.disconnect(data.draw(st.sampled_from(self.switches)))

    @rule(data=st.data())
    def hello(self, data: st.DataObject) -> None:
        """A reconnect, or a Hello mid-session (the agent asks for a snapshot)."""
        self.h.hello(data.draw(st.sampled_from(self.switches)))

    @rule(data=st.data())
    def hello_with_a_partial_port_map(self, data: st.DataObject) -> None:
        """An agent restarted with a port map that lacks some of its ports."""
        name = data.draw(st.sampled_from(self.switches))
        ports = sorted(self.h.core.views[name].ports)
        self.h.hello(name, frozenset(data.draw(st.lists(st.sampled_from(ports), max_size=2))))

    @invariant()
    def no_link_with_an_unobserved_end_is_usable(self) -> None:
        tracker = self.h.core.tracker
        for key in self.links:
            assert not (tracker.usable(key) and tracker.unobserved_ends(key)), key

    # -- operators
    @rule(data=st.data(), force=st.booleans())
    def drain_a_link(self, data: st.DataObject, force: bool) -> None:
        switch, port = data.draw(st.sampled_from(self.ends))
        self.h.drain(f"{switch}:{port}", force)

    @rule(data=st.data(), force=st.booleans())
    def drain_a_switch(self, data: st.DataObject, force: bool) -> None:
        self.h.drain(data.draw(st.sampled_from(self.switches)), force)

    @precondition(lambda self: bool(self.h.core.drains))
    @rule(data=st.data())
    def undrain_a_link(self, data: st.DataObject) -> None:
        d = self.h.core.drains[data.draw(st.sampled_from(sorted(self.h.core.drains)))]
        link = self.h.core.planned_link(d.link)
        end = data.draw(st.sampled_from([link.a, link.b]))
        assert self.h.undrain(f"{end[0]}:{end[1]}")

    @rule(data=st.data())
    def undrain_a_switch(self, data: st.DataObject) -> None:
        self.h.undrain(data.draw(st.sampled_from(self.switches)))

    @invariant()
    def no_route_over_a_drained_link(self) -> None:
        self.h.check_no_route_over_drained_links()

    @invariant()
    def decided_routes_are_a_fresh_computation_without_the_drained_links(self) -> None:
        self.h.check_decided_routes_match_a_fresh_computation()

    # -- the controller
    @precondition(lambda self: self.h.transactions < 10_000)
    @rule()
    def restart_controller(self) -> None:
        self.h.restart_controller()

    @rule()
    def reload_intent(self) -> None:
        self.h.reload()

    @precondition(lambda self: bool(self.h.rebuilds))
    @rule()
    def a_rebuild_ends(self) -> None:
        """A computation from scratch asked for some steps ago is taken in."""
        self.h.finish_rebuild()

    @invariant()
    def nothing_logged_as_an_error(self) -> None:
        self.h.check_no_error()

    @invariant()
    def no_route_over_an_unusable_link(self) -> None:
        self.h.check_no_route_over_unusable_links()

    @invariant()
    def acked_agents_hold_what_the_controller_believes(self) -> None:
        self.h.check_acked_hold_what_the_controller_believes()

    def teardown(self) -> None:
        self.h.settle()
        self.h.check_matches_fresh_computation()


class PackedOftenModel(CoreModel):
    """The lab fabric with each state packed after every change applied to it in place
    (railfabric.delta.packed; by default after a share of its size was written): what the
    core decides is the same, packed or not."""

    def __init__(self) -> None:
        self._limits = machine.PACK_FLOOR_BYTES, machine.PACK_SHARE
        machine.PACK_FLOOR_BYTES, machine.PACK_SHARE = 0, 0.0
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            machine.PACK_FLOOR_BYTES, machine.PACK_SHARE = self._limits


class ThreeTierModel(CoreModel):
    fabric = FABRICS / "three-tier.yaml"


class PodsModel(CoreModel):
    fabric = FABRICS / "pods.yaml"


# The lab fabric carries most of the budget; the larger shapes a share each.
TestLabFabric = CoreModel.TestCase
TestLabFabric.settings = PROFILE
TestThreeTier = ThreeTierModel.TestCase
TestThreeTier.settings = settings(PROFILE, max_examples=max(50, PROFILE.max_examples // 20))
TestPackedOften = PackedOftenModel.TestCase
TestPackedOften.settings = settings(PROFILE, max_examples=max(50, PROFILE.max_examples // 10))
TestPods = PodsModel.TestCase
TestPods.settings = settings(PROFILE, max_examples=max(50, PROFILE.max_examples // 20))
