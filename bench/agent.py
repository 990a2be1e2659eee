"""`python -m bench.agent [--json]`: the agent's figures, measured on real parts.

- Local repair: a softswitch process whose ports are veths, the agent's own port monitor,
  P4Runtime client and writer in this process; the peer end of a port's veth goes down
  (a pulled cable) >= 50 times, and each time the time from the netlink event to the committed
  Write that removed the port from every group is taken, as the agent reports it in
  LocalRepair.latency_ns (the same figure it logs for people).
- Programming: the largest switch of the ref-100k fabric (routes and groups from the
  controller's routing) written from scratch into softswitch by the agent's writer (entries
  and entries per second); `--fabric synthetic` programs a synthetic state instead. The agent
  (this process) and softswitch are pinned to CPUs of their own (bench/pinning.py), as a
  switch's agent and its target do not share a CPU: floating over this machine's two, they
  now and then took turns on one.
- Reconcile: after each programming, an agent restart: a fresh writer and P4 client, holding
  the same state, become primary, read every entry back, compare and write nothing (entries
  read and seconds; a restarted agent that writes anything fails the bench).
- Global convergence: the lab fabric (examples/lab-2rail.yaml) run by `mininet_labs.lab.Lab`
  (controller daemon, softswitch and agent processes, cables through a wire namespace); a
  switch-to-switch cable is pulled (both ends lose carrier) >= 20 times, cycling over every
  cable so flap damping never holds one back, and restored after each cut, waiting for the
  hold-down to return it to routing before the next cut. Each cut's figure is the
  controller's own CONVERGED event, read from its typed ConvergenceFigures (never from the
  event's text): the first agent's netlink event (its PortStatus wall time) -> the last Applied
  of the deltas it caused, split into report (PortStatus received), recompute, push (-> the
  last agent received its delta) and apply; detection (cable pulled -> netlink event) is
  measured beside it.

Needs root (namespaces) and `railfabric-softswitch`."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from agent.codec import Codec
from agent.p4client import P4Target, PacketIn
from agent.ports import PortMonitor
from agent.writer import Writer
from bench.output import percentile
from bench.pinning import Pinning, pinned, plan_pinning
from mininet_labs.processes import this_checkout_env
from railfabric.digest import state_digest
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import admin_pb2, control_pb2, state_pb2

if TYPE_CHECKING:
    from mininet_labs.lab import Lab as MininetLab

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
SOFTSWITCH = Path(sys.executable).parent / "railfabric-softswitch"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Lab:
    wire_ns: str
    switch_links: dict[int, str]
    wire_links: dict[int, str]
    target: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def lab(ports: Iterable[int], prefix: Sequence[str] = ()) -> Iterator[Lab]:
    """Veths (switch end in this namespace, peer in a private "wire" namespace) and a
    softswitch on them, its command line after `prefix` (taskset); all removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    wire_ns = f"rfb{tag}-wire"
    switch_links = {p: f"rfb{tag}s{p}" for p in ports}
    wire_links = {p: f"rfb{tag}w{p}" for p in ports}
    proc: subprocess.Popen[bytes] | None = None
    _ip("netns", "add", wire_ns)
    try:
        for port, name in switch_links.items():
            _ip("link", "add", name, "type", "veth", "peer", "name", wire_links[port])
            _ip("link", "set", wire_links[port], "netns", wire_ns)
            _ip("link", "set", name, "up")
            _ip("-n", wire_ns, "link", "set", wire_links[port], "up")
        target = f"127.0.0.1:{_free_port()}"
        argv = [
            *prefix,
            str(SOFTSWITCH),
            "--device-id",
            "1",
            "--grpc-addr",
            target,
            "--log-level",
            "WARNING",
            "--insecure",
        ]
        for port, name in switch_links.items():
            argv += ["-i", f"{port}@{name}"]
        proc = subprocess.Popen(argv, start_new_session=True, env=this_checkout_env())
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", int(target.rsplit(":", 1)[1])), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("softswitch did not start") from None
                time.sleep(0.1)
        yield Lab(wire_ns, switch_links, wire_links, target)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "del", wire_ns], check=False, capture_output=True)
        for name in switch_links.values():
            subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def tor_state(ports: int, generation: int) -> state_pb2.DesiredState:
    """A ToR whose ports 1..ports are uplinks, with a group for every set of uplinks that
    contains port 1 (so a cut of port 1 repairs all of them) and a route per group."""
    state = state_pb2.DesiredState(switch_name="bench-tor", generation=generation)
    for port in range(1, ports + 1):
        state.ports.add(port=port, mac=0x02AA00000000 | port, speed_mbps=400_000)
    others = list(range(2, ports + 1))
    for mask in range(1 << len(others)):
        group = state.groups.add(id=mask + 1)
        for port in [1, *[p for i, p in enumerate(others) if mask >> i & 1]]:
            group.next_hops.add(port=port, dmac=0x02BB00000000 | port, weight=1)
        state.routes.add(
            prefix=state_pb2.Ipv4Prefix(address=(10 << 24) | (mask << 8), length=24),
            group_id=mask + 1,
        )
    state.digest = state_digest(state)
    return state


