"""A session's outbox coalesces instead of dropping the session (controller.daemon.outbox):
over random interleavings of the core's pushes and the agent's reads, an agent that applies
what it gets never meets a delta that does not follow its state, always holds exactly the
core's state of the generation it is at, ends at the core's head, and the outbox stays
bounded. The reference is the core's own history: the content of every generation."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from controller.core.effects import StateWire
from controller.daemon.outbox import Closed, Outbox
from railfabric.v1 import control_pb2, state_pb2

pytestmark = pytest.mark.unit

SIZE = 4


def _state(generation: int, content: frozenset[int]) -> state_pb2.DesiredState:
    state = state_pb2.DesiredState(switch_name="tor", generation=generation)
    for item in sorted(content):
        state.routes.add(group_id=item)
    return state


def _take(outbox: Outbox) -> control_pb2.ControllerMessage:
    """The next message as the agent parses it (snapshots leave as their wire)."""
    msg = asyncio.run(asyncio.wait_for(outbox.get(), 5))
    if isinstance(msg, StateWire):
        return control_pb2.ControllerMessage.FromString(msg.with_term(0))
    return msg


class Coalescing(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # The core: its head generation and the content of every generation it made.
        self.head = 1
        self.history = {1: frozenset[int]()}
        self.outbox = Outbox(
            lambda: StateWire.of(_state(self.head, self.history[self.head])), size=SIZE
        )
        self.outbox.put(StateWire.of(_state(1, self.history[1])))
        # The agent: the generation and content it holds (none yet).
        self.generation = 0
        self.content: frozenset[int] = frozenset()
        self.reads_queued = 0

    @rule(add=st.booleans())
    def change(self, add: bool) -> None:
        """The core extends the chain by one delta (adds or removes one object)."""
        before = self.history[self.head]
        delta = state_pb2.StateDelta(
            switch_name="tor", from_generation=self.head, to_generation=self.head + 1
        )
        if add or not before:
            item = self.head + 1
            delta.upsert_routes.add(group_id=item)
            after = before | {item}
        else:
            item = min(before)
            delta.delete_routes.add(address=item)
            after = before - {item}
        self.head += 1
        self.history[self.head] = after
        self.outbox.put(control_pb2.ControllerMessage(state_delta=delta))

    @rule()
    def snapshot(self) -> None:
        """The core sends the whole state (the agent said Hello again)."""
        self.outbox.put(StateWire.of(_state(self.head, self.history[self.head])))

    @rule()
    def read_tables(self) -> None:
        self.reads_queued += 1
        self.outbox.put(
            control_pb2.ControllerMessage(read_tables=control_pb2.ReadTables(request_id=1))
        )

    @precondition(lambda self: len(self.outbox) > 0)
    @rule()
    def agent_reads(self) -> None:
        self._apply(_take(self.outbox))

    def _apply(self, msg: control_pb2.ControllerMessage) -> None:
        kind = msg.WhichOneof("msg")
        if kind == "read_tables":
            self.reads_queued -= 1
        elif kind == "desired_state":
            self.generation = msg.desired_state.generation
            self.content = frozenset(r.group_id for r in msg.desired_state.routes)
        else:
            delta = msg.state_delta
            assert delta.from_generation == self.generation, "a delta that does not follow"
            added = {r.group_id for r in delta.upsert_routes}
            removed = {p.address for p in delta.delete_routes}
            self.content = (self.content - removed) | added
            self.generation = delta.to_generation

    @invariant()
    def agent_holds_a_state_the_core_made(self) -> None:
        if self.generation:
            assert self.content == self.history[self.generation]

    @invariant()
    def bounded(self) -> None:
        # State messages beyond SIZE coalesce; a snapshot or resync may sit on top of them.
        assert len(self.outbox) <= SIZE + 1 + self.reads_queued

    def teardown(self) -> None:
        while len(self.outbox):
            self._apply(_take(self.outbox))
        assert self.generation == self.head
        assert self.reads_queued == 0, "a ReadTables was dropped"


TestCoalescing = Coalescing.TestCase
TestCoalescing.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


def test_a_slow_agent_gets_the_head_in_one_snapshot() -> None:
    head = {"generation": 1}
    outbox = Outbox(
        lambda: StateWire.of(state_pb2.DesiredState(generation=head["generation"])), size=3
    )
    for g in range(1, 101):
        head["generation"] = g + 1
        outbox.put(
            control_pb2.ControllerMessage(
                state_delta=state_pb2.StateDelta(from_generation=g, to_generation=g + 1)
            )
        )
    sent = []
    while len(outbox):
        sent.append(_take(outbox))
    assert sent[-1].desired_state.generation == 101
    assert len(sent) <= 4
    assert outbox.coalesced >= 96


def test_closed_outbox_says_why_and_takes_nothing_more() -> None:
    outbox = Outbox(lambda: None)
    outbox.put(control_pb2.ControllerMessage(read_tables=control_pb2.ReadTables(request_id=7)))
    outbox.close("replaced by a newer session")
    outbox.put(control_pb2.ControllerMessage(read_tables=control_pb2.ReadTables(request_id=8)))
    with pytest.raises(Closed, match="replaced by a newer session"):
        _take(outbox)
    assert len(outbox) == 0


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="outbox size must be >= 1"):
        Outbox(lambda: None, size=0)


@pytest.mark.parametrize("term", [0, 1, 2**40])
def test_a_snapshot_leaves_as_the_message_it_stands_for(term: int) -> None:
    state = _state(7, frozenset({3, 1, 2}))
    state.digest = "v2:ab"
    sent = control_pb2.ControllerMessage.FromString(StateWire.of(state).with_term(term))
    assert sent == control_pb2.ControllerMessage(desired_state=state, term=term)
