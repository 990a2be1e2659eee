"""The controller daemon as a real process: agents' sessions, the admin API, health and
reflection over gRPC on loopback, bad input, and a restart from its state directory."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from railfabric.delta import apply_delta
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, control_pb2_grpc, state_pb2
from tests import pki
from tests.conftest import Processes
from tests.metrics_checks import promtool_check

if TYPE_CHECKING:  # only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "examples" / "lab-2rail.yaml"
CONTROLLER = str(Path(sys.executable).parent / "railfabric-controller")


async def start(
    processes: Processes, port: int, state_dir: Path, *extra: str, launch: bool = True
) -> str:
    """Start a controller on `port` with `extra` flags (unless `launch` is False: it was
    started already); return its address once it serves."""
    addr = f"127.0.0.1:{port}"
    flags = ["--listen", addr, "--state-dir", str(state_dir), "--hold-down-s", "0.2", *extra]
    if launch:
        processes.start([CONTROLLER, "--fabric", str(LAB), *pki.controller_flags(), *flags])
    await serving(addr)
    return addr


async def serving(addr: str) -> None:
    """Return once the controller at `addr` answers health SERVING (20 s at most)."""
    async with pki.channel(addr) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 20
        while True:
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                return
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


class Agent:
    """One agent's side of a Session stream, driven by the test."""

    def __init__(self, channel: grpc.aio.Channel, *, owns_channel: bool = False) -> None:
        self.outbox: asyncio.Queue[control_pb2.AgentMessage | None] = asyncio.Queue(16)
        self.call = control_pb2_grpc.FabricControlStub(channel).Session(self._requests())
        self.state: state_pb2.DesiredState | None = None
        self._reader: asyncio.Future[None] | None = None
        self._inbox: asyncio.Queue[object] = asyncio.Queue()
        self._channel = channel if owns_channel else None

    @classmethod
    def of(cls, address: str, name: str) -> Agent:
        """An agent of switch `name` on a TLS channel of its own with that switch's
        certificate (as the real agent has); `close` ends the session and the channel."""
        return cls(pki.channel(address, pki.switch(name)), owns_channel=True)

    async def close(self) -> None:
        """End the stream (the agent goes away), and close the channel it owns."""
        await self.outbox.put(None)
        if self._channel is not None:
            await self._channel.close(None)

    async def _requests(self) -> AsyncIterator[control_pb2.AgentMessage]:
        while (msg := await self.outbox.get()) is not None:
            yield msg

    async def send(self, **kind: object) -> None:
        await self.outbox.put(control_pb2.AgentMessage(**kind))  # type: ignore[arg-type]

    async def read(self) -> control_pb2.ControllerMessage:
        msg = await asyncio.wait_for(self._next(), timeout=10)
        assert isinstance(msg, control_pb2.ControllerMessage)
        return msg

    async def _next(self) -> object:
        """The next message. One task reads the call into a queue: a read cancelled by a
        timeout would cancel the whole call, or lose the message it was receiving."""
        if self._reader is None:
            self._reader = asyncio.ensure_future(self._read_all())
        msg = await self._inbox.get()
        if isinstance(msg, BaseException):
            self._inbox.put_nowait(msg)  # the call stays ended
            raise msg
        return msg

    async def _read_all(self) -> None:
        while True:
            try:
                msg = await self.call.read()
            except grpc.aio.AioRpcError as err:
                await self._inbox.put(err)
                return
            await self._inbox.put(msg)
            if not isinstance(msg, control_pb2.ControllerMessage):
                return  # grpc.aio.EOF: the controller ended the stream, nothing follows

    async def hello_with_every_port(self, admin: FabricAdminAsyncStub, name: str) -> None:
        """Hello as an agent whose port map covers the switch's intent, carrier everywhere."""
        intent = await admin.GetSwitchState(admin_pb2.GetSwitchStateRequest(switch_name=name))
        ports = [control_pb2.PortInfo(port=p.port, oper_up=True) for p in intent.ports]
        await self.send(hello=control_pb2.Hello(switch_name=name, ports=ports))

    async def apply_all(self, quiet_s: float = 0.5) -> state_pb2.DesiredState:
        """Apply what the controller sends until it is quiet for `quiet_s`, acknowledge the
        last generation, and return the state held."""
        while True:
            try:
                msg = await asyncio.wait_for(self._next(), timeout=quiet_s)
            except TimeoutError:
                break
            assert isinstance(msg, control_pb2.ControllerMessage)
            if msg.WhichOneof("msg") == "desired_state":
                self.state = msg.desired_state
            elif msg.WhichOneof("msg") == "state_delta":
                assert self.state is not None, "a delta before any state"
                self.state = apply_delta(self.state, msg.state_delta)
        assert self.state is not None, "the controller sent no state"
        await self.send(
            applied=control_pb2.Applied(generation=self.state.generation, digest=self.state.digest)
        )
        return self.state


