"""FabricControl: one bidirectional Session stream per agent (ARCHITECTURE §4).

Each session has a bounded outbox. A session whose agent cannot keep up (outbox full) is
closed: the agent reconnects and its Hello brings it back in step with a snapshot, which is
cheaper and safer than buffering deltas without bound.

A newer session for a switch replaces the older one (an agent that restarted must not wait
for its dead stream to time out). Two live agents for one switch would replace each other
forever, so a switch whose session is replaced FIGHT_REPLACEMENTS times within FIGHT_WINDOW_NS
is taken to have two agents: the `duplicate_agent` alarm names both peers, and from then on a
newer session waits (silently, its stream open) until the serving one ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from functools import partial

import grpc

from controller.core.switches import UnknownSwitch
from controller.daemon.runner import Runner
from railfabric.v1 import control_pb2, control_pb2_grpc

log = logging.getLogger(__name__)

OUTBOX_SIZE = 256
FIGHT_REPLACEMENTS = 3
FIGHT_WINDOW_NS = 10_000_000_000
_Context = grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage]


class _Session:
    def __init__(self, switch: str, peer: str = "") -> None:
        self.switch = switch
        self.peer = peer
        # Set when the stream has ended, whoever ended it.
        self.ended = asyncio.Event()
        # None closes the session (replaced by a newer one, or too slow).
        self.outbox: asyncio.Queue[control_pb2.ControllerMessage | None] = asyncio.Queue(
            OUTBOX_SIZE
        )
        self.close_reason = ""

    def close(self, reason: str) -> None:
        self.close_reason = reason
        while True:
            try:
                self.outbox.put_nowait(None)
                return
            except asyncio.QueueFull:
                self.outbox.get_nowait()


class Sessions:
    """The live agent sessions by switch name; the runner delivers pushes through it."""

    def __init__(self) -> None:
        self.by_switch: dict[str, _Session] = {}
        self._replaced: dict[str, deque[int]] = {}
        # Switches found with two agents: newer sessions wait, and how many do.
        self.waiting: dict[str, int] = {}

    def fighting(self, switch: str) -> bool:
        """A session for `switch` is about to replace a live one: is this a second agent?"""
        if switch in self.waiting:
            return True
        now = time.monotonic_ns()
        recent = self._replaced.setdefault(switch, deque(maxlen=FIGHT_REPLACEMENTS))
        recent.append(now)
        return len(recent) == FIGHT_REPLACEMENTS and now - recent[0] <= FIGHT_WINDOW_NS

    def send(self, switch: str, msg: control_pb2.ControllerMessage) -> None:
        session = self.by_switch.get(switch)
        if session is None:
            return  # the agent gets a snapshot when it says Hello
        try:
            session.outbox.put_nowait(msg)
        except asyncio.QueueFull:
            log.warning("%s: agent is not keeping up; closing its session to resync", switch)
            session.close("outbox full; reconnect to resync")

    def close(self, switch: str, reason: str) -> None:
        session = self.by_switch.get(switch)
        if session is not None:
            session.close(reason)


class ControlService(control_pb2_grpc.FabricControlServicer):
    """Sessions in, core inputs out: every agent message becomes one `Runner.input`."""

    def __init__(self, runner: Runner, sessions: Sessions) -> None:
        self.runner = runner
        self.core = runner.core
        self.sessions = sessions

    async def Session(
        self, request_iterator: AsyncIterator[control_pb2.AgentMessage], context: _Context
    ) -> AsyncIterator[control_pb2.ControllerMessage]:
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        if first.WhichOneof("msg") != "hello":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first message of a session must be hello, got {first.WhichOneof('msg')}",
            )
        name = first.hello.switch_name
        try:
            self.core.view(name)
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        peer = context.peer()
        old = self.sessions.by_switch.get(name)
        if old is not None and self.sessions.fighting(name):
            if not await self._wait_turn(name, old, peer, context):
                return
            old = self.sessions.by_switch.get(name)
        if old is not None:
            old.close("replaced by a newer session for the same switch")
        # Registered before the core decides, so the snapshot it pushes finds the session.
        session = self.sessions.by_switch[name] = _Session(name, peer)
        self.runner.input(partial(self.core.hello, first.hello))
        log.info("%s: session up (agent %s)", name, first.hello.agent_version)
        reader = asyncio.create_task(self._read(name, request_iterator), name=f"read-{name}")
        try:
            while True:
                getter = asyncio.create_task(session.outbox.get(), name=f"outbox-{name}")
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    reader.result()  # re-raises what ended the reader
                    return
                msg = getter.result()
                if msg is None:
                    await context.abort(grpc.StatusCode.ABORTED, session.close_reason)
                yield msg
        finally:
            reader.cancel()
            session.ended.set()
            if self.sessions.by_switch.get(name) is session:
                del self.sessions.by_switch[name]
                self.runner.input(partial(self.core.disconnected, name))
                log.info("%s: session down", name)

    async def _wait_turn(self, name: str, serving: _Session, peer: str, context: _Context) -> bool:
        """A second agent for `name`: hold its session until the serving one ends. False when
        this stream ended first (nothing more to do for it)."""
        waiting = self.sessions.waiting
        waiting[name] = waiting.get(name, 0) + 1
        if waiting[name] == 1:
            self.runner.input(partial(self.core.duplicate_agent, name, serving.peer, peer))
        log.warning("%s: a second agent (%s) waits while %s serves", name, peer, serving.peer)
        gone = asyncio.Event()

        def on_done(_ctx: _Context) -> None:
            gone.set()

        # grpc-stubs types the callback as its DoneCallback class; any callable works.
        context.add_done_callback(on_done)  # type: ignore[arg-type]
        try:
            while True:
                current = self.sessions.by_switch.get(name)
                if current is None:
                    return True
                ends = asyncio.create_task(current.ended.wait(), name=f"serving-{name}")
                left = asyncio.create_task(gone.wait(), name=f"waiting-{name}")
                done, pending = await asyncio.wait(
                    {ends, left}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()
                if left in done:
                    return False
                await asyncio.sleep(0)  # let the ended session's clean-up run first
        finally:
            waiting[name] -= 1
            if not waiting[name]:
                del waiting[name]
                self.runner.input(partial(self.core.duplicate_agent_gone, name))

    async def _read(self, name: str, requests: AsyncIterator[control_pb2.AgentMessage]) -> None:
        core = self.core
        async for msg in requests:
            kind = msg.WhichOneof("msg")
            try:
                if kind == "applied":
                    self.runner.input(partial(core.applied, name, msg.applied))
                elif kind == "port_status":
                    self.runner.input(partial(core.port_status, name, msg.port_status))
                elif kind == "neighbors":
                    self.runner.input(partial(core.neighbors, name, msg.neighbors))
                elif kind == "counters":
                    self.runner.input(partial(core.counters, name, msg.counters))
                elif kind == "hello":
                    # A hello mid-session asks for a snapshot (the agent lost step).
                    if msg.hello.switch_name != name:
                        log.error(
                            "%s: hello for %r on its session; ignored",
                            name,
                            msg.hello.switch_name[:64],
                        )
                        continue
                    self.runner.input(partial(core.hello, msg.hello))
                else:
                    log.error("%s: empty agent message ignored", name)
            except Exception:
                # A bad message must not take the controller down; log it with its switch.
                log.exception("%s: %s message could not be handled", name, kind)
