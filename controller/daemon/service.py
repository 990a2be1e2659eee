"""FabricControl: one bidirectional Session stream per agent (docs/architecture.md §4).

Each session has a bounded outbox (controller.daemon.outbox) whose state messages coalesce
when its agent is slow: the agent gets the switch's current state instead of every step, and
its session is never reset for being slow.

A newer session for a switch replaces the older one (an agent that restarted must not wait
for its dead stream to time out). Two live agents for one switch would replace each other
forever, so a switch whose session is replaced FIGHT_REPLACEMENTS times within FIGHT_WINDOW_NS
is taken to have two agents: the `duplicate_agent` alarm names both peers, and from then on a
newer session waits (silently, its stream open) until the serving one ends.

`railctl tables` is a round trip on the session: `Sessions.read_tables` sends ReadTables with
a fresh request id and waits for the agent's TablesReport carrying it, which the session's
reader hands to the waiter (it never reaches the decision core). A session that ends fails
the reads still waiting on it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from functools import partial

import grpc

from controller.core.effects import StateWire
from controller.core.switches import UnknownSwitch, shown_name
from controller.daemon.outbox import Closed, Outbox, Outgoing
from controller.daemon.runner import Runner
from controller.daemon.turns import Turns
from railfabric import tls
from railfabric.v1 import control_pb2

log = logging.getLogger(__name__)

FIGHT_REPLACEMENTS = 3
FIGHT_WINDOW_NS = 10_000_000_000
# Table reads one session may have waiting for its agent at once.
TABLE_READS_PENDING = 16
_Context = grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage | bytes]


class TablesUnavailable(Exception):
    """No TablesReport will come: the switch has no session, too many reads wait on it, or
    its session ended first."""


# Why an outbox closes when the agent's side of the stream ended (never sent: nobody reads).
_READER_ENDED = "the agent's stream ended"


class _Session:
    def __init__(
        self,
        switch: str,
        peer: str = "",
        current: Callable[[], StateWire | None] = lambda: None,
    ) -> None:
        self.switch = switch
        self.peer = peer
        # Set when the stream has ended, whoever ended it.
        self.ended = asyncio.Event()
        # `current`: the snapshot of the switch's state now, sent when queued state messages
        # coalesce.
        self.outbox = Outbox(current)
        self.close_reason = ""
        # ReadTables sent on this session and waiting for the agent's answer, by request id.
        self.table_reads: dict[int, asyncio.Future[control_pb2.TablesReport]] = {}

    def tables(self, report: control_pb2.TablesReport) -> bool:
        """Hand the agent's report to its waiter; False when nobody waits (any more)."""
        waiter = self.table_reads.pop(report.request_id, None)
        if waiter is None or waiter.done():
            return False
        waiter.set_result(report)
        return True

    def fail_table_reads(self, reason: str) -> None:
        for waiter in self.table_reads.values():
            if not waiter.done():
                waiter.set_exception(TablesUnavailable(reason))
        self.table_reads.clear()

    def close(self, reason: str) -> None:
        self.close_reason = reason
        self.outbox.close(reason)


class Sessions:
    """The live agent sessions by switch name; the runner delivers pushes through it."""

    def __init__(self) -> None:
        self.by_switch: dict[str, _Session] = {}
        self._replaced: dict[str, deque[int]] = {}
        # Switches found with two agents: newer sessions wait, and how many do.
        self.waiting: dict[str, int] = {}
        self._request_ids = itertools.count(1)

    async def ended(self) -> None:
        """Until every session has ended and said so to the core (a stop waits for this
        before closing the store, so no session's end is lost). A session's end is set in the
        same step that unregisters it and tells the core."""
        while self.by_switch:
            await next(iter(self.by_switch.values())).ended.wait()

    def fighting(self, switch: str) -> bool:
        """A session for `switch` is about to replace a live one: is this a second agent?"""
        if switch in self.waiting:
            return True
        now = time.monotonic_ns()
        recent = self._replaced.setdefault(switch, deque(maxlen=FIGHT_REPLACEMENTS))
        recent.append(now)
        return len(recent) == FIGHT_REPLACEMENTS and now - recent[0] <= FIGHT_WINDOW_NS

    def send(self, switch: str, msg: Outgoing) -> None:
        session = self.by_switch.get(switch)
        if session is not None:  # else the agent gets a snapshot when it says Hello
            session.outbox.put(msg)

    def close(self, switch: str, reason: str) -> None:
        session = self.by_switch.get(switch)
        if session is not None:
            session.close(reason)

    async def read_tables(self, switch: str, timeout_s: float) -> control_pb2.TablesReport:
        """Ask `switch`'s agent to read its target back; its TablesReport. Raises
        TablesUnavailable (no session, too many reads waiting, the session ended first) or
        TimeoutError (no answer within `timeout_s`)."""
        session = self.by_switch.get(switch)
        if session is None:
            raise TablesUnavailable(f"{switch} has no agent session")
        if len(session.table_reads) >= TABLE_READS_PENDING:
            raise TablesUnavailable(
                f"{switch}: {TABLE_READS_PENDING} table reads already wait for its agent"
            )
        request_id = next(self._request_ids)
        waiter: asyncio.Future[control_pb2.TablesReport] = (
            asyncio.get_running_loop().create_future()
        )
        session.table_reads[request_id] = waiter
        try:
            self.send(
                switch,
                control_pb2.ControllerMessage(
                    read_tables=control_pb2.ReadTables(request_id=request_id)
                ),
            )
            async with asyncio.timeout(timeout_s):
                return await waiter
        finally:
            session.table_reads.pop(request_id, None)