async def connect_every_switch(address: str, admin: FabricAdminAsyncStub) -> dict[str, Agent]:
    """One agent per switch of the fabric (each with its switch's certificate, on its own
    channel: `close` them), every port reported up, every state applied."""
    topo = await admin.GetTopology(admin_pb2.GetTopologyRequest())
    agents = {sw.name: Agent.of(address, sw.name) for sw in topo.switches}
    for name, agent in agents.items():
        await agent.hello_with_every_port(admin, name)
    # Links come up as their second end says Hello, and deltas follow their ends' Applied
    # (make before break): apply until no agent is sent anything more.
    for _ in range(10):
        before = [agent.state for agent in agents.values()]
        for agent in agents.values():
            await agent.apply_all()
        if [agent.state for agent in agents.values()] == before:
            return agents
    raise AssertionError("the controller kept sending states")


async def test_agents_get_state_failures_push_deltas_and_admin_reports_it(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        topo = await admin.GetTopology(admin_pb2.GetTopologyRequest())
        assert topo.fabric_name == "lab-2rail"
        assert len(topo.switches) == 6 and topo.host_nics == 8
        agents = await connect_every_switch(addr, admin)
        await asyncio.sleep(0.3)
        switches = (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches
        assert all(s.connected and s.converged for s in switches), switches
        assert not (await admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True))).links

        link = topo.links[0]
        tor = agents[link.a.switch_name]
        await tor.send(
            port_status=control_pb2.PortStatus(port=link.a.port, up=False, wall_ns=time.time_ns())
        )
        delta = (await tor.read()).state_delta
        assert delta.from_generation == agents[link.a.switch_name].state.generation  # type: ignore[union-attr]
        assert delta.delete_groups or delta.upsert_groups or delta.upsert_routes
        down = (await admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True))).links
        assert [(d.a.switch_name, d.a.port) for d in down] == [(link.a.switch_name, link.a.port)]
        diagnosis = await admin.Diagnose(admin_pb2.DiagnoseRequest())
        assert not diagnosis.healthy
        assert any(f.kind == "link_down" for f in diagnosis.findings)

        # Every flow from that ToR's NIC now avoids the dead uplink.
        assert (link.a.switch_name, link.a.port) == ("tor-r1-b1", 3)
        for sport in range(49152, 49152 + 32):
            path = await admin.PredictPath(
                admin_pb2.PredictPathRequest(src_ip="10.0.0.2", dst_ip="10.0.0.18", sport=sport)
            )
            assert path.delivered_to == "srv-b2-s1/nic1"
            assert path.hops[0].switch_name == "tor-r1-b1"
            assert path.hops[0].egress_port == 4 and path.hops[1].switch_name == "spine-p1-2"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin.PredictPath(admin_pb2.PredictPathRequest(src_ip="nope", dst_ip="x"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for agent in agents.values():
            await agent.close()


async def test_unknown_switch_and_a_first_message_that_is_not_hello_are_refused(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    # A certificate of the CA for a switch the fabric does not have.
    agent = Agent.of(addr, "tor-r0-b7")
    await agent.send(hello=control_pb2.Hello(switch_name="tor-r0-b7"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await agent.read()
    await agent.close()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown switch 'tor-r0-b7'" in (err.value.details() or "")
    agent = Agent.of(addr, "tor-r1-b1")
    await agent.send(counters=control_pb2.Counters())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await agent.read()
    await agent.close()
    assert "must be hello" in (err.value.details() or "")
    # The daemon is still serving.
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        assert (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches


async def test_reflection_lists_the_services(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    async with pki.channel(addr) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        async for reply in stub.ServerReflectionInfo(ask()):
            names = {s.name for s in reply.list_services_response.service}
            break
    assert {"railfabric.v1.FabricControl", "railfabric.v1.FabricAdmin"} <= names


async def test_restart_resumes_without_resending_what_agents_hold(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    addr = await start(processes, port, tmp_path / "state")
    async with pki.channel(addr, pki.switch("spine-p1-1")) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name="spine-p1-1"))
        state = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=state.generation, digest=state.digest)
        )
        await asyncio.sleep(0.2)
        await agent.outbox.put(None)
    processes.kill_all()
    addr = await start(processes, port, tmp_path / "state")
    async with pki.channel(addr) as channel:
        agent = Agent.of(addr, "spine-p1-1")
        await agent.send(
            hello=control_pb2.Hello(
                switch_name="spine-p1-1",
                applied_generation=state.generation,
                applied_digest=state.digest,
            )
        )
        # Nothing to send: no reply arrives (a cancelled read would end the call, so wait).
        pending = asyncio.ensure_future(agent.call.read())
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        switches = (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches
        spine = next(s for s in switches if s.info.name == "spine-p1-1")
        assert spine.connected and spine.converged
        assert spine.desired_generation == state.generation
        pending.cancel()
        await agent.close()


def test_a_bad_fabric_file_is_refused_with_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("rails: 2", "rails: 2\nrialz: 3"))
    done = subprocess.run(
        [CONTROLLER, "--fabric", str(bad), "--listen", "127.0.0.1:0", *pki.controller_flags()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"{bad}:" in done.stderr and "rialz" in done.stderr


async def test_prometheus_metrics_show_sessions_generations_and_links(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    metrics_port = free_port()
    addr = await start(
        processes, free_port(), tmp_path / "state", "--metrics", f"127.0.0.1:{metrics_port}"
    )
    async with pki.channel(addr, pki.switch("tor-r1-b1")) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1"))
        state = (await agent.read()).desired_state
        # A cut of a link that was never up (its spine has no agent) changes no route.
        await agent.send(port_status=control_pb2.PortStatus(port=3, up=False))
        await asyncio.sleep(0.2)
        text = await asyncio.to_thread(_scrape, metrics_port)
        await agent.outbox.put(None)
    assert "railfabric_agent_sessions 1.0" in text
    assert (
        f'railfabric_switch_generation{{kind="desired",switch="tor-r1-b1"}} '
        f"{float(state.generation)}" in text
    )
    # Nobody reported the other seven cables: unknown, and every state has its gauge.
    assert 'railfabric_links{state="down"} 1.0' in text
    assert 'railfabric_links{state="unknown"} 7.0' in text
    assert 'railfabric_links{state="up"} 0.0' in text
    assert "railfabric_convergence_seconds_bucket" in text
    promtool_check(text)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


async def test_sighup_reloads_the_intent_and_refuses_a_broken_one(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    fabric = tmp_path / "fabric.yaml"
    fabric.write_text(LAB.read_text())
    port = free_port()
    addr = f"127.0.0.1:{port}"
    argv = [CONTROLLER, "--fabric", str(fabric), "--listen", addr, "--store", "memory:"]
    proc = processes.start([*argv, *pki.controller_flags()])
    await start(processes, port, tmp_path / "unused", launch=False)
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agent = Agent.of(addr, "tor-r1-b1")
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1"))
        first = (await agent.read()).desired_state

        fabric.write_text(LAB.read_text().replace("rails: 2", "rails: two"))
        proc.send_signal(signal.SIGHUP)
        refused = await _wait_event(admin, "intent_refused")
        assert f"{fabric}:" in refused.message and "rails" in refused.message
        assert (await admin.GetTopology(admin_pb2.GetTopologyRequest())).fabric_name

        fabric.write_text(LAB.read_text().replace("mtu_bytes: 9100", "mtu_bytes: 4200"))
        proc.send_signal(signal.SIGHUP)
        second = (await agent.read()).desired_state
        assert second.generation == first.generation + 1
        assert [p.xoff_bytes for p in second.pfc] != [p.xoff_bytes for p in first.pfc]
        await agent.close()


async def _wait_event(admin: FabricAdminAsyncStub, kind: str) -> admin_pb2.Event:
    for _ in range(100):
        events = (await admin.ListEvents(admin_pb2.ListEventsRequest(limit=20))).events
        found = [e for e in events if e.kind == kind]
        if found:
            return found[-1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {kind} event")
