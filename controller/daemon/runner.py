"""The effect runner: the one place the decision core's effects meet the world.

Every input goes through `Runner.input`: the core decides (synchronously, on the event loop),
and the runner applies what it returned, in order. The records of the input go to the store
writer as one transaction (off the event loop). Pushes leave in the order of their inputs.

With the embedded store (SQLite) they leave at once, before their records are durable: a
remote failure's repair does not wait for an fsync (tens to hundreds of ms on a busy disk),
and the embedded store's policy is to keep forwarding from memory when it cannot be written
anyway. A controller that dies in between comes back holding older generations than some
agents applied; their Hellos say so (generation and digest), so those switches are not
converged and get full states (tests/unit/core/test_machine.py).

A replicated store (etcd) has the other policy, because its commit is the leader's fence: an
input's pushes leave only once its records are durable, pushes whose records could not be
written are dropped and `on_unwritten` is called (the daemon steps down: another replica may
lead); later inputs' pushes queue behind, so nothing is reordered by waiting. `halt()`
stops everything at once: no input is decided and nothing more is delivered. `hold()` only
keeps pushes back until `release()`: a leader whose lease refresh is overdue (etcd electing a
leader of its own) must not push, and may lead on once etcd answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import ParamSpec, Protocol

from controller.core.clock import Now
from controller.core.effects import (
    CloseSession,
    Effect,
    Log,
    Persist,
    Push,
    Rebuild,
    Schedule,
)
from controller.core.machine import DecisionCore
from controller.core.records import EventRecord, Record, RoutingReset
from controller.daemon.outbox import Outgoing
from railfabric.collector import freeze_rebuilt
from railfabric.v1 import admin_pb2

log = logging.getLogger("railfabric.controller")

P = ParamSpec("P")

# Pushes handed to sessions per turn of the event loop (a ToR's full state on ref-100k: ~0.3 ms
# to send).
PUSHES_PER_TURN = 64


def now() -> Now:
    return Now(mono_ns=time.monotonic_ns(), wall_ns=time.time_ns())


class Writer(Protocol):
    def submit(self, records: Sequence[Record]) -> concurrent.futures.Future[bool]: ...


class Outlet(Protocol):
    """Where pushes go: the live agent sessions."""

    def send(self, switch: str, msg: Outgoing) -> None: ...

    def close(self, switch: str, reason: str) -> None: ...


class Runner:
    def __init__(
        self,
        core: DecisionCore,
        writer: Writer,
        outlet: Outlet,
        on_event: Callable[[admin_pb2.Event], None] = lambda _e: None,
        *,
        on_unwritten: Callable[[], None] | None = None,
    ) -> None:
        self.core = core
        self.on_unwritten = on_unwritten
        self.halted = False
        # Deliveries held (hold(), from any thread) until release(token) of the latest hold.
        self.held = False
        self._holds = 0
        self._released = asyncio.Event()
        self.writer = writer
        self.outlet = outlet
        self.on_event = on_event
        self._deliveries: asyncio.Queue[
            tuple[concurrent.futures.Future[bool] | None, list[Push | CloseSession]]
        ] = asyncio.Queue()
        self._rebuilds: asyncio.Queue[Rebuild] = asyncio.Queue()
        self._deadline: int | None = None
        self._rescheduled = asyncio.Event()
        # time.monotonic() of the last input applied: full collections wait for a quiet moment
        # (railfabric.collector.full_collections).
        self.last_input_s = 0.0

    def input(
        self, decide: Callable[[Now], Sequence[Effect]]
    ) -> concurrent.futures.Future[bool] | None:
        """Run one input (a core method bound to its arguments, taking `now`); what the core
        raises propagates before any effect is applied. Returns the durability of its records
        (None when it had none, or when halted)."""
        if self.halted:
            return None
        return self.apply(decide(now()))

    def halt(self) -> None:
        """Decide and deliver nothing more (a deposed leader). On the loop."""
        self.halted = True
        self._released.set()

    def hold(self) -> int:
        """Deliver nothing until release(token) with the token returned here (a leader that
        cannot vouch for its lease just now). Decisions go on: their records are fenced at the
        store, and only pushes could reach a switch behind a newer leader's back. Callable from
        any thread: the flag is read by the delivery task before each input's pushes."""
        self._holds += 1
        self.held = True
        return self._holds

    def release(self, token: int) -> None:
        """Deliver again, unless a hold newer than `token` came since. On the loop."""
        if token == self._holds:
            self.held = False
            self._released.set()

    def apply(self, effects: Sequence[Effect]) -> concurrent.futures.Future[bool] | None:
        if self.halted:
            return None
        self.last_input_s = time.monotonic()
        durable: concurrent.futures.Future[bool] | None = None
        deliveries: list[Push | CloseSession] = []
        rebuilt = False  # routing recomputed from scratch: every desired state is new
        for effect in effects:
            if isinstance(effect, Persist):
                durable = self.writer.submit(effect.records)
                for record in effect.records:
                    if isinstance(record, EventRecord):
                        self.on_event(record.event)
                    elif isinstance(record, RoutingReset):
                        rebuilt = True
            elif isinstance(effect, Push | CloseSession):
                deliveries.append(effect)
            elif isinstance(effect, Log):
                log.log(effect.level, "%s", effect.text)
            elif isinstance(effect, Schedule):
                self._deadline = effect.at_mono_ns
                self._rescheduled.set()
            elif isinstance(effect, Rebuild):
                self._rebuilds.put_nowait(effect)
        if deliveries:
            fence = durable if self.on_unwritten is not None else None
            self._deliveries.put_nowait((fence, deliveries))
        if rebuilt:
            freeze_rebuilt()
        return durable

    async def deliver(self) -> None:
        """Owned task: send each input's pushes in order, a replicated store's once their
        records are durable."""
        while True:
            # One input's pushes at a time, in a call of its own: what a coroutine's loop
            # holds in locals stays referenced while it waits for the next, and a rebuild's
            # 4,672 full states would (177 MiB of wire on ref-100k).
            await self._deliver(*await self._deliveries.get())
            self._deliveries.task_done()

    async def _deliver(
        self, durable: concurrent.futures.Future[bool] | None, deliveries: list[Push | CloseSession]
    ) -> None:
        written = True if durable is None else await asyncio.wrap_future(durable)
        if not written and self.on_unwritten is not None:
            self.halt()
            self.on_unwritten()
        await self._while_held()
        for i, d in enumerate(deliveries):
            if i and i % PUSHES_PER_TURN == 0:
                # The sessions just given a push send it before the next slice, and a
                # call that came meanwhile is served: 4,672 full states at once would
                # hold the loop for over a second.
                await asyncio.sleep(0)
                await self._while_held()
            if self.halted:
                break
            if isinstance(d, Push):
                self.outlet.send(d.switch, d.body)
            else:
                self.outlet.close(d.switch, d.reason)

    async def _while_held(self) -> None:
        while self.held and not self.halted:
            self._released.clear()
            if self.held and not self.halted:
                await self._released.wait()

    async def drain(self) -> None:
        """Wait until every queued push has been handed to its session (shutdown)."""
        await self._deliveries.join()

    async def rebuilds(self) -> None:
        """Owned task: run each Rebuild's job in a thread, one at a time, and give the core
        its result; the event loop serves sessions and admin calls meanwhile. A job that
        raises ends this task, and the daemon with it: routing that cannot be computed is no
        state to serve from."""
        while True:
            await self._rebuild(await self._rebuilds.get())

    async def _rebuild(self, effect: Rebuild) -> None:
        # A call of its own, so that nothing of the job outlives it: held in the loop's
        # locals until the next rebuild, the result kept every state's wire (177 MiB on
        # ref-100k) and the job the routing it replaced.
        result = await asyncio.to_thread(effect.job)
        self.input(partial(self.core.rebuilt, effect.token, result))

    async def timers(self) -> None:
        """Owned task: call the core's `tick` at the deadline it last scheduled."""
        while True:
            self._rescheduled.clear()
            deadline = self._deadline
            if deadline is None:
                await self._rescheduled.wait()
                continue
            wait_s = (deadline - time.monotonic_ns()) / 1e9
            if wait_s > 0:
                try:
                    await asyncio.wait_for(self._rescheduled.wait(), timeout=wait_s)
                    continue  # a new deadline arrived first
                except TimeoutError:
                    pass
            if self._deadline == deadline:
                self._deadline = None
            self.input(self.core.tick)
