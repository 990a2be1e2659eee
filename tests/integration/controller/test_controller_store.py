"""The controller daemon and its store file, as a real process: a disk that fills up under a
running controller (it keeps deciding and forwarding, raises `store_unavailable`, loses no
event once space is back, and a restart finds everything), and a store file that cannot be
read at start-up (refused with the file and both ways out, the file left as it was)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import grpc
import pytest

from controller.daemon.store import FILE_NAME
from railfabric.delta import apply_delta
from railfabric.digest import canonical
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, state_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.diskfull import fill, tmpfs
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, Agent, start

if TYPE_CHECKING:  # only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub

pytestmark = pytest.mark.integration

STORE_ALARM = "store_unavailable"
# Every bound is wide: the machine may be busy. Nothing here sleeps to assert.
WAIT_S = 30.0
TOR = "tor-r1-b1"
SWITCHES = ("tor-r1-b1", "tor-r2-b1", "tor-r1-b2", "tor-r2-b2", "spine-p1-1", "spine-p1-2")
K = admin_pb2


@pytest.fixture
def state_tmpfs(tmp_path: Path, processes: Processes) -> Iterator[Path]:
    """A 4 MiB tmpfs for the controller's --state-dir; the controllers on it are stopped and
    it is unmounted afterwards whatever happens."""
    with tmpfs(tmp_path / "state", "4m") as mnt:
        try:
            yield mnt
        finally:
            processes.kill_all()  # nothing may hold the mount


class Switch:
    """A simulated agent for one switch (its certificate, on a channel of its own; `admin`
    is an operator's): says Hello, then applies every DesiredState and StateDelta it receives
    (railfabric.delta) and acks it with Applied(generation, digest)."""

    def __init__(self, name: str, address: str, admin: FabricAdminAsyncStub) -> None:
        self.name = name
        self.admin = admin
        self.agent = Agent.of(address, name)
        self.state: state_pb2.DesiredState | None = None
        self.received = 0
        self.stopping = False
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        await self.agent.hello_with_every_port(self.admin, self.name)
        while True:
            try:
                msg = await self.agent.call.read()
            except grpc.aio.AioRpcError:
                if self.stopping:
                    return
                raise
            if not isinstance(msg, control_pb2.ControllerMessage):
                return  # grpc.aio.EOF: the controller ended the session
            kind = msg.WhichOneof("msg")
            if kind == "desired_state":
                self.state = msg.desired_state
            else:
                assert kind == "state_delta", msg
                assert self.state is not None, f"{self.name}: a delta before any state"
                self.state = apply_delta(self.state, msg.state_delta)
            self.received += 1
            await self.agent.send(
                applied=control_pb2.Applied(
                    generation=self.state.generation,
                    digest=self.state.digest,
                    wall_ns=time.time_ns(),
                )
            )

    def check(self) -> None:
        """Raise what ended the agent, if anything did."""
        if self.task.done() and not self.task.cancelled():
            self.task.result()

    async def port(self, port: int, up: bool) -> int:
        wall_ns = time.time_ns()
        await self.agent.send(port_status=control_pb2.PortStatus(port=port, up=up, wall_ns=wall_ns))
        return wall_ns


async def until(
    probe: Callable[[], Awaitable[bool]], what: str, agents: dict[str, Switch] | None = None
) -> None:
    """Poll `probe` until it holds (at most WAIT_S); agents that failed fail the wait."""
    deadline = time.monotonic() + WAIT_S
    while not await probe():
        for agent in (agents or {}).values():
            agent.check()
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")
        await asyncio.sleep(0.05)


async def link_states(admin: FabricAdminAsyncStub) -> dict[tuple[str, int], admin_pb2.LinkInfo]:
    links = (await admin.ListLinks(admin_pb2.ListLinksRequest())).links
    return {(link.a.switch_name, link.a.port): link for link in links}


async def alarms(admin: FabricAdminAsyncStub) -> dict[str, admin_pb2.Alarm]:
    return {a.id: a for a in (await admin.ListAlarms(admin_pb2.ListAlarmsRequest())).alarms}


async def events(admin: FabricAdminAsyncStub) -> list[admin_pb2.Event]:
    return list((await admin.ListEvents(admin_pb2.ListEventsRequest(limit=100_000))).events)


async def state_of(admin: FabricAdminAsyncStub, switch: str) -> state_pb2.DesiredState:
    return await admin.GetSwitchState(admin_pb2.GetSwitchStateRequest(switch_name=switch))


def ports_used(state: state_pb2.DesiredState) -> set[int]:
    """Egress ports of the groups the switch's routes point at."""
    groups = {g.id: g for g in state.groups}
    return {hop.port for r in state.routes for hop in groups[r.group_id].next_hops}


def argv(state_dir: Path, port: int = 0) -> list[str]:
    return [
        CONTROLLER,
        "--fabric",
        str(LAB),
        "--listen",
        f"127.0.0.1:{port}",
        "--state-dir",
        str(state_dir),
        *pki.controller_flags(),
    ]


def launch(
    processes: Processes, port: int, state_dir: Path, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """The controller as `start` runs it, its stderr (its log) into `log`."""
    return processes.start([*argv(state_dir, port), "--hold-down-s", "0.2"], stderr=log)


async def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.to_thread(proc.wait, WAIT_S)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
async def test_a_full_disk_loses_no_link_event_and_never_ends_the_daemon(
    state_tmpfs: Path, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    state_dir = state_tmpfs
    store_file = state_dir / FILE_NAME
    logs = [tmp_path / "controller-1.log", tmp_path / "controller-2.log"]
    port = free_port()
    with logs[0].open("wb") as log:
        proc = launch(processes, port, state_dir, log)
    addr = await start(processes, port, state_dir, launch=False)
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        topo = await admin.GetTopology(admin_pb2.GetTopologyRequest())
        assert {s.name for s in topo.switches} == set(SWITCHES)
        peer = {(lk.a.switch_name, lk.a.port): (lk.b.switch_name, lk.b.port) for lk in topo.links}
        assert peer[(TOR, 3)] == ("spine-p1-1", 1) and peer[(TOR, 4)] == ("spine-p1-2", 1)
        agents = {name: Switch(name, addr, admin) for name in SWITCHES}

        async def converged() -> bool:
            switches = (await admin.ListSwitches(admin_pb2.ListSwitchesRequest())).switches
            return len(switches) == len(SWITCHES) and all(
                s.connected and s.converged for s in switches
            )

        async def every_link_up() -> bool:
            down = (await admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True))).links
            return not down and await converged()

        await until(every_link_up, "every agent connected, every link up, converged", agents)
        assert ports_used(await state_of(admin, TOR)) >= {3, 4}
        assert not await alarms(admin)

        # The disk fills up under the running controller.
        filler = state_dir / "filler"
        await asyncio.to_thread(fill, filler)
        tor = agents[TOR]
        down3 = await tor.port(3, up=False)
        down4 = await tor.port(4, up=False)

        async def both_down() -> bool:
            links = await link_states(admin)
            return all(links[(TOR, p)].state == K.LINK_STATE_DOWN for p in (3, 4))

        async def alarm_up() -> bool:
            return STORE_ALARM in await alarms(admin)

        await until(both_down, f"{TOR} ports 3 and 4 down", agents)
        await until(alarm_up, f"the {STORE_ALARM} alarm", agents)
        assert proc.poll() is None, "the controller ended when its disk filled up"
        alarm = (await alarms(admin))[STORE_ALARM]
        assert alarm.kind == STORE_ALARM and alarm.severity == K.SEVERITY_CRITICAL
        assert str(store_file) in alarm.message and "full" in alarm.message, alarm.message
        diagnosis = await admin.Diagnose(admin_pb2.DiagnoseRequest())
        assert not diagnosis.healthy
        assert any(
            f.kind == STORE_ALARM and f.severity == K.SEVERITY_CRITICAL for f in diagnosis.findings
        ), diagnosis
        assert {(f.switch_name, f.port) for f in diagnosis.findings if f.kind == "link_down"} == {
            (TOR, 3),
            (TOR, 4),
        }

        # Deciding and forwarding go on from memory: the cut is routed around and every agent
        # got (and applied) what it demands.
        async def cut_routed() -> bool:
            tor_state = await state_of(admin, TOR)
            spines = [await state_of(admin, s) for s in ("spine-p1-1", "spine-p1-2")]
            return not ports_used(tor_state) & {3, 4} and all(
                1 not in ports_used(s) for s in spines
            )

        await until(cut_routed, "routes around both cut uplinks", agents)
        await until(converged, "every agent applied the cut", agents)
        for name in (TOR, "spine-p1-1", "spine-p1-2"):
            held = agents[name].state
            # The same content; the order of repeated fields is not part of a state.
            desired = await state_of(admin, name)
            assert held is not None, name
            assert (held.generation, held.digest) == (desired.generation, desired.digest), name
            assert canonical(held) == canonical(desired), name

        # More inputs while full: port 4 returns (hold-down 0.2 s, then back in routing), and
        # a counter report.
        up4 = await tor.port(4, up=True)
        await agents["spine-p1-1"].agent.send(
            counters=control_pb2.Counters(
                wall_ns=time.time_ns(), ports=[control_pb2.PortCounters(port=1, rx_packets=7)]
            )
        )

        async def port4_back() -> bool:
            links = await link_states(admin)
            if links[(TOR, 4)].state != K.LINK_STATE_UP:
                return False
            spine2 = await state_of(admin, "spine-p1-2")
            return ports_used(await state_of(admin, TOR)) & {3, 4} == {4} and 1 in ports_used(
                spine2
            )

        await until(port4_back, f"{TOR} port 4 back in routing", agents)
        await until(converged, "every agent applied the return of port 4", agents)
        links_full = await link_states(admin)
        assert links_full[(TOR, 3)].state == K.LINK_STATE_DOWN
        assert 1 not in ports_used(await state_of(admin, "spine-p1-1"))
        assert STORE_ALARM in await alarms(admin)
        assert os.statvfs(state_dir).f_bavail == 0, "the disk was never full"
        assert proc.poll() is None, "the controller ended while its disk was full"

        # Space comes back: the held records are written and the alarm clears.
        filler.unlink()

        async def alarm_cleared() -> bool:
            return STORE_ALARM not in await alarms(admin)

        await until(alarm_cleared, f"the {STORE_ALARM} alarm cleared", agents)
        diagnosis = await admin.Diagnose(admin_pb2.DiagnoseRequest())
        assert not any(f.kind == STORE_ALARM for f in diagnosis.findings), diagnosis
        before = await events(admin)
        links_before = await link_states(admin)
        for agent in agents.values():
            agent.check()
            agent.stopping = True

        # A clean stop with the agents still connected, and a restart on the same directory.
        assert await stop(proc) == 0
    with logs[1].open("wb") as log:
        proc = launch(processes, port, state_dir, log)
    addr = await start(processes, port, state_dir, launch=False)
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        after = await events(admin)
        links_after = await link_states(admin)
        alarms_after = await alarms(admin)
    assert await stop(proc) == 0
    for agent in agents.values():
        agent.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await agent.task
        await agent.agent.close()

    # Every event the first controller reported is in the store, in order (what it recorded
    # while stopping, its agents' sessions ending, comes after).
    assert len(after) >= len(before)
    assert after[: len(before)] == before
    ours = [e for e in after if e.switch_name == TOR and e.port in (3, 4)]
    port_events = [
        (e.type, e.port, e.port_change.up, e.port_change.detected_wall_ns)
        for e in ours
        if e.WhichOneof("detail") == "port_change"
    ]
    assert port_events == [
        (K.EVENT_KIND_PORT_DOWN, 3, False, down3),
        (K.EVENT_KIND_PORT_DOWN, 4, False, down4),
        (K.EVENT_KIND_PORT_UP, 4, True, up4),
    ]
    # (Before the cut, the eight links came up as their agents said Hello.)
    link_events = [
        (e.type, e.link_change.a.switch_name, e.link_change.a.port, e.link_change.usable)
        for e in after
        if e.WhichOneof("detail") == "link_change" and e.wall_ns >= down3
    ]
    assert link_events == [
        (K.EVENT_KIND_LINK_DOWN, TOR, 3, False),
        (K.EVENT_KIND_LINK_DOWN, TOR, 4, False),
        (K.EVENT_KIND_LINK_UP, TOR, 4, True),
    ]
    raised = [
        i
        for i, e in enumerate(after)
        if e.type == K.EVENT_KIND_ALARM_RAISED and "store cannot be written" in e.message
    ]
    cleared = [
        i
        for i, e in enumerate(after)
        if e.type == K.EVENT_KIND_ALARM_CLEARED and "store takes writes again" in e.message
    ]
    assert len(raised) == 1 and len(cleared) == 1, [e.message for e in after]
    last_port_event = max(i for i, e in enumerate(after) if e in ours)
    assert raised[0] < cleared[0] and cleared[0] > last_port_event
    assert after[raised[0]].wall_ns == alarm.raised_wall_ns

    # The links as they were left; no alarm came back.
    assert links_after.keys() == links_before.keys()
    for key, link in links_before.items():
        again = links_after[key]
        assert (again.state, again.flaps) == (link.state, link.flaps), key
        assert abs(again.since_wall_ns - link.since_wall_ns) < 1_000_000_000, key
    assert links_after[(TOR, 3)].state == K.LINK_STATE_DOWN
    assert links_after[(TOR, 4)].state == K.LINK_STATE_UP
    assert STORE_ALARM not in alarms_after

    first, second = (path.read_text(errors="replace") for path in logs)
    assert "Traceback" not in first + second, first + second
    assert "store unavailable:" in first and "available again" in first, first


def _truncated(tmp_path: Path, store_file: Path) -> None:
    """A real store, written by a controller that ran and stopped, cut to half its size."""
    state_dir = store_file.parent
    with (tmp_path / "first-run.log").open("wb") as log:
        proc = subprocess.Popen(
            argv(state_dir),
            stderr=log,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while not (
            store_file.exists() and "serving fabric" in (tmp_path / "first-run.log").read_text()
        ):
            assert proc.poll() is None, (tmp_path / "first-run.log").read_text()
            assert time.monotonic() < deadline, "the first controller never served"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0, (tmp_path / "first-run.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    size = store_file.stat().st_size
    assert size >= 8192, size
    with store_file.open("r+b") as f:
        f.truncate(size // 2)


def _garbage(tmp_path: Path, store_file: Path) -> None:
    store_file.parent.mkdir(parents=True, exist_ok=True)
    store_file.write_bytes(random.Random(7).randbytes(16_384))


@pytest.mark.parametrize("spoil", [_truncated, _garbage], ids=["truncated", "garbage"])
def test_a_corrupt_store_is_refused_with_the_file_and_the_two_choices(
    spoil: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    store_file = state_dir / FILE_NAME
    spoil(tmp_path, store_file)
    kept = store_file.read_bytes()
    listing = sorted(os.listdir(state_dir))

    done = subprocess.run(
        argv(state_dir),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    message = lines[0]
    assert "Traceback" not in done.stderr
    assert f"{store_file}: the controller's store cannot be read (" in message, message
    assert "move it aside" in message and f"mv {store_file} {store_file}.corrupt" in message
    assert "restore a backup" in message
    assert store_file.read_bytes() == kept, "the store file was changed"
    assert sorted(os.listdir(state_dir)) == listing