def fabric_switch_state(path: Path) -> state_pb2.DesiredState:
    """The routes and groups the controller's routing gives the largest switch of a fabric
    (most routes + groups), with its ports' MACs and the QoS DSCP map."""
    from controller.intent import load_fabric  # noqa: PLC0415  (bench-only dependency)
    from controller.routing import FabricRouting  # noqa: PLC0415

    fabric = load_fabric(path)
    routing = FabricRouting(fabric)
    switch = max(
        fabric.switches,
        key=lambda sw: len(routing.routes(sw.name)) + len(routing.groups(sw.name)),
    )
    ports = {link.a_port for link in fabric.links if link.a == switch.name}
    ports |= {link.b_port for link in fabric.links if link.b == switch.name}
    ports |= {nic.port for nic in fabric.nics if nic.switch == switch.name}
    state = state_pb2.DesiredState(switch_name=switch.name, generation=1)
    for port in sorted(ports):
        state.ports.add(port=port, mac=switch.port_mac(port))
    for group in routing.groups(switch.name):
        out = state.groups.add(id=group.id)
        for hop in group.next_hops:
            out.next_hops.add(port=hop.port, dmac=hop.dmac, weight=hop.weight)
    for route in routing.routes(switch.name):
        state.routes.add(
            prefix=state_pb2.Ipv4Prefix(address=route.prefix.address, length=route.prefix.length),
            group_id=route.group_id,
        )
    for dscp, tc in ((26, 3), (48, 6)):
        state.dscp_map.add(dscp=dscp, traffic_class=tc)
    state.digest = state_digest(state)
    return state


def spine_state(groups: int, routes: int) -> state_pb2.DesiredState:
    """A synthetic switch with `groups` groups over 32 ports and `routes` /24 routes."""
    state = state_pb2.DesiredState(switch_name="bench-spine", generation=1)
    for port in range(1, 33):
        state.ports.add(port=port, mac=0x02AA00000000 | port, speed_mbps=400_000)
    for gid in range(1, groups + 1):
        group = state.groups.add(id=gid)
        for port in sorted({1 + (gid * k) % 32 for k in (1, 3, 5, 7)}):
            group.next_hops.add(port=port, dmac=0x02BB00000000 | port, weight=1)
    for i in range(routes):
        state.routes.add(
            prefix=state_pb2.Ipv4Prefix(address=(10 << 24) | (i << 8), length=24),
            group_id=1 + i % groups,
        )
    for dscp, tc in ((26, 3), (48, 6)):
        state.dscp_map.add(dscp=dscp, traffic_class=tc)
    for port in range(1, 33):
        state.ecn.add(port=port, traffic_class=3, kmin_bytes=150_000, kmax_bytes=1_500_000,
                      pmax_ppm=100_000)  # fmt: skip
        state.pfc.add(port=port, priority=3, xoff_bytes=300_000, xon_bytes=200_000)
    state.digest = state_digest(state)
    return state


