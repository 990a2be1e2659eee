"""The runner's delivery of pushes: in order; with the embedded store at once, with a
replicated one after their records are durable (a record that could not be written steps the
leader down and sends nothing); never while held (a leader whose lease is overdue) or after a
halt."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import cast

import pytest

from controller.core.effects import Effect, Persist, Push, Rebuild, StateWire
from controller.core.machine import DecisionCore
from controller.core.rebuild import Rebuilt
from controller.core.records import Meta, Record, RoutingReset
from controller.daemon.runner import PUSHES_PER_TURN, Runner
from railfabric.v1 import control_pb2
from tests.loop_turns import TurnCounter

pytestmark = pytest.mark.unit


class Writer:
    """Durability decided by the test: each submit's future, in order."""

    def __init__(self) -> None:
        self.futures: list[concurrent.futures.Future[bool]] = []

    def submit(self, records: Sequence[Record]) -> concurrent.futures.Future[bool]:
        self.futures.append(concurrent.futures.Future())
        return self.futures[-1]


class Outlet:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def send(self, switch: str, msg: control_pb2.ControllerMessage | StateWire) -> None:
        assert isinstance(msg, control_pb2.ControllerMessage)
        self.sent.append((switch, msg.term))

    def close(self, switch: str, reason: str) -> None:
        raise AssertionError("no session is closed here")


def push(switch: str, n: int) -> Push:
    return Push(switch, control_pb2.ControllerMessage(term=n))


