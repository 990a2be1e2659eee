"""Agents' inputs taken a few per turn of the event loop, so an operator's call is not queued
behind thousands of them.

gRPC hands the event loop every completion that arrived since its last turn at once. In a
session storm on ref-100k that is hundreds of agents' Hellos a turn (~1.5 ms each), and each
step of an admin call (accept, read, answer) waits a whole turn: a ListAlarms took 6.7 s, with
gRPC's wake-ups drained (railfabric.grpc_wakeups). With at most `per_turn` agent inputs
decided per turn, the others wait in order and a turn stays near `per_turn` inputs long; the
inputs' throughput is the same.
"""

from __future__ import annotations

import asyncio
import collections

# ~25 ms of Hellos on ref-100k: a few turns of that is what an admin call waits for.
INPUTS_PER_TURN = 16


class Turns:
    """At most `per_turn` callers of `wait()` go on per turn of the event loop; the others
    wait, first come first served. On the event loop only."""

    def __init__(self, per_turn: int = INPUTS_PER_TURN) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be >= 1, got {per_turn}")
        self.per_turn = per_turn
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._granted = 0  # this turn's
        self._next_turn_scheduled = False
        self.waited = 0  # callers that had to wait (the tests read it; no metric does yet)

    async def wait(self) -> None:
        if not self._waiting and self._granted < self.per_turn:
            self._granted += 1
            self._schedule()
            return
        self.waited += 1
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self._schedule()
        await turn  # cancelled with its caller: _next_turn skips it

    def _schedule(self) -> None:
        if not self._next_turn_scheduled:
            self._next_turn_scheduled = True
            # call_soon: after everything ready now, the callers let through included.
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._next_turn_scheduled = False
        self._granted = 0
        while self._waiting and self._granted < self.per_turn:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                self._granted += 1
        if self._waiting or self._granted:
            self._schedule()