@dataclass
class Agent:
    """The agent's writer and P4 stream (and port monitor), as the daemon wires them, minus the
    controller: what it would send the controller, and when it last became primary."""

    writer: Writer
    out: asyncio.Queue[control_pb2.AgentMessage]
    primary_at: float = 0.0  # time.perf_counter()


@contextlib.asynccontextmanager
async def agent_parts(
    address: str,
    codec: Codec,
    *,
    switch_links: dict[int, str] | None = None,
    device_config: bytes = b"",
    state: state_pb2.DesiredState | None = None,
) -> AsyncIterator[Agent]:
    """An agent for the target at `address`, watching `switch_links` when given, holding
    `state` from the controller before it reaches the target when given (as after a restart,
    the controller's snapshot first)."""
    out: asyncio.Queue[control_pb2.AgentMessage] = asyncio.Queue(maxsize=10_000)
    target = P4Target(address, 1, 1, codec, device_config=device_config)
    writer = Writer(
        target,
        codec,
        on_applied=lambda m: out.put_nowait(control_pb2.AgentMessage(applied=m)),
        on_port_status=lambda m: out.put_nowait(control_pb2.AgentMessage(port_status=m)),
        on_local_repair=lambda m: out.put_nowait(control_pb2.AgentMessage(local_repair=m)),
        request_snapshot=lambda: None,
    )
    agent = Agent(writer, out)
    if state is not None:
        await writer.controller_message(control_pb2.ControllerMessage(desired_state=state))

    async def primary() -> None:
        agent.primary_at = time.perf_counter()
        await writer.target_ready()

    async def ignore(_: PacketIn) -> None:
        return None

    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(writer.run(), name="writer"),
            group.create_task(target.run(primary, ignore), name="p4-stream"),
        ]
        if switch_links is not None:
            monitor = PortMonitor(switch_links)
            tasks.append(group.create_task(monitor.run(writer.port_event), name="port-monitor"))
        try:
            yield agent
        finally:
            for task in tasks:
                task.cancel()


async def _next(
    out: asyncio.Queue[control_pb2.AgentMessage], kind: str
) -> control_pb2.AgentMessage:
    async with asyncio.timeout(30):
        while True:
            msg = await out.get()
            if msg.WhichOneof("msg") == kind:
                return msg


async def measure_local_repair(
    flaps: int, state: state_pb2.DesiredState, port: int
) -> tuple[list[float], int]:
    """Pull the cable of `port` `flaps` times with `state` programmed; after each return the
    controller's next generation puts the port back. (latencies in ms, groups per repair)."""
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    with lab([port]) as net:
        async with agent_parts(net.target, codec, switch_links=net.switch_links) as agent:
            writer, out = agent.writer, agent.out
            current = state_pb2.DesiredState()
            current.CopyFrom(state)
            await writer.controller_message(control_pb2.ControllerMessage(desired_state=current))
            await _next(out, "applied")
            latencies: list[float] = []
            groups = 0
            for _ in range(flaps):
                _ip("-n", net.wire_ns, "link", "set", net.wire_links[port], "down")
                status = (await _next(out, "port_status")).port_status
                assert not status.up, status
                # The figure the agent reports (what the controller's LOCAL_REPAIR event
                # carries).
                repair = (await _next(out, "local_repair")).local_repair
                assert repair.port == port and repair.groups_repaired > 0, repair
                assert repair.latency_ns > 0, repair
                latencies.append(repair.latency_ns / 1e6)
                groups = repair.groups_repaired
                _ip("-n", net.wire_ns, "link", "set", net.wire_links[port], "up")
                await _next(out, "port_status")
                current.generation += 1
                await writer.controller_message(
                    control_pb2.ControllerMessage(desired_state=current)
                )
                await _next(out, "applied")
            return latencies, groups


