"""The start-up gate (controller.daemon.startup) on a real gRPC server over loopback: a call
of a gated service made while the desired states are computed waits and then runs; other
services answer at once; a held call still ends at its own deadline. And, called directly,
the release of held sessions a few per turn once it opens."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import NamedTuple

import grpc
import pytest
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from controller.daemon.startup import StartupGate
from controller.daemon.turns import INPUTS_PER_TURN
from tests.loop_turns import TurnCounter

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


class _Details(NamedTuple):
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


async def test_held_sessions_go_on_a_few_per_turn_and_other_calls_at_once() -> None:
    """Thousands of agents wait at the gate on a large fabric: when it opens they must not all
    run in one turn of the loop, ahead of an operator's call held with them."""
    session, admin = "/railfabric.v1.FabricControl/Session", "/railfabric.v1.FabricAdmin/ListAlarms"
    gate = StartupGate(
        {"railfabric.v1.FabricControl", "railfabric.v1.FabricAdmin"},
        paced={"railfabric.v1.FabricControl"},
    )
    turns = TurnCounter()
    went: list[tuple[str, int]] = []

    async def call(method: str) -> None:
        async def continuation(details: grpc.HandlerCallDetails) -> None:
            went.append((details.method, turns.n))

        await gate.intercept_service(continuation, _Details(method))  # type: ignore[arg-type]

    calls = [asyncio.create_task(call(session)) for _ in range(100)]
    calls.append(asyncio.create_task(call(admin)))
    await asyncio.sleep(0.05)
    assert went == [] and gate.held == 101
    opened = turns.n
    gate.open()
    await asyncio.gather(*calls)
    turns.stop()
    admin_turn = next(t for m, t in went if m == admin)
    assert admin_turn <= opened + 2  # not behind the sessions
    sessions_per_turn = Counter(t for m, t in went if m == session)
    assert max(sessions_per_turn.values()) <= 2 * INPUTS_PER_TURN
    assert len(sessions_per_turn) >= 100 // (2 * INPUTS_PER_TURN)
