"""--store as a real controller uses it: a sqlite:/// file in a directory it creates, kept
across a restart (an agent that holds its state is sent nothing); --state-dir, the older flag,
still opens the file it always did; memory: is said at start."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.daemon.store import FILE_NAME
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, Agent

pytestmark = pytest.mark.integration

SPINE = "spine-p1-1"


async def launch(
    processes: Processes, port: int, log: Path, *flags: str
) -> subprocess.Popen[bytes]:
    """A plaintext controller on `port` (its log into `log`), once it serves."""
    addr = f"127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = processes.start(
            [CONTROLLER, "--fabric", str(LAB), "--listen", addr, "--insecure", *flags],
            stdout=out,
            stderr=out,
        )
    async with grpc.aio.insecure_channel(addr) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 20
        while True:
            try:
                await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                return proc
            except grpc.aio.AioRpcError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = await asyncio.to_thread(log.read_text)
                    raise AssertionError(f"the controller did not serve:\n{said}") from None
                await asyncio.sleep(0.1)


async def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0


async def test_a_sqlite_store_is_created_and_kept_across_a_restart(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    db = tmp_path / "not" / "yet" / "controller.db"
    port, log = free_port(), tmp_path / "controller.log"
    addr = f"127.0.0.1:{port}"
    proc = await launch(processes, port, log, "--store", f"sqlite://{db}")
    assert db.is_file()
    async with grpc.aio.insecure_channel(addr) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name=SPINE))
        state = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=state.generation, digest=state.digest)
        )
        await asyncio.sleep(0.2)
        await agent.outbox.put(None)
    await stop(proc)

    proc = await launch(processes, port, log, "--store", f"sqlite://{db}")
    async with grpc.aio.insecure_channel(addr) as channel:
        agent = Agent(channel)
        await agent.send(
            hello=control_pb2.Hello(
                switch_name=SPINE, applied_generation=state.generation, applied_digest=state.digest
            )
        )
        # It remembers what the switch holds: nothing is sent (a cancelled read would end the
        # call, so wait for it instead).
        pending = asyncio.ensure_future(agent.call.read())
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        switches = (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches
        spine = next(s for s in switches if s.info.name == SPINE)
        assert spine.connected and spine.converged
        assert spine.desired_generation == state.generation
        await agent.outbox.put(None)
        pending.cancel()
    await stop(proc)
    text = log.read_text()
    assert text.count(f"state kept in {db}") == 2, text
    assert "memory" not in text


async def test_state_dir_opens_the_file_it_always_did(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    proc = await launch(
        processes, free_port(), tmp_path / "c.log", "--state-dir", str(tmp_path / "state")
    )
    assert (tmp_path / "state" / FILE_NAME).is_file()
    await stop(proc)


async def test_memory_is_said_at_start(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    log = tmp_path / "c.log"
    proc = await launch(processes, free_port(), log, "--store", "memory:")
    await stop(proc)
    (warning,) = [line for line in log.read_text().splitlines() if "memory" in line]
    assert " WARNING railfabric.controller: state kept in memory (--store memory:), lost at " in (
        warning
    )
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == [log]  # no file