@dataclass(frozen=True)
class Programming:
    """A switch programmed from scratch by the agent, then reconciled by a restarted agent."""

    written: int  # updates the first agent wrote
    seconds: float  # DesiredState in the writer -> Applied
    read: int  # entries the restarted agent read back (it wrote none)
    reconcile_seconds: float  # primary on the target -> Applied

    @property
    def rate(self) -> float:
        return self.written / self.seconds


class ReconcileWrote(RuntimeError):
    """A restarted agent wrote to a target that already held its state: a failure."""


async def program(
    address: str, state: state_pb2.DesiredState, device_config: bytes = b""
) -> Programming:
    """The agent's writer taking `state` into the empty target at `address` (translate, diff,
    encode and the ordered Writes, until Applied); then an agent restart: a fresh writer and
    P4 client, given the same state, become primary, read every entry back, compare and must
    write nothing (ReconcileWrote otherwise), until Applied."""
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    async with agent_parts(address, codec, device_config=device_config) as agent:
        await agent.writer.synced.wait()  # connected, pipeline pushed, target read back
        started = time.perf_counter()
        await agent.writer.controller_message(control_pb2.ControllerMessage(desired_state=state))
        applied = (await _next(agent.out, "applied")).applied
        seconds = time.perf_counter() - started
    if applied.errors:
        raise RuntimeError(f"programming failed: {list(applied.errors)[:3]}")
    fresh = Codec(load_p4info(DEFAULT_P4INFO))
    async with agent_parts(address, fresh, device_config=device_config, state=state) as agent:
        again = (await _next(agent.out, "applied")).applied
        reconcile_seconds = time.perf_counter() - agent.primary_at
        writer = agent.writer
    found = writer.read_back
    if (
        again.errors
        or writer.updates_written
        or found.missing
        or found.unexpected
        or found.modified
    ):
        raise ReconcileWrote(
            f"the restarted agent wrote {writer.updates_written} updates (read back: "
            f"{found.missing} missing, {found.unexpected} unexpected, {found.modified} changed;"
            f" errors {list(again.errors)[:3]})"
        )
    read = len(writer.installed) if writer.installed is not None else 0
    return Programming(applied.updates_written, seconds, read, reconcile_seconds)


async def measure_programming(
    state: state_pb2.DesiredState, pinning: Pinning | None = None
) -> Programming:
    """`program` into a softswitch started for it: with `pinning`, softswitch on its load
    CPUs and this process (the agent) on its measured ones."""
    prefix = pinning.prefix(pinning.load) if pinning is not None else []
    with lab([1, 2], prefix) as net, pinned(pinning.measured if pinning is not None else ()):
        return await program(net.target, state)


@dataclass(frozen=True)
class CutFigures:
    """One link cut, in ms. total = event -> last Applied (the convergence figure)."""

    link: str
    detect: float  # cable pulled -> the first agent's netlink event
    report: float  # -> the controller has the PortStatus
    compute: float  # -> deltas computed
    push: float  # -> the last affected agent received its delta
    apply: float  # -> that agent's Applied
    total: float
    switches: int


def _converged_event(
    events: Iterable[admin_pb2.Event], link: str, usable: bool, after_wall_ns: int
) -> admin_pb2.Event | None:
    """The controller's CONVERGED event for `link` leaving (usable=False) or returning to
    (usable=True) routing at or after `after_wall_ns`: its figures are in `e.convergence`."""
    for e in events:
        if (
            e.type == admin_pb2.EVENT_KIND_CONVERGED
            and e.WhichOneof("detail") == "convergence"
            and e.wall_ns >= after_wall_ns
            and e.convergence.link == link
            and e.convergence.usable == usable
        ):
            return e
    return None


def _converged(
    lab: MininetLab, link: str, usable: bool, after_wall_ns: int
) -> admin_pb2.Event | None:
    events = lab.events(
        limit=50, types=(admin_pb2.EVENT_KIND_CONVERGED,), after_wall_ns=after_wall_ns
    )
    return _converged_event(events, link, usable, after_wall_ns)


