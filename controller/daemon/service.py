"""FabricControl: one bidirectional Session stream per agent (ARCHITECTURE §4).

Each session has a bounded outbox. A session whose agent cannot keep up (outbox full) is
closed: the agent reconnects and its Hello brings it back in step with a snapshot, which is
cheaper and safer than buffering deltas without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial

import grpc

from controller.core.switches import UnknownSwitch
from controller.daemon.runner import Runner
from railfabric.v1 import control_pb2, control_pb2_grpc

log = logging.getLogger(__name__)

OUTBOX_SIZE = 256
_Context = grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage]


class _Session:
    def __init__(self, switch: str) -> None:
        self.switch = switch
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
        old = self.sessions.by_switch.get(name)
        if old is not None:
            old.close("replaced by a newer session for the same switch")
        # Registered before the core decides, so the snapshot it pushes finds the session.
        session = self.sessions.by_switch[name] = _Session(name)
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
            if self.sessions.by_switch.get(name) is session:
                del self.sessions.by_switch[name]
                self.runner.input(partial(self.core.disconnected, name))
                log.info("%s: session down", name)

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