class ControlService:
    """Sessions in, core inputs out: every agent message becomes one `Runner.input`."""

    def __init__(self, runner: Runner, sessions: Sessions, *, secure: bool = False) -> None:
        self.runner = runner
        self.core = runner.core
        self.sessions = sessions
        # With TLS a session speaks only for the switch its certificate names: everything it
        # sends (PortStatus, Neighbors, ...) is that switch's, and nobody else's.
        self.secure = secure
        # The leader's term (controller.daemon.election), stamped on every message; 0 alone.
        self.term = 0
        # Agents' inputs are decided a few per turn of the event loop (controller.daemon.turns).
        self.turns = Turns()

    async def Session(
        self, request_iterator: AsyncIterator[control_pb2.AgentMessage], context: _Context
    ) -> None:
        """Writes messages, and snapshots as their wire (`add_to_server`'s serializer sends
        bytes as they are). Written with `context.write`, not yielded: grpc's loop over a
        handler's yields holds the last message until the next, so every idle session kept
        its last full state (on ref-100k, 4,672 of them, ~38 KB each, and TLS buffers sized
        to them)."""
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        if first.WhichOneof("msg") != "hello":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first message of a session must be hello, got {first.WhichOneof('msg')}",
            )
        name = first.hello.switch_name
        peer = context.peer()
        if self.secure:
            who = tls.peer_identity(context)
            if who != tls.Identity(tls.Kind.SWITCH, name):
                log.warning(
                    "refused a session from %s (%s) that said hello as %s",
                    peer,
                    who,
                    shown_name(name),
                )
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"this certificate is {who}; it may not speak for switch {shown_name(name)}",
                )
        try:
            self.core.view(name)
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        await self.turns.wait()
        old = self.sessions.by_switch.get(name)
        if old is not None and self.sessions.fighting(name):
            if not await self._wait_turn(name, old, peer, context):
                return
            old = self.sessions.by_switch.get(name)
        if old is not None:
            old.close("replaced by a newer session for the same switch")
        # Registered before the core decides, so the snapshot it pushes finds the session.
        session = self.sessions.by_switch[name] = _Session(
            name, peer, partial(self.core.current_wire, name)
        )
        self.runner.input(partial(self.core.hello, first.hello))
        log.info("%s: session up (agent %s)", name, first.hello.agent_version)
        reader = asyncio.create_task(
            self._read(name, request_iterator, session), name=f"read-{name}"
        )
        # The agent's side ending ends the outbox's wait: one await per message, not a task
        # and an asyncio.wait (thousands of sessions are pushed to at once on a large fabric).
        reader.add_done_callback(lambda _: session.outbox.close(_READER_ENDED))
        try:
            if self.term:
                # The term first: an agent that moved here refuses its old leader from now on,
                # even when this leader has nothing to push to it.
                await context.write(control_pb2.ControllerMessage(term=self.term))
            while await self._send_next(session, reader, context):
                pass
        finally:
            reader.cancel()
            session.ended.set()
            session.fail_table_reads(
                f"{name}: the agent's session ended ({session.close_reason or 'stream closed'}) "
                "before it answered"
            )
            if self.sessions.by_switch.get(name) is session:
                del self.sessions.by_switch[name]
                self.runner.input(partial(self.core.disconnected, name))
                log.info("%s: session down", name)

    async def _send_next(
        self, session: _Session, reader: asyncio.Task[None], context: _Context
    ) -> bool:
        """Write the session's next message; False when the agent's side ended. A call of its
        own, so that nothing holds the message once it is written."""
        try:
            msg = await session.outbox.get()
        except Closed as closed:
            if reader.done():
                reader.result()  # re-raises what ended the reader
                return False
            await context.abort(grpc.StatusCode.ABORTED, closed.reason)
        if isinstance(msg, StateWire):
            await context.write(msg.with_term(self.term))
        else:
            msg.term = self.term
            await context.write(msg)
        return True

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

    async def _read(
        self, name: str, requests: AsyncIterator[control_pb2.AgentMessage], session: _Session
    ) -> None:
        core = self.core
        turns = self.turns
        async for msg in requests:
            await turns.wait()
            kind = msg.WhichOneof("msg")
            try:
                if kind == "applied":
                    self.runner.input(partial(core.applied, name, msg.applied))
                elif kind == "port_status":
                    self.runner.input(partial(core.port_status, name, msg.port_status))
                elif kind == "local_repair":
                    self.runner.input(partial(core.local_repair, name, msg.local_repair))
                elif kind == "neighbors":
                    self.runner.input(partial(core.neighbors, name, msg.neighbors))
                elif kind == "counters":
                    self.runner.input(partial(core.counters, name, msg.counters))
                elif kind == "tables":
                    # The answer to a railctl request, not an input of the core.
                    if not session.tables(msg.tables):
                        log.info(
                            "%s: tables report %d came after its request gave up; dropped",
                            name,
                            msg.tables.request_id,
                        )
                elif kind == "target_health":
                    self.runner.input(partial(core.target_health, name, msg.target_health))
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


def _serialize(msg: control_pb2.ControllerMessage | bytes) -> bytes:
    return msg if isinstance(msg, bytes) else msg.SerializeToString()


def add_to_server(service: ControlService, server: grpc.aio.Server) -> None:
    """Serve FabricControl as the generated `add_FabricControlServicer_to_server` does, with
    a response serializer that sends a snapshot's wire (bytes) as it is."""
    handlers = {
        "Session": grpc.stream_stream_rpc_method_handler(
            service.Session,
            request_deserializer=control_pb2.AgentMessage.FromString,
            response_serializer=_serialize,
        )
    }
    name = control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    # As the generated code does (grpc >= 1.63's registered methods; grpc-stubs lacks it).
    server.add_registered_method_handlers(name, handlers)  # type: ignore[attr-defined]