@pytest.fixture
async def running() -> AsyncIterator[tuple[Runner, Writer, Outlet]]:
    writer, outlet = Writer(), Outlet()
    # The core is not reached by apply(): pushes and records are given as effects.
    runner = Runner(cast(DecisionCore, None), writer, outlet)
    task = asyncio.create_task(runner.deliver())
    yield runner, writer, outlet
    task.cancel()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_held_pushes_wait_for_the_release_then_leave_in_order(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    runner, writer, outlet = running
    runner.apply([push("a", 1)])
    await settle()
    assert outlet.sent == [("a", 1)]
    # Held from another thread, as the lease keeper does.
    tokens: list[int] = []
    holder = threading.Thread(target=lambda: tokens.append(runner.hold()))
    holder.start()
    holder.join()
    runner.apply([push("b", 2)])
    runner.apply([Persist(()), push("c", 3)])
    writer.futures[-1].set_result(True)
    await settle()
    assert outlet.sent == [("a", 1)], "a push left while held"
    runner.release(tokens[0])
    await settle()
    assert outlet.sent == [("a", 1), ("b", 2), ("c", 3)]


async def test_a_large_input_leaves_a_slice_per_turn_in_order_and_stops_at_a_hold(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    """4,672 full states at once must not hold the loop: the pushes of one input leave
    PUSHES_PER_TURN per turn (the sessions send each slice and calls are served between);
    a hold taken between two slices keeps the rest back until it is released."""
    runner, _, outlet = running
    turn = TurnCounter()
    turns: list[int] = []
    send = outlet.send

    def counted(switch: str, msg: control_pb2.ControllerMessage | StateWire) -> None:
        turns.append(turn.n)
        send(switch, msg)

    outlet.send = counted  # type: ignore[method-assign]
    n = 3 * PUSHES_PER_TURN + 5
    runner.apply([push(f"s{i}", i) for i in range(n)])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    token = runner.hold()  # after at least one slice, before the last
    await settle()
    held_at = len(outlet.sent)
    assert 0 < held_at < n
    assert held_at % PUSHES_PER_TURN == 0  # a slice is never split by a hold
    runner.release(token)
    await settle()
    turn.stop()
    assert outlet.sent == [(f"s{i}", i) for i in range(n)]
    per_turn = Counter(turns)
    assert max(per_turn.values()) == PUSHES_PER_TURN
    assert len(per_turn) == -(-n // PUSHES_PER_TURN)


async def test_a_release_of_an_older_hold_releases_nothing(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    runner, _, outlet = running
    first = runner.hold()
    second = runner.hold()  # held again before the first release reached the loop
    runner.apply([push("a", 1)])
    runner.release(first)
    await settle()
    assert outlet.sent == []
    runner.release(second)
    await settle()
    assert outlet.sent == [("a", 1)]


async def test_a_halt_while_held_sends_nothing_and_ends_the_wait(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    runner, _, outlet = running
    token = runner.hold()
    runner.apply([push("a", 1)])
    await settle()
    runner.halt()
    # What was queued is handed over (nothing sent): a stop's drain does not hang on the hold.
    await asyncio.wait_for(runner.drain(), 5)
    runner.release(token)
    runner.apply([push("b", 2)])
    await settle()
    assert outlet.sent == []


async def test_with_the_embedded_store_pushes_leave_before_their_records_are_durable(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    runner, writer, outlet = running
    durable = runner.apply([Persist(()), push("a", 1)])
    runner.apply([push("b", 2)])
    await settle()
    assert outlet.sent == [("a", 1), ("b", 2)]
    assert durable is writer.futures[0] and not durable.done()  # callers may still wait on it


async def test_with_a_replicated_store_pushes_wait_for_their_records_in_order() -> None:
    writer, outlet = Writer(), Outlet()
    stepped_down: list[bool] = []
    runner = Runner(
        cast(DecisionCore, None), writer, outlet, on_unwritten=lambda: stepped_down.append(True)
    )
    task = asyncio.create_task(runner.deliver())
    try:
        runner.apply([Persist(()), push("a", 1)])
        runner.apply([push("b", 2)])  # no records of its own: still behind a's
        runner.apply([Persist(()), push("c", 3)])
        await settle()
        assert outlet.sent == []
        writer.futures[0].set_result(True)
        await settle()
        assert outlet.sent == [("a", 1), ("b", 2)]
        writer.futures[1].set_result(False)  # c's records were not written: step down
        await settle()
        assert outlet.sent == [("a", 1), ("b", 2)] and stepped_down == [True]
        assert runner.halted
    finally:
        task.cancel()


async def test_a_routing_rebuild_takes_its_objects_out_of_full_collections(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    """Routing recomputed from scratch (a RoutingReset record) freezes what exists, so full
    collections stop walking the rebuilt states; other records freeze nothing."""
    runner, _, _ = running
    gc.unfreeze()
    try:
        kept = [[n] for n in range(1000)]  # tracked objects that outlive the rebuild
        runner.apply([Persist((Meta("k", "v"),)), push("a", 1)])
        assert gc.get_freeze_count() == 0
        runner.apply([Persist((RoutingReset(), Meta("k", "v"))), push("a", 2)])
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


async def test_every_input_marks_the_time_full_collections_wait_after(
    running: tuple[Runner, Writer, Outlet],
) -> None:
    """railfabric.collector.full_collections waits for a moment without input: the runner
    says when its last one was."""
    runner, _, _ = running
    before = time.monotonic()
    runner.apply([push("a", 1)])
    assert before <= runner.last_input_s <= time.monotonic()


class Body:
    """A push's body that can be watched for being let go (a weak reference to it)."""


class Sink:
    """An outlet that keeps nothing of what it is given."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, switch: str, msg: object) -> None:
        self.sent += 1

    def close(self, switch: str, reason: str) -> None:
        raise AssertionError("no session is closed here")


async def test_a_delivered_input_leaves_nothing_of_its_pushes_behind() -> None:
    """Once an input's pushes are handed to the sessions, the runner holds none of them while
    it waits for the next input: a rebuild pushes every switch a full state (177 MiB of wire
    on ref-100k), and a loop's locals would have kept them until the next delivery."""
    sink = Sink()
    runner = Runner(cast(DecisionCore, None), Writer(), sink)
    task = asyncio.create_task(runner.deliver())
    try:
        bodies = [Body() for _ in range(PUSHES_PER_TURN + 1)]  # more than one slice
        watched = [weakref.ref(b) for b in bodies]
        runner.apply([Push(f"s{i}", cast(StateWire, b)) for i, b in enumerate(bodies)])
        del bodies
        await settle()
        assert sink.sent == PUSHES_PER_TURN + 1
        gc.collect()
        assert [w for w in watched if w() is not None] == []
    finally:
        task.cancel()


class Result:
    """A rebuild job's result that can be watched for being let go."""


class Rebuilding:
    """The core's side of a rebuild: takes the result in, keeps only its token."""

    def __init__(self) -> None:
        self.taken: list[int] = []

    def rebuilt(self, token: int, result: object, now: object) -> list[Effect]:
        self.taken.append(token)
        return []


async def test_a_rebuild_leaves_nothing_of_its_job_or_result_behind() -> None:
    """Once the core has taken a rebuild's result in, the runner holds neither the result
    (every switch's state and wire) nor the job (the routing it replaced): held in a loop's
    locals until the next rebuild, they kept every state's wire (177 MiB on ref-100k)."""
    core = Rebuilding()
    runner = Runner(cast(DecisionCore, core), Writer(), Sink())
    task = asyncio.create_task(runner.rebuilds())
    try:
        made: list[weakref.ref[Result]] = []

        def job() -> Result:
            result = Result()
            made.append(weakref.ref(result))
            return result

        watched_job = weakref.ref(job)
        runner.apply([Rebuild(7, cast(Callable[[], Rebuilt], job))])
        del job
        for _ in range(100):  # the job runs in a thread
            if core.taken:
                break
            await asyncio.sleep(0.01)
        await settle()
        assert core.taken == [7]
        gc.collect()
        assert len(made) == 1 and made[0]() is None and watched_job() is None
    finally:
        task.cancel()
