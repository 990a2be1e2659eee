"""An agent that knows several controllers follows the leader: a follower (the controller's real
LeaderGate in front of a test servicer) answers UNAVAILABLE naming the leader and the agent goes
there; a controller speaking for an older term than one seen is not obeyed. Real grpc.aio
servers on loopback."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from agent.session import Backoff, ControllerSession
from controller.daemon.election import Leader
from controller.daemon.leader_gate import LeaderGate
from railfabric.redirect import leader_of
from railfabric.v1 import control_pb2, control_pb2_grpc, state_pb2
from tests.integration.agent.test_session import Agent, _running, _until
from tests.integration.refusal_race import first_write_after_refusal, server_in_thread

pytestmark = pytest.mark.integration

FAST = Backoff(initial_s=0.05, maximum_s=0.2)
CONTROL = control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name


class Replica(control_pb2_grpc.FabricControlServicer):
    """Answers every Hello with a DesiredState of generation `term`, stamped with `term`."""

    def __init__(self, term: int) -> None:
        self.term = term
        self.hellos = 0

    async def Session(
        self,
        request_iterator: AsyncIterator[control_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    ) -> AsyncIterator[control_pb2.ControllerMessage]:
        async for msg in request_iterator:
            if msg.WhichOneof("msg") == "hello":
                self.hellos += 1
                yield control_pb2.ControllerMessage(
                    desired_state=state_pb2.DesiredState(
                        switch_name=msg.hello.switch_name, generation=self.term
                    ),
                    term=self.term,
                )


async def _serve(port: int, replica: Replica, gate: LeaderGate) -> grpc.aio.Server:
    server = grpc.aio.server(interceptors=[gate])
    control_pb2_grpc.add_FabricControlServicer_to_server(replica, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


def _gate(leading: bool, leader: str | None = None, term: int = 0) -> LeaderGate:
    gate = LeaderGate([CONTROL])
    if leading:
        gate.lead()
    elif leader is not None:
        gate.follow(Leader(leader, term))
    return gate


async def test_a_follower_sends_the_agent_to_the_leader(free_port: Callable[[], int]) -> None:
    a, b, c = (f"127.0.0.1:{free_port()}" for _ in range(3))
    follower, leader = Replica(7), Replica(7)
    gate_a = _gate(False, b, 7)
    servers = [
        await _serve(int(a.rsplit(":")[1]), follower, gate_a),
        await _serve(int(b.rsplit(":")[1]), leader, _gate(True)),
    ]
    agent = Agent()
    # c is listed first and down: the agent moves on to a, which names b.
    session = ControllerSession(
        [c, a, b], agent.hello, agent.on_message, backoff=FAST, rng=random.Random(2)
    )
    try:
        async with _running(session):
            state = await asyncio.wait_for(agent.messages.get(), 10)
            assert state.term == 7 and state.desired_state.generation == 7
            assert session.address == b
            assert session.term == 7
            # The follower never let the stream reach its servicer, and said who leads.
            assert follower.hellos == 0 and gate_a.redirected >= 1
            assert leader.hellos == 1
            assert session.redirects >= 1
    finally:
        for server in servers:
            await server.stop(grace=None)


async def test_a_deposed_leader_is_not_obeyed(
    free_port: Callable[[], int], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = (f"127.0.0.1:{free_port()}" for _ in range(2))
    port_a, port_b = int(a.rsplit(":")[1]), int(b.rsplit(":")[1])
    agent = Agent()
    session = ControllerSession(
        [a, b], agent.hello, agent.on_message, backoff=FAST, rng=random.Random(3)
    )
    new = await _serve(port_a, Replica(9), _gate(True))
    caplog.set_level(logging.WARNING, logger="railfabric.agent.session")
    async with _running(session):
        state = await asyncio.wait_for(agent.messages.get(), 10)
        assert state.term == 9
        # The new leader goes away; only the old one (term 4, paused until now) answers.
        await new.stop(grace=None)
        old_replica = Replica(4)
        old = await _serve(port_b, old_replica, _gate(True))
        try:
            await _until(lambda: old_replica.hellos >= 2)
            assert agent.messages.empty(), "a message of an older term reached the agent"
            assert session.term == 9
            # Said when it happened (last_error may already be a later try's, at port a).
            said = [r.getMessage() for r in caplog.records]
            assert any("term 4, older than term 9" in m for m in said), said
        finally:
            await old.stop(grace=None)


async def test_a_leader_not_listed_is_not_followed(
    free_port: Callable[[], int], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = (f"127.0.0.1:{free_port()}" for _ in range(2))
    stranger = f"127.0.0.1:{free_port()}"
    leader = Replica(3)
    servers = [
        await _serve(int(a.rsplit(":")[1]), Replica(3), _gate(False, stranger, 3)),
        await _serve(int(b.rsplit(":")[1]), leader, _gate(True)),
    ]
    agent = Agent()
    caplog.set_level(logging.ERROR, logger="railfabric.agent.session")
    session = ControllerSession(
        [a, b], agent.hello, agent.on_message, backoff=FAST, rng=random.Random(4)
    )
    try:
        async with _running(session):
            await asyncio.wait_for(agent.messages.get(), 10)
            assert session.address == b
    finally:
        for server in servers:
            await server.stop(grace=None)
    said = [r.getMessage() for r in caplog.records if stranger in r.getMessage()]
    assert said and "not among --controller" in said[0], said


async def test_no_leader_yet_is_unavailable_without_a_name(free_port: Callable[[], int]) -> None:
    port = free_port()
    server = await _serve(port, Replica(1), _gate(False))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = control_pb2_grpc.FabricControlStub(channel).Session(None)
            await call.write(control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="x")))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call.read()
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "no leader is elected yet" in (refused.value.details() or "")
            assert leader_of(refused.value.trailing_metadata()) is None
    finally:
        await server.stop(grace=None)


async def test_a_refusal_reaches_the_client_as_sent(free_port: Callable[[], int]) -> None:
    """A follower refusing a session whose hello is not yet written: the client's write of it
    fails in gRPC core, which grpc.aio reports as INTERNAL "Internal error from Core" in place
    of the refusal, unless the refusal waits for the hello (railfabric.refusal)."""
    port, leader = free_port(), f"127.0.0.1:{free_port()}"
    with server_in_thread(lambda: _serve(port, Replica(1), _gate(False, leader, 1))):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            refused = await first_write_after_refusal(
                control_pb2_grpc.FabricControlStub(channel).Session(None),
                control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="x")),
            )
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused
    assert leader_of(refused.trailing_metadata()) == leader
