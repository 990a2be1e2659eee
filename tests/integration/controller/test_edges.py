"""The controller daemon at its edges, as a real process: a second daemon on the address,
railctl into a closed pipe, shutdown with agents connected, many sessions dropped at once,
client input that would not fit an error text, and agent messages about generations and ports
that do not exist."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, Agent, start

pytestmark = pytest.mark.integration

RAILCTL = str(Path(sys.executable).parent / "railctl")
REPO = Path(__file__).resolve().parents[3]
# What Python and asyncio print when something escapes or is left behind at exit.
NOISE = (
    "Traceback",
    "ProgrammingError",
    "Task was destroyed but it is pending",
    "Exception ignored",
    "was never awaited",
)


def _launch(
    processes: Processes, log: Path, port: int, *flags: str, fabric: Path = LAB
) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return processes.start(
        [CONTROLLER, "--fabric", str(fabric), "--listen", f"127.0.0.1:{port}",
         "--hold-down-s", "0.2", *pki.controller_flags(), *flags],
        stdout=out,
        stderr=out,
    )  # fmt: skip


def _assert_quiet(log: Path) -> None:
    text = log.read_text()
    for noise in NOISE:
        assert noise not in text, text[-4000:]


async def _switches(addr: str) -> list[admin_pb2.SwitchStatus]:
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        reply = await admin.ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=10)
        return list(reply.switches)


async def _until(check: Callable[[], object], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.1)


async def test_a_second_controller_on_the_address_exits_and_the_first_keeps_serving(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    addr = await start(processes, port, tmp_path / "first")
    try:
        second = await asyncio.to_thread(
            subprocess.run,
            [CONTROLLER, "--fabric", str(LAB), "--listen", addr,
             "--state-dir", str(tmp_path / "second"), *pki.controller_flags()],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second controller on {addr} started and served next to the first")
    assert second.returncode == 1, second.stderr
    assert second.stderr.strip().splitlines() == [
        f"railfabric-controller: --listen {addr}: address in use"
    ]
    # It stopped before opening a store of its own.
    assert not (tmp_path / "second").exists()
    async with pki.channel(addr) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert len(await _switches(addr)) == 6


def _closed_pipe(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    """railctl with a stdout nobody reads any more (`| head -1` after head has exited)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [RAILCTL, "--controller", addr, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            env={**os.environ, **pki.railctl_env()},
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)


