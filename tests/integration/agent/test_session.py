"""The agent's controller session against a real grpc.aio server on loopback. The servicer is
this test's own small controller (the real one is built elsewhere)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from agent.session import Backoff, ControllerSession
from railfabric.v1 import control_pb2, control_pb2_grpc, state_pb2

pytestmark = pytest.mark.integration

FAST = Backoff(initial_s=0.05, maximum_s=0.2)


class TestController(control_pb2_grpc.FabricControlServicer):
    """Answers every Hello with a DesiredState at `generation`; aborts the first
    `abort_sessions` streams right after their Hello."""

    __test__ = False

    def __init__(self, abort_sessions: int = 0) -> None:
        self.generation = 1
        self.abort_sessions = abort_sessions
        self.hellos: list[control_pb2.Hello] = []
        self.received: asyncio.Queue[control_pb2.AgentMessage] = asyncio.Queue(maxsize=100)

    async def Session(
        self,
        request_iterator: AsyncIterator[control_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    ) -> AsyncIterator[control_pb2.ControllerMessage]:
        async for msg in request_iterator:
            await self.received.put(msg)
            if msg.WhichOneof("msg") == "hello":
                self.hellos.append(msg.hello)
                if self.abort_sessions > 0:
                    self.abort_sessions -= 1
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "test: going away")
                yield control_pb2.ControllerMessage(
                    desired_state=state_pb2.DesiredState(
                        switch_name=msg.hello.switch_name, generation=self.generation
                    )
                )


async def _serve(port: int, servicer: TestController) -> grpc.aio.Server:
    server = grpc.aio.server()
    control_pb2_grpc.add_FabricControlServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


class Agent:
    """The parts of the daemon the session talks to."""

    def __init__(self) -> None:
        self.applied = 0
        self.messages: asyncio.Queue[control_pb2.ControllerMessage] = asyncio.Queue(maxsize=100)

    def hello(self) -> control_pb2.Hello:
        return control_pb2.Hello(
            switch_name="tor-r0-b0",
            agent_version="test",
            target=control_pb2.TARGET_KIND_SOFTSWITCH,
            applied_generation=self.applied,
            ports=[control_pb2.PortInfo(port=1, ifname="veth1", oper_up=True)],
        )

    async def on_message(self, msg: control_pb2.ControllerMessage) -> None:
        await self.messages.put(msg)


@contextlib.asynccontextmanager
async def _running(session: ControllerSession) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(session.run(), name="controller-session")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110  (polls state the session exposes)
            await asyncio.sleep(0.01)


async def test_hello_first_then_state_in_and_applied_out(free_port: Callable[[], int]) -> None:
    port, controller, agent = free_port(), TestController(), Agent()
    server = await _serve(port, controller)
    session = ControllerSession(f"127.0.0.1:{port}", agent.hello, agent.on_message, backoff=FAST)
    try:
        async with _running(session):
            first = await asyncio.wait_for(controller.received.get(), 10)
            assert first.WhichOneof("msg") == "hello"
            assert first.hello.switch_name == "tor-r0-b0"
            assert first.hello.target == control_pb2.TARGET_KIND_SOFTSWITCH
            state = await asyncio.wait_for(agent.messages.get(), 10)
            assert state.desired_state.generation == 1
            agent.applied = 1
            assert session.send(control_pb2.AgentMessage(applied=control_pb2.Applied(generation=1)))
            got = await asyncio.wait_for(controller.received.get(), 10)
            assert got.applied.generation == 1
            # A delta for a generation the agent does not hold: Hello again, for a snapshot.
            assert session.resend_hello()
            again = await asyncio.wait_for(controller.received.get(), 10)
            assert again.hello.applied_generation == 1
    finally:
        await server.stop(grace=None)


async def test_reconnects_with_backoff_and_hellos_again(free_port: Callable[[], int]) -> None:
    port, controller, agent = free_port(), TestController(abort_sessions=2), Agent()
    session = ControllerSession(
        f"127.0.0.1:{port}",
        agent.hello,
        agent.on_message,
        backoff=FAST,
        rng=random.Random(1),
        connect_timeout_s=0.3,
    )
    async with _running(session):
        # No controller yet: the session keeps retrying and queues nothing meanwhile.
        await asyncio.sleep(0.5)
        assert not session.send(control_pb2.AgentMessage(counters=control_pb2.Counters()))
        server = await _serve(port, controller)
        try:
            state = await asyncio.wait_for(agent.messages.get(), 10)
            assert state.desired_state.generation == 1
            assert len(controller.hellos) == 3  # two aborted streams, then one that holds
            assert session.connections == 3
            # The controller restarts: the agent comes back by itself.
            await server.stop(grace=None)
            await _until(lambda: not session.connected.is_set())
            server = await _serve(port, controller)
            await _until(lambda: len(controller.hellos) == 4)
        finally:
            await server.stop(grace=None)


async def test_outbox_is_bounded_and_drops_the_oldest() -> None:
    agent = Agent()
    session = ControllerSession("127.0.0.1:1", agent.hello, agent.on_message, outbox_size=2)
    session._outbox = asyncio.Queue(2)  # a session that is open but not draining
    session.connected.set()
    for generation in (1, 2, 3):
        assert session.send(
            control_pb2.AgentMessage(applied=control_pb2.Applied(generation=generation))
        )
    assert session.dropped == 1
    kept = [session._outbox.get_nowait().applied.generation for _ in range(2)]
    assert kept == [2, 3]


async def test_backoff_grows_with_jitter_up_to_the_maximum() -> None:
    delays = Backoff(initial_s=0.1, maximum_s=0.4).delays(random.Random(7))
    got = [await anext(delays) for _ in range(6)]
    ceilings = [0.1, 0.2, 0.4, 0.4, 0.4, 0.4]
    assert all(c / 2 <= d <= c for d, c in zip(got, ceilings, strict=True))
    assert len(set(got)) == len(got)  # jittered, not constant
