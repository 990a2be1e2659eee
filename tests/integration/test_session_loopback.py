"""The FabricControl API over a real grpc.aio server and client on loopback.

The servicer here is the test's own minimal controller (the real one comes with the daemons);
what is under test is the API: the stream, the message kinds and their order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from railfabric.v1 import control_pb2, control_pb2_grpc, state_pb2

pytestmark = pytest.mark.integration


class OneSwitchController(control_pb2_grpc.FabricControlServicer):
    def __init__(self) -> None:
        self.applied: list[int] = []

    async def Session(
        self,
        request_iterator: AsyncIterator[control_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    ) -> AsyncIterator[control_pb2.ControllerMessage]:
        async for msg in request_iterator:
            kind = msg.WhichOneof("msg")
            if kind == "hello":
                if msg.hello.switch_name != "tor-r0-b0":
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"unknown switch {msg.hello.switch_name!r}",
                    )
                state = state_pb2.DesiredState(switch_name=msg.hello.switch_name, generation=1)
                yield control_pb2.ControllerMessage(desired_state=state)
            elif kind == "applied":
                self.applied.append(msg.applied.generation)
                return


async def _serve(port: int, servicer: OneSwitchController) -> grpc.aio.Server:
    server = grpc.aio.server()
    control_pb2_grpc.add_FabricControlServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def test_hello_gets_desired_state_and_applied_is_acknowledged(
    free_port: Callable[[], int],
) -> None:
    port, servicer = free_port(), OneSwitchController()
    server = await _serve(port, servicer)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = control_pb2_grpc.FabricControlStub(channel)
            outbox: asyncio.Queue[control_pb2.AgentMessage | None] = asyncio.Queue(maxsize=4)

            async def requests() -> AsyncIterator[control_pb2.AgentMessage]:
                while (item := await outbox.get()) is not None:
                    yield item

            call = stub.Session(requests())
            await outbox.put(
                control_pb2.AgentMessage(
                    hello=control_pb2.Hello(switch_name="tor-r0-b0", applied_generation=0)
                )
            )
            reply = await asyncio.wait_for(call.read(), timeout=10)
            assert isinstance(reply, control_pb2.ControllerMessage)
            assert reply.desired_state.generation == 1
            assert reply.desired_state.switch_name == "tor-r0-b0"
            await outbox.put(control_pb2.AgentMessage(applied=control_pb2.Applied(generation=1)))
            await outbox.put(None)
            assert await asyncio.wait_for(call.code(), timeout=10) == grpc.StatusCode.OK
        assert servicer.applied == [1]
    finally:
        await server.stop(grace=None)


async def test_unknown_switch_is_refused_with_its_name(free_port: Callable[[], int]) -> None:
    port = free_port()
    server = await _serve(port, OneSwitchController())
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = control_pb2_grpc.FabricControlStub(channel)

            async def hello() -> AsyncIterator[control_pb2.AgentMessage]:
                yield control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="nope"))
                await asyncio.sleep(10)

            call = stub.Session(hello())
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await asyncio.wait_for(call.read(), timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "'nope'" in (err.value.details() or "")
    finally:
        await server.stop(grace=None)
