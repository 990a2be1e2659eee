"""The agent's session with the controller: one `FabricControl.Session` stream over grpc.aio.

Every (re)connection starts with a Hello built at that moment (so it carries the ports' and the
applied state's current truth), then pumps a bounded outbox; what the controller sends is
handed to `on_message` in order. A lost stream is retried with exponential backoff and full
jitter. Messages produced while disconnected are not queued: the next Hello summarises them
(applied generation + digest, port states), and the daemon resends Neighbors periodically."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc

from railfabric.v1 import control_pb2, control_pb2_grpc

LOG = logging.getLogger("railfabric.agent.session")

# A stream that stayed up this long resets the backoff.
_STABLE_S = 5.0
# gRPC's own reconnect backoff starts at 1 s and grows to 120 s; ours is the one that counts.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.1
    maximum_s: float = 5.0
    factor: float = 2.0

    def delays(self, rng: random.Random) -> AsyncIterator[float]:
        return _delays(self, rng)


async def _delays(backoff: Backoff, rng: random.Random) -> AsyncIterator[float]:
    ceiling = backoff.initial_s
    while True:
        # "Full jitter": uniform in [ceiling/2, ceiling], so agents that lost the same
        # controller do not come back in lockstep.
        yield rng.uniform(ceiling / 2, ceiling)
        ceiling = min(backoff.maximum_s, ceiling * backoff.factor)


class ControllerSession:
    """Owns the stream to the controller; run() forever in a named task."""

    def __init__(
        self,
        address: str,
        make_hello: Callable[[], control_pb2.Hello],
        on_message: Callable[[control_pb2.ControllerMessage], Awaitable[None]],
        *,
        outbox_size: int = 256,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        connect_timeout_s: float = 2.0,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.address = address
        self._make_hello = make_hello
        self._on_message = on_message
        self._outbox_size = outbox_size
        self._outbox: asyncio.Queue[control_pb2.AgentMessage] | None = None
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self.connected = asyncio.Event()
        self.connections = 0
        self.dropped = 0
        self.last_error = ""

    def send(self, msg: control_pb2.AgentMessage) -> bool:
        """Queue `msg` for the controller without waiting. False when there is no session (the
        next Hello covers it). When the outbox is full the oldest message is dropped."""
        outbox = self._outbox
        if outbox is None or not self.connected.is_set():
            return False
        if outbox.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                outbox.get_nowait()
                self.dropped += 1
        outbox.put_nowait(msg)
        return True

    def resend_hello(self) -> bool:
        """Ask for a snapshot: a Hello with the current applied generation and digest."""
        return self.send(control_pb2.AgentMessage(hello=self._make_hello()))

    async def run(self) -> None:
        delays = self._backoff.delays(self._rng)
        while True:
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                await self._one_session()
                self.last_error = "stream closed by the controller"
            except grpc.aio.AioRpcError as err:
                self.last_error = f"{err.code().name}: {err.details()}"
            except TimeoutError:
                self.last_error = f"not reachable within {self.connect_timeout_s} s"
            finally:
                self.connected.clear()
                self._outbox = None
            if loop.time() - started > _STABLE_S:
                delays = self._backoff.delays(self._rng)
            delay = await anext(delays)
            LOG.warning(
                "controller %s: %s; reconnecting in %.2f s", self.address, self.last_error, delay
            )
            await asyncio.sleep(delay)

    async def _one_session(self) -> None:
        outbox: asyncio.Queue[control_pb2.AgentMessage] = asyncio.Queue(self._outbox_size)
        async with grpc.aio.insecure_channel(self.address, options=_CHANNEL_OPTIONS) as channel:
            stub = control_pb2_grpc.FabricControlStub(channel)
            async with asyncio.timeout(self.connect_timeout_s):
                await channel.channel_ready()
            hello = control_pb2.AgentMessage(hello=self._make_hello())
            # Writes go through call.write() from a task we own and cancel, not a request
            # generator grpc would consume: a generator parked in outbox.get() when the stream
            # dies is destroyed pending ("Task was destroyed but it is pending").
            call = stub.Session(None)
            await call.write(hello)
            self._outbox = outbox
            self.connections += 1
            self.connected.set()
            LOG.info(
                "controller %s: session %d open, applied generation %d",
                self.address,
                self.connections,
                hello.hello.applied_generation,
            )
            writer = asyncio.create_task(_pump(call, outbox), name="controller-outbox")
            try:
                async for reply in call:
                    await self._on_message(reply)
            finally:
                writer.cancel()
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await writer


async def _pump(
    call: grpc.aio.StreamStreamCall[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    outbox: asyncio.Queue[control_pb2.AgentMessage],
) -> None:
    while True:
        await call.write(await outbox.get())
