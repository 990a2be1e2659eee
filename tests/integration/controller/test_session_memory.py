"""An agent's session keeps nothing of what it sent. On ref-100k every idle session held its
last full state (~38 KB each, and TLS buffers sized to it) while the Session handler yielded
its messages: grpc's loop over a handler's yields, and the TLS guard's wrapper around it,
each kept the last one until the next. With the runner's hold on a rebuild's wires, that was
~185 MiB of the controller's resident memory (bench.swarm). Real gRPC over loopback with
TLS, the daemon's own interceptor, service and runner, in this process so that its objects
can be looked at."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.core.records import Record, Restored
from controller.daemon.core_planner import load_planner
from controller.daemon.main import access_rules
from controller.daemon.runner import Runner, now
from controller.daemon.service import ControlService, Sessions, add_to_server
from railfabric import tls
from railfabric.grpcopts import server_options
from railfabric.v1 import control_pb2
from tests import pki
from tests.integration.controller.test_controller_daemon import Agent

pytestmark = pytest.mark.integration

LAB = Path(__file__).resolve().parents[3] / "examples" / "lab-2rail.yaml"


class Durable:
    """Every input's records durable at once (the embedded store's runner does not wait)."""

    def submit(self, records: Sequence[Record]) -> concurrent.futures.Future[bool]:
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()
        done.set_result(True)
        return done


def holders(blob: bytes) -> list[str]:
    """The objects the collector tracks that refer to a bytes object equal to `blob` (not
    `blob` itself): frames of coroutines and generators, grpc's closures, messages' owners."""
    gc.collect()
    found = []
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if type(ref) is bytes and ref is not blob and len(ref) == len(blob) and ref == blob:
                found.append(type(obj).__qualname__)
    return found


async def test_an_idle_session_holds_nothing_of_the_state_it_sent() -> None:
    core = DecisionCore(load_planner(LAB), DampingParams())
    sessions = Sessions()
    runner = Runner(core, Durable(), sessions)
    runner.apply(core.start(Restored(), now()))
    server = grpc.aio.server(
        options=server_options(), interceptors=[tls.RoleGuard(access_rules(), insecure=False)]
    )
    add_to_server(ControlService(runner, sessions, secure=True), server)
    port = tls.add_port(server, "127.0.0.1:0", tls.ServerTls(pki.controller()))
    await server.start()
    delivery = asyncio.create_task(runner.deliver())
    name = "tor-r1-b1"
    agent = Agent.of(f"127.0.0.1:{port}", name)
    try:
        await agent.send(hello=control_pb2.Hello(switch_name=name))
        msg = await agent.read()
        assert msg.WhichOneof("msg") == "desired_state"
        assert msg.desired_state.switch_name == name and msg.desired_state.routes
        # The bytes the controller sent, as the agent got them: a snapshot's wire.
        snapshot = core.current_wire(name)
        assert snapshot is not None
        wire = snapshot.wire
        assert control_pb2.ControllerMessage.FromString(wire) == msg
        del snapshot, msg
        await asyncio.sleep(0.2)  # the session idles, waiting for its next message
        assert name in sessions.by_switch
        assert holders(wire) == []
    finally:
        await agent.close()
        delivery.cancel()
        await server.stop(None)