def test_railctl_into_a_closed_pipe_is_quiet_on_every_output_path(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = asyncio.run(start(processes, free_port(), tmp_path / "state"))
    commands = [
        ["switches"],
        ["topology"],
        ["links"],
        ["routes", "tor-r1-b1"],
        ["events"],
        ["alarms"],
        ["diagnose"],
        ["path", "10.0.0.2", "10.0.0.18", "--sport", "49152"],
    ]
    for command in commands:
        for args in (command, ["--json", *command]):
            done = _closed_pipe(addr, *args)
            for noise in NOISE:
                assert noise not in done.stderr, (args, done.stderr)
            assert "BrokenPipe" not in done.stderr, (args, done.stderr)
            assert done.returncode == 1, (args, done.returncode, done.stderr)
    # The shell's way, with a reader that leaves after one line.
    shell = subprocess.run(
        f"{RAILCTL} --controller {addr} --json switches | head -1; echo rc=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        env={**os.environ, **pki.railctl_env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr, shell.stderr
    assert shell.stdout.splitlines()[0] == "{", shell.stdout
    assert shell.stdout.splitlines()[-1] in ("rc=0", "rc=1")


async def test_sigterm_with_an_agent_connected_records_its_session_down(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port, state, log = free_port(), tmp_path / "state", tmp_path / "controller.log"
    proc = _launch(processes, log, port, "--state-dir", str(state))
    addr = await start(processes, port, state, launch=False)
    async with pki.channel(addr, pki.switch("tor-r1-b1")) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1"))
        desired = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=desired.generation, digest=desired.digest)
        )
        await _until(lambda: _converged(addr, "tor-r1-b1"), 20, "tor-r1-b1 connected and converged")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        with pytest.raises(grpc.aio.AioRpcError):
            await agent.read()  # the controller ended the session
        await agent.outbox.put(None)
    _assert_quiet(log)
    assert "tor-r1-b1: session down" in log.read_text()

    proc = _launch(processes, log, port, "--state-dir", str(state))
    addr = await start(processes, port, state, launch=False)
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        events = (await admin.ListEvents(admin_pb2.ListEventsRequest(limit=100))).events
    kinds = [(e.kind, e.switch_name) for e in events]
    assert ("session_up", "tor-r1-b1") in kinds
    up = kinds.index(("session_up", "tor-r1-b1"))
    assert ("session_down", "tor-r1-b1") in kinds[up:], kinds


async def _converged(addr: str, name: str) -> bool:
    status = next(s for s in await _switches(addr) if s.info.name == name)
    return status.connected and status.converged


# A child process with a session per switch named in argv (a JSON {name: [ca, cert, key]},
# the switch's certificate), each holding its DesiredState; SIGKILL drops them all at once,
# with no goodbye on any stream.
SESSIONS = r"""
import asyncio, json, sys
from pathlib import Path
from railfabric import tls
from railfabric.grpcopts import channel_options
from railfabric.v1 import control_pb2
from tests.integration.controller.test_controller_daemon import Agent

async def main(addr, certificates):
    agents = []
    for name, files in certificates.items():
        channel = tls.aio_channel(addr, tls.TlsFiles(*map(Path, files)), channel_options())
        agent = Agent(channel, owns_channel=True)
        await agent.send(hello=control_pb2.Hello(switch_name=name))
        agents.append(agent)
    await asyncio.gather(*(agent.read() for agent in agents))
    print(len(agents), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


async def test_200_sessions_dropped_at_once_leave_nothing_pending(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    # The lab fabric with 8 rails of 25 blocks: 200 ToRs and 2 spines.
    fabric = tmp_path / "fabric-202.yaml"
    fabric.write_text(
        LAB.read_text()
        .replace("rails: 2", "rails: 8")
        .replace("blocks_per_pod: 2", "blocks_per_pod: 25")
    )
    port, log = free_port(), tmp_path / "controller.log"
    proc = _launch(processes, log, port, "--store", "memory:", fabric=fabric)
    addr = await start(processes, port, tmp_path / "unused", launch=False)
    names = [s.info.name for s in await _switches(addr)][:200]
    certificates = {name: [str(f) for f in astuple(pki.switch(name))] for name in names}
    client = processes.start(
        [sys.executable, "-c", SESSIONS, addr, json.dumps(certificates)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    assert client.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(client.stdout.readline), 120)
    assert line.strip() == b"200"
    assert sum(s.connected for s in await _switches(addr)) == 200
    os.killpg(client.pid, signal.SIGKILL)
    client.wait(timeout=10)

    async def none_connected() -> bool:
        return not any(s.connected for s in await _switches(addr))

    await _until(none_connected, 60, "every dropped session ended")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    _assert_quiet(log)
    assert len(re.findall(r": session down$", log.read_text(), re.MULTILINE)) == 200


async def test_error_texts_that_echo_client_input_fit_and_can_be_read(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    long = "x" * 10_000
    # No certificate names such a switch (names are at most 63 characters): the session of
    # tor-r1-b1's certificate that says Hello with it is refused for speaking for another.
    async with pki.channel(addr, pki.switch("tor-r1-b1")) as channel:
        for name in (long, "tor-r1-b1" + long, "\x00" * 10_000, "é" * 10_000):
            agent = Agent(channel)
            await agent.send(hello=control_pb2.Hello(switch_name=name))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await agent.read()
            await agent.outbox.put(None)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
            details = err.value.details() or ""
            assert details.startswith("this certificate is switch/tor-r1-b1"), details[:200]
            assert len(details) < 1000, details[:200]

    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin.GetSwitchState(admin_pb2.GetSwitchStateRequest(switch_name=long))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value
        assert len(err.value.details() or "") < 1000
        for src, dst in ((long, "10.0.0.18"), ("10.0.0.2", "9" * 10_000), ("10.0.0.2", "é" * 9999)):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await admin.PredictPath(
                    admin_pb2.PredictPathRequest(src_ip=src, dst_ip=dst, sport=49152)
                )
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
            assert len(err.value.details() or "") < 1000
        # Still serving.
        assert (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


async def test_applied_for_unsent_generations_and_status_of_missing_ports_are_refused(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    metrics = free_port()
    addr = await start(
        processes, free_port(), tmp_path / "state", "--metrics", f"127.0.0.1:{metrics}"
    )
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agent = Agent.of(addr, "tor-r1-b1")
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1"))
        desired = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=desired.generation, digest=desired.digest)
        )
        await _until(lambda: _converged(addr, "tor-r1-b1"), 20, "converged")

        for generation in (2**64 - 1, 10**12):
            await agent.send(
                applied=control_pb2.Applied(generation=generation, digest=desired.digest)
            )
        for port in (0, 999, 2**32 - 1):
            await agent.send(
                port_status=control_pb2.PortStatus(port=port, up=False, wall_ns=time.time_ns())
            )

        def refused() -> bool:
            text = _scrape(metrics)
            return (
                'railfabric_inputs_refused_total{reason="applied_unsent"} 2.0' in text
                and 'railfabric_inputs_refused_total{reason="port_status_unknown_port"} 3.0' in text
            )

        await _until(lambda: asyncio.to_thread(refused), 20, "five messages refused")
        status = next(s for s in await _switches(addr) if s.info.name == "tor-r1-b1")
        assert status.connected and status.converged, status
        assert status.applied_generation == status.desired_generation == desired.generation
        events = (await admin.ListEvents(admin_pb2.ListEventsRequest(limit=100))).events
        assert not [e for e in events if e.kind in ("port_down", "port_up")], events
        # No link changed: all are as before, unknown (no spine agent ever reported).
        links = (await admin.ListLinks(admin_pb2.ListLinksRequest())).links
        assert links and {link.state for link in links} == {admin_pb2.LINK_STATE_UNKNOWN}
        # Nothing was pushed for them either: no reply arrives.
        pending = asyncio.ensure_future(agent.call.read())
        done, _ = await asyncio.wait({pending}, timeout=1.0)
        assert not done
        pending.cancel()
        await agent.close()
