"""A peer that hangs is detected by gRPC keepalive (railfabric.grpcopts), with the real
processes: the agent daemon programming a softswitch, against the real controller daemon.

A hung process (SIGSTOP) sends no FIN or RST, so without pings a stream to it stays open
forever. Both ends ping every KEEPALIVE_TIME_MS and drop the connection when a ping is not
answered within KEEPALIVE_TIMEOUT_MS: a hang is detected within their sum (15 s) plus the time
to notice the dead stream. The tests assert a wide DETECT_WITHIN_S and print what they
measured."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from railfabric.grpcopts import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from railfabric.v1 import admin_pb2, admin_pb2_grpc
from tests import pki
from tests.conftest import Netns, Processes
from tests.integration.agent.test_agent_softswitch import Rig, _make_rig, _start_agent
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, start

pytestmark = pytest.mark.integration

SWITCH = "tor-r1-b1"
KEEPALIVE_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000
# keepalive time + timeout (15 s) + a margin for a busy machine.
DETECT_WITHIN_S = KEEPALIVE_S + 20.0
RECONNECT_WITHIN_S = 60.0


@pytest.fixture
def rig(netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path) -> Rig:
    return _make_rig(netns, processes, free_port, tmp_path, loop_1_2=False, switch=SWITCH)


async def _controller(
    processes: Processes, port: int, tmp_path: Path
) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = tmp_path / "controller.log"
    out = log.open("ab")
    argv = [CONTROLLER, "--fabric", str(LAB), "--listen", f"127.0.0.1:{port}", "--store", "memory:"]
    proc = processes.start(
        [*argv, *pki.controller_flags()],
        stdout=out,
        stderr=out,
    )
    addr = await start(processes, port, tmp_path / "unused", launch=False)
    return proc, addr, log


async def _connected(addr: str) -> bool:
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        reply = await admin.ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=5)
    return next(s for s in reply.switches if s.info.name == SWITCH).connected


async def _disconnected(addr: str) -> bool:
    return not await _connected(addr)


def _sessions_up(log: Path) -> int:
    return log.read_text().count(f"{SWITCH}: session up")


async def _until(check: Callable[[], object], within_s: float, what: str) -> float:
    """Poll `check` (sync or async) until true; the seconds it took."""
    started = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > within_s:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.1)


def _agent(rig: Rig, processes: Processes, tmp_path: Path, addr: str) -> subprocess.Popen[bytes]:
    return _start_agent(rig, processes, tmp_path, controller=addr, extra=("--switch", SWITCH))


async def test_a_hung_agent_is_marked_disconnected_and_comes_back(
    rig: Rig, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    _, addr, log = await _controller(processes, free_port(), tmp_path)
    agent = _agent(rig, processes, tmp_path, addr)
    await _until(lambda: _connected(addr), RECONNECT_WITHIN_S, "the agent connected")
    ups = _sessions_up(log)

    os.kill(agent.pid, signal.SIGSTOP)
    try:
        took = await _until(
            lambda: _disconnected(addr), DETECT_WITHIN_S, "the hung agent marked disconnected"
        )
        print(f"hung agent detected by the controller in {took:.2f} s (keepalive {KEEPALIVE_S} s)")
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    back = await _until(
        lambda: _sessions_up(log) > ups, RECONNECT_WITHIN_S, "the agent opened a new session"
    )
    await _until(lambda: _connected(addr), RECONNECT_WITHIN_S, "the agent connected again")
    print(f"agent reconnected {back:.2f} s after SIGCONT")
    assert agent.poll() is None


async def test_a_hung_controller_is_noticed_by_the_agent_which_reconnects(
    rig: Rig, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    controller, addr, log = await _controller(processes, free_port(), tmp_path)
    agent = _agent(rig, processes, tmp_path, addr)
    agent_log = tmp_path / "agent.log"
    await _until(lambda: _connected(addr), RECONNECT_WITHIN_S, "the agent connected")
    await asyncio.sleep(1.0)  # the session settles (first state applied)
    ups = _sessions_up(log)
    seen = len(agent_log.read_text())

    def session_ended() -> bool:
        # The agent's session ends and it starts reconnecting: its log says so.
        new = agent_log.read_text()[seen:].splitlines()
        return any(f"controller {addr}: " in line and "reconnecting in" in line for line in new)

    os.kill(controller.pid, signal.SIGSTOP)
    try:
        took = await _until(session_ended, DETECT_WITHIN_S, "the agent noticed the hung controller")
        print(f"hung controller noticed by the agent in {took:.2f} s (keepalive {KEEPALIVE_S} s)")
        print(agent_log.read_text()[seen:].strip().splitlines()[0])
    finally:
        os.kill(controller.pid, signal.SIGCONT)
    back = await _until(
        lambda: _sessions_up(log) > ups, RECONNECT_WITHIN_S, "the agent opened a new session"
    )
    await _until(lambda: _connected(addr), RECONNECT_WITHIN_S, "the agent connected again")
    print(f"agent reconnected {back:.2f} s after SIGCONT")
    assert agent.poll() is None and controller.poll() is None
