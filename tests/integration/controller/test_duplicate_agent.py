"""Two agents for one switch against the real controller: a `duplicate_agent` alarm naming
both, and no session ping-pong (the newer session waits while the serving one holds)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import Agent, start

if TYPE_CHECKING:  # only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub

pytestmark = pytest.mark.integration

SWITCH = "tor-r1-b1"


@dataclass
class Fighter:
    """An agent that reconnects at once whenever its session is aborted, as a second agent
    started by mistake for the same switch would."""

    name: str
    aborts: int = 0
    sessions: int = 0
    # Messages received on the current session (a waiting session receives none).
    states: int = 0

    async def run(self, addr: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            async with pki.channel(addr, pki.switch(SWITCH)) as channel:
                agent = Agent(channel)
                self.sessions += 1
                self.states = 0
                await agent.send(hello=control_pb2.Hello(switch_name=SWITCH))
                try:
                    while not stop.is_set():
                        read = asyncio.ensure_future(agent.call.read())
                        halt = asyncio.ensure_future(stop.wait())
                        done, _ = await asyncio.wait(
                            {read, halt}, return_when=asyncio.FIRST_COMPLETED
                        )
                        if read not in done:
                            read.cancel()
                            halt.cancel()
                            agent.call.cancel()
                            return
                        halt.cancel()
                        msg = read.result()
                        if not isinstance(msg, control_pb2.ControllerMessage):
                            break  # end of stream
                        self.states += 1
                except grpc.aio.AioRpcError as err:
                    assert err.code() == grpc.StatusCode.ABORTED, err
                    self.aborts += 1


async def _alarms(stub: FabricAdminAsyncStub) -> list[admin_pb2.Alarm]:
    reply = await stub.ListAlarms(admin_pb2.ListAlarmsRequest(), timeout=10)
    return [a for a in reply.alarms if a.kind == "duplicate_agent"]


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_two_agents_for_one_switch_raise_an_alarm_and_stop_fighting(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    first, second = Fighter("first"), Fighter("second")
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    tasks = [
        asyncio.create_task(first.run(addr, stop_first)),
        asyncio.create_task(second.run(addr, stop_second)),
    ]
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)

        async def raised() -> bool:
            return bool(await _alarms(admin))

        await _until("the duplicate_agent alarm", raised)
        (alarm,) = await _alarms(admin)
        assert alarm.severity == admin_pb2.SEVERITY_CRITICAL
        assert alarm.switch_name == SWITCH
        assert alarm.message.count("127.0.0.1") == 2, alarm.message  # both peers named
        # The fight is over: a few more seconds bring no more aborts.
        aborts = first.aborts + second.aborts
        await asyncio.sleep(3)
        assert first.aborts + second.aborts == aborts
        assert aborts <= 2 * 3, (first, second)

        # The waiting agent goes away: the alarm clears, the serving one keeps its session.
        waiting, serving = (first, second) if first.states == 0 else (second, first)
        assert waiting.states == 0 and serving.states >= 1, (first, second)
        sessions = serving.sessions
        (stop_first if waiting is first else stop_second).set()

        async def cleared() -> bool:
            return not await _alarms(admin)

        await _until("the alarm to clear", cleared)
        switches = await admin.ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=10)
        (status,) = [s for s in switches.switches if s.info.name == SWITCH]
        assert status.connected
        assert serving.sessions == sessions  # it was never interrupted
    stop_first.set()
    stop_second.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
