"""The agent daemon as a process, against a real softswitch process and a small controller
servicer written here (the real controller daemon is built elsewhere): first programming,
restart with zero writes, local repair when a cable is pulled, a second agent with the same or
a lower election id that cannot take the switch over, a takeover reported and stood down from,
and the whole of it over mutual TLS."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc

from agent.codec import Codec
from agent.p4client import P4Target
from agent.translate import GroupEntry, GroupMember, Op, Pipeline, RouteEntry, Update, translate
from railfabric import latency, tls
from railfabric.delta import diff_states
from railfabric.digest import state_digest
from railfabric.latency import Result, read_results
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import control_pb2, control_pb2_grpc, state_pb2
from tests import pki
from tests.conftest import Netns, Processes, ip
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


class TestController(control_pb2_grpc.FabricControlServicer):
    """One switch's controller: answers Hello with the DesiredState unless the agent already
    holds its digest, pushes what the test queues, and records what the agent says."""

    __test__ = False

    def __init__(self, state: state_pb2.DesiredState) -> None:
        self.state = state
        self.inbox: asyncio.Queue[control_pb2.AgentMessage] = asyncio.Queue(maxsize=1000)
        self.push: asyncio.Queue[control_pb2.ControllerMessage] = asyncio.Queue(maxsize=10)
        self.neighbors = control_pb2.Neighbors()
        self.counters = control_pb2.Counters()
        # The latency probe results of every counter report, in order.
        self.probes: list[Result] = []
        # Every target health the agent reported, in a Hello or a TargetHealth message.
        self.healths: list[control_pb2.TargetHealth] = []

    async def Session(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[control_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    ) -> None:
        async def pump() -> None:
            while True:
                await context.write(await self.push.get())

        pusher = asyncio.create_task(pump())
        try:
            async for msg in request_iterator:
                if msg.WhichOneof("msg") == "hello" and msg.hello.applied_digest != (
                    self.state.digest
                ):
                    await context.write(control_pb2.ControllerMessage(desired_state=self.state))
                kind = msg.WhichOneof("msg")
                if kind == "hello":
                    self.healths.append(msg.hello.target_health)
                elif kind == "target_health":
                    self.healths.append(msg.target_health)
                if kind == "neighbors":
                    self.neighbors = msg.neighbors
                elif kind == "counters":
                    self.counters = msg.counters
                    self.probes.extend(read_results(msg.counters.probe_results))
                else:
                    await self.inbox.put(msg)
        finally:
            pusher.cancel()

    async def next(self, kind: str, within_s: float = 20) -> control_pb2.AgentMessage:
        async with asyncio.timeout(within_s):
            while True:
                msg = await self.inbox.get()
                if msg.WhichOneof("msg") == kind:
                    return msg


@dataclass
class Rig:
    netns: Netns
    wire: str
    switch_links: dict[int, str]
    wire_links: dict[int, str]
    target_addr: str
    controller_addr: str
    softswitch: subprocess.Popen[bytes]
    softswitch_argv: list[str]
    # The switch's certificate: softswitch serves mutual TLS with it, the agent connects (to
    # softswitch and to the controller) with it.
    tls_files: tls.TlsFiles


def _wait_listening(addr: str, timeout: float = 20) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 0.2):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {addr}")


def _make_rig(
    netns: Netns,
    processes: Processes,
    free_port: Callable[[], int],
    tmp_path: Path,
    *,
    loop_1_2: bool,
    switch: str = "tor-r0-b0",
) -> Rig:
    """Switch ports 1..3 as root-namespace veths whose peers sit in a "wire" namespace (a
    pulled cable = the wire end going down), and softswitch serving them, over mutual TLS
    with the certificate of `switch`. With `loop_1_2`, ports 1 and 2 are instead cabled to
    each other."""
    tls_files = pki.switch(switch)
    wire = netns.add("wire")
    switch_links = {p: f"rf{netns.tag}s{p}" for p in (1, 2, 3)}
    wire_links = {p: f"rf{netns.tag}w{p}" for p in (1, 2, 3)}
    if loop_1_2:
        netns.veth(switch_links[1], None, switch_links[2], None)
        del wire_links[1], wire_links[2]
    for port, wire_end in wire_links.items():
        netns.veth(switch_links[port], None, wire_end, wire)
    target = f"127.0.0.1:{free_port()}"
    argv = [str(BIN / "railfabric-softswitch"), "--device-id", "1", "--grpc-addr", target]
    argv += pki.flags(tls_files)
    for port, name in switch_links.items():
        argv += ["-i", f"{port}@{name}"]
    log = (tmp_path / "softswitch.log").open("wb")
    proc = processes.start(argv, stdout=log, stderr=log)
    try:
        _wait_listening(target)
    except TimeoutError:
        proc.kill()
        pytest.fail(f"softswitch did not start: {(tmp_path / 'softswitch.log').read_text()}")
    return Rig(
        netns,
        wire,
        switch_links,
        wire_links,
        target,
        f"127.0.0.1:{free_port()}",
        proc,
        argv,
        tls_files,
    )


@pytest.fixture
def rig(netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path) -> Rig:
    return _make_rig(netns, processes, free_port, tmp_path, loop_1_2=False)


@pytest.fixture
def loop_rig(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> Rig:
    return _make_rig(netns, processes, free_port, tmp_path, loop_1_2=True)


def _start_agent(
    rig: Rig,
    processes: Processes,
    tmp_path: Path,
    *,
    election_id: int = 10,
    name: str = "agent",
    controller: str | None = None,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    port_map = ",".join(f"{p}={n}" for p, n in rig.switch_links.items())
    log = (tmp_path / f"{name}.log").open("ab")
    return processes.start(
        [
            str(BIN / "railfabric-agent"),
            "--switch", "tor-r0-b0",
            "--controller", controller or rig.controller_addr,
            "--target", rig.target_addr,
            "--device-id", "1",
            "--port-map", port_map,
            "--p4info", str(DEFAULT_P4INFO),
            "--election-id", str(election_id),
            "--lldp-interval", "0.5",
            "--counters-interval", "0.5",
            *pki.flags(rig.tls_files),
            *extra,
        ],
        stdout=log,
        stderr=log,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def _controller(addr: str, state: state_pb2.DesiredState) -> AsyncIterator[TestController]:
    """`TestController` serving mutual TLS with the controller's certificate."""
    servicer = TestController(state)
    server = grpc.aio.server()
    control_pb2_grpc.add_FabricControlServicer_to_server(servicer, server)
    tls.add_port(server, addr, tls.ServerTls(pki.controller()))
    await server.start()
    try:
        yield servicer
    finally:
        await server.stop(grace=None)


