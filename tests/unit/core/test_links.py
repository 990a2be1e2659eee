"""Link state: immediate down, hold-down before up, flap damping (RFC 2439 style)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.core.links import DampingParams, LinkState, LinkTracker, Transition

pytestmark = pytest.mark.unit

S = 1_000_000_000
A, B = ("tor-r0-b0", 3), ("spine-0", 1)


C, D = ("tor-r1-b0", 3), ("spine-0", 2)


def tracker(**params: Any) -> LinkTracker[str]:
    """Both links observed up by both ends at t=0."""
    t = LinkTracker([("L", A, B), ("M", C, D)], DampingParams(**params))
    for end in (A, B, C, D):
        t.report(0, end, up=True)
    assert t.down_links() == []
    return t


def test_a_link_is_unknown_and_unused_until_both_ends_report_carrier() -> None:
    t = LinkTracker([("L", A, B)], DampingParams())
    assert t.state("L") is LinkState.UNKNOWN and not t.usable("L")
    assert t.report(0, A, up=True) == []
    assert t.unobserved_ends("L") == {B}
    # Discovered: usable for the first time since unknown (the core batches these).
    assert t.report(1, B, up=True) == [Transition("L", True, LinkState.UP, discovered=True)]
    assert t.unobserved_ends("L") == frozenset()


def test_a_forgotten_end_makes_an_up_link_unknown_until_it_reports_again() -> None:
    t = tracker(hold_down_ns=2 * S)
    assert t.forget(S, B) == [Transition("L", False, LinkState.UNKNOWN)]
    assert t.forget(S, B) == []  # already forgotten
    assert t.report(2 * S, A, up=True) == []  # the other end alone proves nothing
    assert t.report(3 * S, B, up=True) == [Transition("L", True, LinkState.UP, discovered=True)]
    assert t.usable("M")


def test_a_held_down_link_whose_end_is_forgotten_settles_unknown_not_up() -> None:
    t = tracker(hold_down_ns=2 * S)
    t.report(S, A, up=False)
    t.report(2 * S, A, up=True)
    assert t.state("L") is LinkState.HOLD_DOWN
    assert t.forget(3 * S, B) == []
    assert t.tick(4 * S) == []
    assert t.state("L") is LinkState.UNKNOWN
    assert t.report(5 * S, B, up=True) == [Transition("L", True, LinkState.UP, discovered=True)]


def test_either_end_down_takes_the_link_out_at_once_and_only_once() -> None:
    t = tracker()
    assert t.report(10, A, up=False) == [Transition("L", False, LinkState.DOWN)]
    assert t.report(11, B, up=False) == []  # the peer's report changes nothing more
    assert t.down_links() == ["L"]
    assert t.usable("M")


def test_link_returns_only_after_both_ends_are_up_for_the_hold_down() -> None:
    t = tracker(hold_down_ns=2 * S)
    t.report(1, A, up=False)
    t.report(1, B, up=False)
    assert t.report(1 * S, A, up=True) == []
    assert t.state("L") is LinkState.DOWN  # B still has no carrier
    assert t.report(2 * S, B, up=True) == []
    assert t.state("L") is LinkState.HOLD_DOWN
    assert t.next_deadline_ns() == 4 * S
    assert t.tick(4 * S - 1) == []
    # A return after the hold-down is not a discovery.
    assert t.tick(4 * S) == [Transition("L", True, LinkState.UP, discovered=False)]
    assert t.down_links() == []


def test_a_bounce_inside_the_hold_down_restarts_it() -> None:
    t = tracker(hold_down_ns=2 * S)
    t.report(1, A, up=False)
    t.report(1 * S, A, up=True)
    t.report(2 * S, A, up=False)  # inside the hold-down: no new transition, routing never saw up
    assert t.state("L") is LinkState.DOWN
    t.report(3 * S, A, up=True)
    assert t.tick(4 * S) == []
    assert t.tick(5 * S) == [Transition("L", True, LinkState.UP)]
    assert t.flaps("L") == 2


def test_a_flapping_link_is_damped_until_its_penalty_decays_below_reuse() -> None:
    t = tracker(
        hold_down_ns=0, penalty_per_flap=1000, suppress=2500, reuse=1000, half_life_ns=10 * S
    )
    for i in range(3):  # three quick flaps: penalty ~3000 > suppress
        t.report(i * S, A, up=False)
        t.report(i * S, A, up=True)
    assert t.state("L") is LinkState.DAMPED
    deadline = t.next_deadline_ns()
    assert deadline is not None
    assert t.tick(deadline - S) == []
    assert t.tick(deadline) == [Transition("L", True, LinkState.UP)]
    # penalty ~2730 at t=2s decays to 1000 after 10s * log2(2.73) ~= 14.5 s
    assert 15 * S < deadline < 18 * S


def test_unknown_ports_and_bad_parameters_are_refused_with_names() -> None:
    t = tracker()
    with pytest.raises(KeyError, match="spine-9:4 is not on any link"):
        t.report(0, ("spine-9", 4), up=False)
    with pytest.raises(ValueError, match="reuse < suppress"):
        DampingParams(suppress=100, reuse=200)
    with pytest.raises(ValueError, match="two links"):
        LinkTracker([("L", A, B), ("M", A, ("x", 1))], DampingParams())


_KEYS = ("L", "M", "N")
_ENDS = {"L": (A, B), "M": (C, D), "N": (("tor-r2-b0", 3), ("spine-0", 3))}
_END_LIST = [end for key in _KEYS for end in _ENDS[key]]


class DownLinksMachine(RuleBasedStateMachine):
    """The links routing must avoid are kept with every change of state (LinkTracker._down):
    over random reports, forgets, ticks, restores and intent reloads (carry), they are
    always what every link's own state says, in the fabric's order. And each link's down
    and unobserved ends are what its ends last said (a model of the reports, kept here)."""

    def __init__(self) -> None:
        super().__init__()
        self.params = DampingParams(hold_down_ns=2 * S)
        self.t: LinkTracker[str] = self._new()
        self.now = 0
        # Each end's last report (True: carrier), None when never reported or forgotten.
        self.heard: dict[tuple[str, int], bool | None] = dict.fromkeys(_END_LIST)

    def _new(self) -> LinkTracker[str]:
        return LinkTracker([(k, *_ENDS[k]) for k in _KEYS], self.params)

    @rule(end=st.sampled_from(_END_LIST), up=st.booleans(), dt=st.integers(0, 3 * S))
    def report(self, end: tuple[str, int], up: bool, dt: int) -> None:
        self.now += dt
        self.t.report(self.now, end, up)
        self.heard[end] = up

    @rule(end=st.sampled_from(_END_LIST))
    def forget(self, end: tuple[str, int]) -> None:
        self.t.forget(self.now, end)
        self.heard[end] = None

    @rule(dt=st.integers(0, 60 * S))
    def tick(self, dt: int) -> None:
        self.now += dt
        self.t.tick(self.now)

    @rule(key=st.sampled_from(_KEYS), state=st.sampled_from(list(LinkState)))
    def restore(self, key: str, state: LinkState) -> None:
        self.t.restore(key, state, self.now, 0)
        for end in _ENDS[key]:
            if state in (LinkState.DOWN, LinkState.UP):
                self.heard[end] = state is LinkState.UP
            elif state is not LinkState.UNKNOWN and self.heard[end] is None:
                self.heard[end] = True  # held down or damped: both ends observed, as up

    @rule()
    def reload(self) -> None:
        fresh = self._new()
        fresh.carry(self.t)
        self.t = fresh

    @invariant()
    def down_is_every_links_own_state(self) -> None:
        expected = [k for k in _KEYS if not self.t.usable(k)]
        assert self.t.down_links() == expected
        assert self.t.down_set() == set(expected)
        assert self.t.all_usable() == (not expected)

    @invariant()
    def ends_are_what_they_last_said(self) -> None:
        for key in _KEYS:
            ends = _ENDS[key]
            assert self.t.down_ends(key) == {e for e in ends if self.heard[e] is False}, key
            assert self.t.unobserved_ends(key) == {e for e in ends if self.heard[e] is None}, key


TestDownLinks = DownLinksMachine.TestCase
TestDownLinks.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
