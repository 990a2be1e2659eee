"""The start-up gate (controller.daemon.startup) on a real gRPC server over loopback: a call
of a gated service made while the desired states are computed waits and then runs; other
services answer at once; a held call still ends at its own deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from controller.daemon.startup import StartupGate

pytestmark = pytest.mark.integration

HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


@contextlib.asynccontextmanager
async def _server(gate: StartupGate) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server(interceptors=[gate])
    health_pb2_grpc.add_HealthServicer_to_server(health_aio.HealthServicer(), server)
    reflection.enable_server_reflection((HEALTH, reflection.SERVICE_NAME), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


async def _health_check(channel: grpc.aio.Channel) -> health_pb2.HealthCheckResponse:
    return await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(), timeout=30
    )


async def test_a_gated_call_waits_for_the_states_and_others_do_not() -> None:
    gate = StartupGate({HEALTH})
    async with _server(gate) as channel:
        check = asyncio.create_task(_health_check(channel))
        # Reflection is not gated: it answers while the health check is held.
        async for reply in reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30
        ):
            assert HEALTH in {s.name for s in reply.list_services_response.service}
            break
        await asyncio.sleep(0.2)
        assert not check.done() and gate.held == 1
        gate.open()
        assert (await check).status == health_pb2.HealthCheckResponse.SERVING
        assert gate.is_open


async def test_a_held_call_ends_at_its_own_deadline() -> None:
    gate = StartupGate({HEALTH})
    async with _server(gate) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=0.3
            )
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        gate.open()
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=30
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