@contextlib.asynccontextmanager
async def _reader(addr: str, tls_files: tls.TlsFiles) -> AsyncIterator[P4Target]:
    """A second P4Runtime client with a low election id (and `tls_files`, the switch's
    certificate: only its own may open a stream): a backup, which may read."""
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    target = P4Target(addr, 1, 1, codec, tls=tls_files)

    async def nothing(*_: object) -> None:
        return None

    task = asyncio.create_task(target.run(nothing, nothing), name="test-reader")
    try:
        async with asyncio.timeout(10):
            while target._client is None:  # noqa: ASYNC110  (connection made by run())
                await asyncio.sleep(0.05)
        yield target
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _read(reader: P4Target) -> Pipeline:
    async with asyncio.timeout(10):
        while True:
            with contextlib.suppress(Exception):
                pipeline, _ = await reader.read_pipeline()
                return pipeline
            await asyncio.sleep(0.1)


async def test_program_restart_with_zero_writes_and_local_repair(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    state = tor_state(1)
    async with _controller(rig.controller_addr, state) as ctrl:
        agent = _start_agent(rig, processes, tmp_path)
        hello = await ctrl.next("hello")
        assert hello.hello.switch_name == "tor-r0-b0" and hello.hello.applied_generation == 0
        assert [(p.port, p.oper_up) for p in hello.hello.ports] == [(1, True), (2, True), (3, True)]
        applied = (await ctrl.next("applied")).applied
        assert applied.generation == 1 and not applied.errors, applied
        assert applied.digest == state.digest
        want, _ = translate(state)
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            assert dict((await _read(reader)).entries) == dict(want.entries)

        # Restart the agent: it reads the target back and writes nothing.
        os.killpg(agent.pid, signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
        _start_agent(rig, processes, tmp_path)
        assert (await ctrl.next("hello")).hello.applied_generation == 0
        again = (await ctrl.next("applied")).applied
        assert (again.generation, again.updates_written, len(again.errors)) == (1, 0, 0)

        # Pull the cable on port 1: PortStatus at once, then members on port 1 leave every
        # group in one Write, and LocalRepair says so.
        ip("link", "set", rig.wire_links[1], "down", netns=rig.wire)
        status = (await ctrl.next("port_status")).port_status
        assert (status.port, status.up) == (1, False) and status.wall_ns > 0
        repair = (await ctrl.next("local_repair")).local_repair
        assert (repair.port, repair.groups_repaired, repair.detected_wall_ns) == (
            1,
            1,
            status.wall_ns,
        )
        assert repair.committed_wall_ns >= status.wall_ns and repair.latency_ns > 0
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            group = (await _read(reader)).entries[("group", 1)]
        assert group == GroupEntry(1, (GroupMember(2, 0, 1),))

        # Cable back: the port stays out until the controller's next state says otherwise.
        ip("link", "set", rig.wire_links[1], "up", netns=rig.wire)
        status = (await ctrl.next("port_status")).port_status
        assert (status.port, status.up) == (1, True)
        nxt = tor_state(2)
        nxt.ecn[0].kmin_bytes = 110_000
        ctrl.state = nxt
        await ctrl.push.put(control_pb2.ControllerMessage(state_delta=diff_states(state, nxt)))
        applied = (await ctrl.next("applied")).applied
        assert applied.generation == 2 and not applied.errors
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            got = await _read(reader)
        assert got.entries[("group", 1)] == GroupEntry(
            1, (GroupMember(1, 1, 1), GroupMember(2, 2, 1))
        )
        assert got.entries[("ecn", 1, 3)] == translate(nxt)[0].entries[("ecn", 1, 3)]


@pytest.mark.parametrize("second_id", [5, 10])
async def test_the_same_or_a_lower_election_id_cannot_take_the_switch(
    rig: Rig, processes: Processes, tmp_path: Path, free_port: Callable[[], int], second_id: int
) -> None:
    state = tor_state(1)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path, election_id=10)
        assert (await ctrl.next("applied")).applied.generation == 1
        first = await _health(ctrl, lambda h: h.primary)
        # A second agent for the same switch, told by another controller to remove every
        # route, connects with the same election id (refused by the target: its stream ends)
        # or a lower one (a backup): either way it never becomes primary and writes nothing.
        other = tor_state(1)
        del other.routes[:]
        other.digest = "other"
        second = f"127.0.0.1:{free_port()}"
        async with _controller(second, other) as ctrl2:
            _start_agent(
                rig, processes, tmp_path, election_id=second_id, name="second", controller=second
            )
            await ctrl2.next("hello")
            with pytest.raises(TimeoutError):
                await ctrl2.next("applied", within_s=3)
            assert ctrl2.healths and not any(h.primary for h in ctrl2.healths)
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            got = await _read(reader)
        assert dict(got.entries) == dict(translate(state)[0].entries)
        assert all(h.primary for h in ctrl.healths[ctrl.healths.index(first) :])
    log = (tmp_path / "second.log").read_text()
    assert "primary (election id" not in log, log


async def _until(predicate: Callable[[], bool], within_s: float = 20) -> None:
    async with asyncio.timeout(within_s):
        while not predicate():  # noqa: ASYNC110  (polls what the servicer recorded)
            await asyncio.sleep(0.05)


async def test_lldp_neighbours_counters_and_headless_repair(
    loop_rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    """Ports 1 and 2 are cabled to each other, so the switch hears its own LLDPDUs: packet-out
    on one port, packet-in (punted by the agent's ACL) on the other."""
    rig = loop_rig
    state = tor_state(1)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path)
        assert (await ctrl.next("applied")).applied.generation == 1

        def heard() -> set[tuple[int, str, str]]:
            return {(n.port, n.chassis_id, n.port_id) for n in ctrl.neighbors.neighbors}

        await _until(lambda: heard() == {(1, "tor-r0-b0", "2"), (2, "tor-r0-b0", "1")})
        assert all(n.ttl_s == 4 and n.last_seen_wall_ns > 0 for n in ctrl.neighbors.neighbors)

        def rx(port: int) -> int:
            return next((c.rx_packets for c in ctrl.counters.ports if c.port == port), 0)

        await _until(lambda: rx(1) > 0 and rx(2) > 0)

    # Controller gone: the agent is headless and still repairs locally.
    ip("link", "set", rig.wire_links[3], "down", netns=rig.wire)
    async with _reader(rig.target_addr, rig.tls_files) as reader:
        async with asyncio.timeout(10):
            repaired = GroupEntry(2, ())
            while (await _read(reader)).entries[("group", 2)] != repaired:  # noqa: ASYNC110
                await asyncio.sleep(0.1)

    # The controller returns: the agent proves what it holds, and reports the port down.
    async with _controller(rig.controller_addr, state) as ctrl:
        hello = (await ctrl.next("hello", within_s=30)).hello
        assert (hello.applied_generation, hello.applied_digest) == (1, state.digest)
        assert {p.port: p.oper_up for p in hello.ports} == {1: True, 2: True, 3: False}


def _wire(
    rig: Rig, processes: Processes, mode: str, *, delay_ms: float = 0, loss: float = 0
) -> subprocess.Popen[bytes]:
    """Ports 1 and 2 cabled through a user-space wire (mininet_labs.delay_line): both ways, or
    only from port 2 to port 1 ("2to1", a one-way failure: this kernel has no tc qdisc to
    drop one direction with), after `delay_ms`, dropping the fraction `loss` of frames."""
    a, b = rig.wire_links[1], rig.wire_links[2]
    argv = ["ip", "netns", "exec", rig.wire, sys.executable, "-m", "mininet_labs.delay_line"]
    argv += [a, b, "--delay-ms", str(delay_ms), "--loss", str(loss)]
    if mode == "2to1":
        argv += ["--one-way-from", b]
    proc = processes.start(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


async def test_silent_neighbour_is_a_one_way_failure(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    """Ports 1 and 2 are cabled to each other through a user-space wire. When the wire stops
    carrying port 1's frames (both carriers stay up), port 2 stops hearing LLDP and the agent
    treats it as down (repair, PortStatus) until it hears again."""
    state = tor_state(1)
    wire = _wire(rig, processes, "both")
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path, extra=("--lldp-interval", "0.2", "--lldp-ttl", "1"))
        assert (await ctrl.next("applied")).applied.generation == 1
        await _until(lambda: {n.port for n in ctrl.neighbors.neighbors} == {1, 2})
        _stop(wire)
        wire = _wire(rig, processes, "2to1")
        status = (await ctrl.next("port_status")).port_status
        assert (status.port, status.up) == (2, False)
        repair = (await ctrl.next("local_repair")).local_repair
        assert (repair.port, repair.groups_repaired) == (2, 1)
        assert {n.port for n in ctrl.neighbors.neighbors} == {1}
        _stop(wire)
        wire = _wire(rig, processes, "both")
        status = (await ctrl.next("port_status")).port_status
        assert (status.port, status.up) == (2, True)


PROBE_ADDRESS = 0x0A000001  # the ToR's gateway in tor_state


def _probing_state() -> state_pb2.DesiredState:
    """tor_state probing its links and, as its one mesh target, its own probe address: cabled
    port 1 to port 2, a mesh probe out of either comes back in on the other, is answered by
    this same switch's data plane (the ACL answers IPv4 protocol 253 to the ToR's probe
    address), and its answer returns to the agent."""
    state = tor_state(1)
    for n in state.neighbors:  # the plan says what the wire does: port 1 to port 2
        if n.port in (1, 2):
            n.peer_name, n.peer_port = state.switch_name, 3 - n.port
    state.probing.interval_ms = 100
    state.probing.links = True
    state.probing.address = PROBE_ADDRESS
    state.probing.targets.add(name="tor-r0-b0", address=PROBE_ADDRESS)
    state.probing.targets_per_round = 1
    state.probing.timeout_ms = 1000
    state.probing.dscp = 26
    state.digest = state_digest(state)
    return state


def _rtts(results: list[Result], kind: int) -> tuple[int, int, dict[int, int]]:
    """Sent, received and the merged RTT histogram of `results` of `kind`."""
    buckets: dict[int, int] = {}
    sent = received = 0
    for r in results:
        if r.kind == kind:
            sent, received = sent + r.sent, received + r.received
            latency.merge(buckets, r.bucket_index, r.bucket_count)
    return sent, received, buckets


async def test_latency_probes_measure_the_cable_they_cross(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    """Link and mesh probes through a real softswitch over a cable that delays 15 ms each
    way: every probe is answered, each RTT is at least the 30 ms the cable adds and the
    median is within 15 ms of it; with the cable dropping a quarter of frames at random, the
    link probes lost are those that crossed it there or back."""
    state = _probing_state()
    wire = _wire(rig, processes, "both", delay_ms=15)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path)
        assert (await ctrl.next("applied")).applied.generation == 1
        kinds = (control_pb2.PROBE_KIND_LINK, control_pb2.PROBE_KIND_MESH)
        await _until(lambda: min(_rtts(ctrl.probes, kind)[1] for kind in kinds) >= 10)
        for kind in kinds:
            sent, received, buckets = _rtts(ctrl.probes, kind)
            assert received >= 10 and sent == received, (kind, sent, received)
            low = latency.percentile_ns(buckets, 0.01)
            median = latency.percentile_ns(buckets, 0.5)
            assert low is not None and median is not None
            assert low >= 30_000_000 and median <= 45_000_000, (kind, low, median, received)
        ports = {(r.kind, r.port, r.target) for r in ctrl.probes}
        assert ports == {  # the cable's end that sorts first probes it (probes_link)
            (control_pb2.PROBE_KIND_LINK, 1, ""),
            (control_pb2.PROBE_KIND_MESH, 1, "tor-r0-b0"),
            (control_pb2.PROBE_KIND_MESH, 2, "tor-r0-b0"),
        }

        _stop(wire)
        wire = _wire(rig, processes, "both", delay_ms=1, loss=0.25)
        # Past the probes lost while the cable was swapped (timeout 1 s, reports every 0.5 s).
        await asyncio.sleep(2)
        before = len(ctrl.probes)
        await _until(lambda: _rtts(ctrl.probes[before:], control_pb2.PROBE_KIND_LINK)[0] >= 100)
        sent, received, _ = _rtts(ctrl.probes[before:], control_pb2.PROBE_KIND_LINK)
        # There and back: 1 - (3/4)^2 = 44% lost.
        assert 0.25 <= 1 - received / sent <= 0.6, (sent, received)


async def test_a_restarted_target_is_reprogrammed(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    state = tor_state(1)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path)
        first = (await ctrl.next("applied")).applied
        assert first.generation == 1 and not first.errors
        # softswitch dies and comes back empty (no pipeline, no entries).
        os.killpg(rig.softswitch.pid, signal.SIGKILL)
        rig.softswitch.wait(timeout=10)
        log = (tmp_path / "softswitch.log").open("ab")
        processes.start(rig.softswitch_argv, stdout=log, stderr=log)
        again = (await ctrl.next("applied", within_s=30)).applied
        assert again.generation == 1 and not again.errors
        want, _ = translate(state)
        # Everything but hash_config's and pfc_watchdog's defaults, which a fresh target
        # already holds (NoAction; this state has no watchdog timing).
        assert again.updates_written == len(want) - 2
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            assert dict((await _read(reader)).entries) == dict(want.entries)


async def _health(
    ctrl: TestController,
    check: Callable[[control_pb2.TargetHealth], bool],
    within_s: float = 20,
    after: control_pb2.TargetHealth | None = None,
) -> control_pb2.TargetHealth:
    """The first target health the agent reported (after `after`) that passes `check`."""
    start = 0 if after is None else ctrl.healths.index(after) + 1
    async with asyncio.timeout(within_s):
        while True:
            for health in ctrl.healths[start:]:
                if check(health):
                    return health
            await asyncio.sleep(0.05)


async def test_a_takeover_is_reported_and_what_it_deleted_is_put_back(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    state = tor_state(1)
    want, _ = translate(state)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path, election_id=10)
        assert (await ctrl.next("applied")).applied.generation == 1
        ok = await _health(
            ctrl, lambda h: h.reachable and h.primary and h.last_read_back_wall_ns > 0
        )

        # Another client with a higher election id takes the target and deletes a route.
        codec = Codec(load_p4info(DEFAULT_P4INFO))
        intruder = P4Target(rig.target_addr, 1, 20, codec, tls=rig.tls_files)
        became_primary = asyncio.Event()

        async def primary() -> None:
            became_primary.set()

        async def nothing(*_: object) -> None:
            return None

        task = asyncio.create_task(intruder.run(primary, nothing), name="intruder")
        try:
            async with asyncio.timeout(10):
                await became_primary.wait()
            lost = await _health(ctrl, lambda h: not h.primary, after=ok)
            assert lost.reachable and "20" in lost.error, lost
            # Who holds the target now, for the controller's mastership_lost alarm.
            assert (lost.primary_election_id, lost.election_id) == ("20", "10")
            route = next(e for e in want.entries.values() if isinstance(e, RouteEntry))
            assert await intruder.write([codec.encode_update(Update(Op.DELETE, route))]) == []
            # The agent stands down (the default): it does not outbid the intruder.
            await asyncio.sleep(1.0)
            assert intruder.primary.is_set()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # The intruder left: the agent is primary again, reads back, and repairs.
        # (The first report after the loss is "primary again" with the old read-back.)
        back = await _health(
            ctrl, lambda h: h.last_read_back_wall_ns > ok.last_read_back_wall_ns, after=lost
        )
        assert back.primary
        assert (back.missing, back.unexpected, back.modified) == (1, 0, 0)
        assert back.repaired_wall_ns >= back.last_read_back_wall_ns > 0
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            assert dict((await _read(reader)).entries) == dict(want.entries)


async def test_an_entry_deleted_behind_the_agent_is_found_by_the_periodic_read_back(
    rig: Rig, processes: Processes, tmp_path: Path
) -> None:
    """The agent's read-back runs every --verify-interval, not only at (re)connection: an
    entry lost while the agent stays primary (here: deleted by the primary of another
    P4Runtime role, as a tool on the switch could do) is back within one interval."""
    state = tor_state(1)
    want, _ = translate(state)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path, election_id=10, extra=("--verify-interval", "1"))
        assert (await ctrl.next("applied")).applied.generation == 1
        # After the first state was applied, a read-back that found nothing missing.
        first = await _health(ctrl, lambda h: h.primary and h.last_read_back_wall_ns > 0)
        first = await _health(ctrl, lambda h: h.missing == 0, after=first)
        assert first.verify_interval_s == 1
        codec = Codec(load_p4info(DEFAULT_P4INFO))
        route = next(e for e in want.entries.values() if isinstance(e, RouteEntry))
        async with pki.channel(rig.target_addr, rig.tls_files) as channel:
            stub: Any = p4r_grpc.P4RuntimeStub(channel)
            stream = stub.StreamChannel()
            await stream.write(
                p4r.StreamMessageRequest(
                    arbitration=p4r.MasterArbitrationUpdate(
                        device_id=1, election_id=p4r.Uint128(low=1), role=p4r.Role(name="tool")
                    )
                )
            )
            reply = await asyncio.wait_for(stream.read(), 5)
            assert reply.arbitration.status.code == 0, reply  # primary of its own role
            await stub.Write(
                p4r.WriteRequest(
                    device_id=1,
                    election_id=p4r.Uint128(low=1),
                    role="tool",
                    updates=[codec.encode_update(Update(Op.DELETE, route))],
                    atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
                ),
                timeout=5,
            )
            stream.cancel()
        found = await _health(ctrl, lambda h: h.missing > 0, within_s=10, after=first)
        assert (found.missing, found.unexpected, found.modified) == (1, 0, 0)
        assert found.repaired_wall_ns > 0
        # Found by the periodic read-back: the agent never stopped being primary.
        assert all(h.primary for h in ctrl.healths[ctrl.healths.index(first) :])
        async with _reader(rig.target_addr, rig.tls_files) as reader:
            assert dict((await _read(reader)).entries) == dict(want.entries)


async def test_agent_and_softswitch_over_mutual_tls(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    """softswitch serves mutual TLS with tor-r0-b0's certificate, the agent connects to it
    (and to the controller) with the same: programmed, and read back by a backup client of
    the same identity."""
    own = pki.switch("tor-r0-b0")
    rig = _make_rig(netns, processes, free_port, tmp_path, loop_1_2=False)
    assert rig.tls_files == own
    state = tor_state(1)
    async with _controller(rig.controller_addr, state) as ctrl:
        _start_agent(rig, processes, tmp_path)
        applied = (await ctrl.next("applied")).applied
        assert applied.generation == 1 and not applied.errors, applied
        health = await _health(ctrl, lambda h: h.primary)
        assert (health.primary_election_id, health.election_id) == ("10", "10")
        async with _reader(rig.target_addr, own) as reader:
            assert dict((await _read(reader)).entries) == dict(translate(state)[0].entries)
    log = (tmp_path / "softswitch.log").read_text()
    assert "mutual TLS as switch/tor-r0-b0" in log, log
