"""Agents' inputs a few per turn of the event loop (controller.daemon.turns): never more than
twice `per_turn` in one turn (the ones let through plus the ones that found room), first come
first served, and a caller that gave up takes nobody's place."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from controller.daemon.turns import Turns
from tests.loop_turns import TurnCounter

pytestmark = pytest.mark.unit


async def test_a_burst_goes_on_a_few_per_turn_in_order() -> None:
    turns, counter = Turns(per_turn=4), TurnCounter()
    went: list[tuple[int, int]] = []  # (caller, turn)

    async def caller(i: int) -> None:
        await turns.wait()
        went.append((i, counter.n))

    # As gRPC wakes them: all in one turn.
    await asyncio.gather(*(caller(i) for i in range(50)))
    counter.stop()
    assert [i for i, _ in went] == list(range(50))
    per_turn = Counter(turn for _, turn in went)
    assert max(per_turn.values()) <= 2 * turns.per_turn
    assert len(per_turn) >= 50 // (2 * turns.per_turn)
    assert turns.waited == 50 - turns.per_turn  # the first turn's room, then the queue


async def test_a_caller_that_gave_up_takes_no_place() -> None:
    turns = Turns(per_turn=1)
    first, gone, kept = (asyncio.create_task(turns.wait()) for _ in range(3))
    await asyncio.sleep(0)  # all three asked in one turn: the first went on, two wait
    assert first.done() and not gone.done() and not kept.done()
    gone.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert gone.cancelled() and kept.done() and not kept.cancelled()
    assert turns.waited == 2


async def test_without_a_queue_a_caller_does_not_wait() -> None:
    turns = Turns(per_turn=2)
    await turns.wait()
    await turns.wait()
    assert turns.waited == 0


def test_per_turn_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="per_turn must be >= 1"):
        Turns(per_turn=0)
