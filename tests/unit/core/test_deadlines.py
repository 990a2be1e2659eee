"""The core's waiting switches (controller.core.deadlines.Deadlines) against a plain dict: over
random interleavings of setting, moving, dropping and expiring deadlines, the earliest one
and the names due at a time are what a full read of the dict says, and the heap beside it
stays bounded however often the same names are set again."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.core.deadlines import Deadlines

pytestmark = pytest.mark.unit

NAMES = st.sampled_from([f"tor-{i}" for i in range(6)])
TIMES = st.integers(min_value=0, max_value=20)


class Waiting(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.deadlines = Deadlines()
        self.model: dict[str, int] = {}

    @rule(name=NAMES, at=TIMES)
    def set(self, name: str, at: int) -> None:
        self.deadlines.set(name, at)
        self.model[name] = at

    @rule(name=NAMES)
    def discard(self, name: str) -> None:
        self.deadlines.discard(name)
        self.model.pop(name, None)

    @rule(at=TIMES)
    def later_for_all(self, at: int) -> None:
        """What `sessions_open` does: every deadline moves to `at` if that is later."""
        for name, was in list(self.deadlines.items()):
            self.deadlines.set(name, max(was, at))
        self.model = {n: max(was, at) for n, was in self.model.items()}

    @rule(now=TIMES)
    def expire(self, now: int) -> None:
        due = sorted(n for n, at in self.model.items() if at <= now)
        assert self.deadlines.pop_due(now) == due
        for name in due:
            del self.model[name]

    @rule()
    def clear(self) -> None:
        self.deadlines.clear()
        self.model.clear()

    @invariant()
    def agrees_with_a_full_read(self) -> None:
        assert self.deadlines.earliest_ns() == min(self.model.values(), default=None)
        assert dict(self.deadlines.items()) == self.model
        assert len(self.deadlines) == len(self.model)
        assert all(name in self.deadlines for name in self.model)

    @invariant()
    def heap_stays_bounded(self) -> None:
        assert len(self.deadlines._heap) <= 2 * len(self.model) + 65


TestWaiting = Waiting.TestCase
TestWaiting.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


def test_a_name_set_back_to_an_old_deadline_is_due_once() -> None:
    """Its old heap entry and its new one are alike: only one of them may expire it."""
    deadlines = Deadlines()
    deadlines.set("tor-1", 5)
    deadlines.set("tor-1", 9)
    deadlines.set("tor-1", 5)
    assert deadlines.pop_due(5) == ["tor-1"]
    assert deadlines.earliest_ns() is None
    assert deadlines.pop_due(10) == []


def test_moving_one_name_again_and_again_does_not_grow_the_heap() -> None:
    """Stale entries under a live earliest one never reach the top: the heap is rebuilt."""
    deadlines = Deadlines()
    deadlines.set("tor-0", 0)
    for at in range(1, 10_000):
        deadlines.set("tor-1", at)
    assert deadlines.earliest_ns() == 0
    assert len(deadlines._heap) <= 2 * len(deadlines) + 65
    assert deadlines.pop_due(10_000) == ["tor-0", "tor-1"]