def cut_figures(link: str, cut_wall_ns: int, event: admin_pb2.Event) -> CutFigures:
    """One cut's figures (ms) from the controller's CONVERGED event for it."""
    c = event.convergence
    event_wall_ns = event.wall_ns - c.event_to_applied_ns
    return CutFigures(
        link,
        (event_wall_ns - cut_wall_ns) / 1e6,
        c.report_ns / 1e6,
        c.compute_ns / 1e6,
        c.push_ns / 1e6,
        c.apply_ns / 1e6,
        c.event_to_applied_ns / 1e6,
        c.switches,
    )


def _wait(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)


def measure_convergence(cuts: int, fabric: Path) -> list[CutFigures]:
    """Pull and restore the lab fabric's cables `cuts` times (see the module docstring)."""
    # Bench-only dependencies: the lab harness and its admin API client.
    from mininet_labs.lab import Lab  # noqa: PLC0415
    from mininet_labs.processes import make_target  # noqa: PLC0415

    out: list[CutFigures] = []
    with Lab(fabric, make_target("softswitch", 20.0)) as lab:
        keys = sorted(lab.topology.cables)
        hold_down_s = lab.options.hold_down_s
        for i in range(cuts):
            # (The lambdas below use `key` within this iteration only.)
            key = keys[i % len(keys)]
            cut_wall = time.time_ns()
            lab.topology.cut(key)
            event = _wait(
                f"convergence after cutting {key}",
                lambda: _converged(lab, key, False, cut_wall),  # noqa: B023
                timeout_s=15,
            )
            out.append(cut_figures(key, cut_wall, event))
            restore_wall = time.time_ns()
            lab.topology.restore(key)
            _wait(
                f"{key} to return to routing after the hold-down",
                lambda: _converged(lab, key, True, restore_wall),  # noqa: B023
                timeout_s=hold_down_s + 15,
            )
            _wait(
                f"{key} up",
                lambda: (
                    True
                    if lab.link_state(key) == admin_pb2.LINK_STATE_UP  # noqa: B023
                    else None
                ),
                timeout_s=10,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--flaps", type=int, default=50, help="port flaps (>= 50; 0 skips)")
    parser.add_argument(
        "--ports", type=int, default=4, help="uplinks of the synthetic ToR (--fabric synthetic)"
    )
    parser.add_argument(
        "--fabric",
        default=str(REPO / "examples" / "ref-100k.yaml"),
        help="program the largest switch of this fabric; 'synthetic' for --groups/--routes",
    )
    parser.add_argument("--groups", type=int, default=256)
    parser.add_argument("--routes", type=int, default=8192)
    parser.add_argument(
        "--program-runs",
        type=int,
        default=5,
        help="programmings of the switch into a fresh softswitch, each followed by an agent"
        " restart's reconcile; the medians are reported",
    )
    parser.add_argument(
        "--cuts", type=int, default=20, help="link cuts on the lab fabric (>= 20; 0 skips)"
    )
    parser.add_argument(
        "--lab-fabric",
        default=str(REPO / "examples" / "lab-2rail.yaml"),
        help="the fabric the convergence lab runs",
    )
    args = parser.parse_args(argv)
    if args.fabric == "synthetic":
        state = spine_state(args.groups, args.routes)
        program_state = f"synthetic: {args.groups} groups, {args.routes} routes, 32 ports"
    else:
        state = fabric_switch_state(Path(args.fabric))
        program_state = (
            f"{Path(args.fabric).name} {state.switch_name}: {len(state.groups)} groups, "
            f"{len(state.routes)} routes, {len(state.ports)} ports"
        )

    if args.fabric == "synthetic":
        repair_state, repair_port = tor_state(args.ports, 1), 1
        repair_label = f"synthetic ToR, {len(repair_state.groups)} groups"
    else:
        repair_state = state
        # The port in the most groups: the worst case for the one-Write repair.
        counts = collections.Counter(h.port for g in state.groups for h in g.next_hops)
        repair_port = counts.most_common(1)[0][0]
        repair_label = f"{Path(args.fabric).name} {state.switch_name}"
    latencies, groups = (
        asyncio.run(measure_local_repair(args.flaps, repair_state, repair_port))
        if args.flaps > 0
        else ([], 0)
    )
    pinning = plan_pinning("agent", "softswitch")
    runs = [
        asyncio.run(measure_programming(state, pinning)) for _ in range(max(1, args.program_runs))
    ]
    programmed = sorted(runs, key=lambda r: r.rate)[len(runs) // 2]
    reconciled = sorted(runs, key=lambda r: r.reconcile_seconds)[len(runs) // 2]
    cuts = measure_convergence(args.cuts, Path(args.lab_fabric)) if args.cuts > 0 else []

    def p(values: list[float], q: float) -> float | None:
        return round(percentile(values, q), 3) if values else None

    parts = {
        name: [getattr(c, name) for c in cuts]
        for name in ("total", "detect", "report", "compute", "push", "apply")
    }
    result = {
        "local_repair_ms_p50": p(latencies, 50),
        "local_repair_ms_p99": p(latencies, 99),
        "local_repair_flaps": len(latencies),
        "local_repair_groups_per_write": groups,
        "local_repair_port": repair_port,
        "convergence_ms_p50": p(parts["total"], 50),
        "convergence_ms_p99": p(parts["total"], 99),
        "convergence_failures": len(cuts),
        **{
            f"convergence_{name}_ms_p{q}": p(parts[name], q)
            for name in ("detect", "report", "compute", "push", "apply")
            for q in (50, 99)
        },
        "convergence_switches_per_cut_max": max((c.switches for c in cuts), default=None),
        "program_entries": programmed.written,
        "program_seconds": round(programmed.seconds, 4),
        "program_entries_per_s": round(programmed.rate, 1),
        "program_entries_per_s_runs": [round(r.rate, 1) for r in runs],
        "program_state": program_state,
        "program_pinning": pinning.describe(),
        "reconcile_entries_read": reconciled.read,
        "reconcile_entries_written": 0,  # a restarted agent that writes fails the bench
        "reconcile_seconds": round(reconciled.reconcile_seconds, 4),
        "reconcile_seconds_runs": [round(r.reconcile_seconds, 4) for r in runs],
    }
    if args.json:
        print(json.dumps(result))
    else:
        if latencies:
            print(
                f"local repair ({repair_label}, port {repair_port}; "
                f"netlink event -> committed Write, {len(latencies)} flaps, "
                f"{groups} groups per Write): p50 {result['local_repair_ms_p50']} ms, "
                f"p99 {result['local_repair_ms_p99']} ms"
            )
        else:
            print("local repair: not measured (--flaps 0)")
        print(
            f"programming ({program_state}): {programmed.written} entries in "
            f"{programmed.seconds:.4f} s = {result['program_entries_per_s']} entries/s, median "
            f"of {len(runs)} runs (DesiredState in the writer -> Applied: translate, diff, "
            f"encode, ordered Writes; {pinning.describe()})"
        )
        print(
            f"reconcile after an agent restart: {reconciled.read} entries read back, 0 written, "
            f"in {reconciled.reconcile_seconds:.4f} s, median of {len(runs)} runs (a fresh "
            "writer and P4 client holding the same state: primary -> Applied: read back, "
            "compare)"
        )
        if cuts:
            print(
                f"global convergence ({Path(args.lab_fabric).name}, {len(cuts)} link cuts; "
                "first agent's netlink event -> last Applied, the controller's figure): "
                f"p50 {result['convergence_ms_p50']} ms, p99 {result['convergence_ms_p99']} ms"
            )
            for name in ("detect", "report", "compute", "push", "apply"):
                print(
                    f"  {name}: p50 {result[f'convergence_{name}_ms_p50']} ms, "
                    f"p99 {result[f'convergence_{name}_ms_p99']} ms"
                )
        else:
            print("global convergence: not measured (--cuts 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
