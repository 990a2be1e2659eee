"""Benchmark of the decision core alone, in process, on a fabric file:

    python -m bench.core examples/ref-100k.yaml [--cuts 8] [--json]

What the daemon's figures are made of, without gRPC, TLS or a second process: the core is fed
the inputs the agents' messages become (controller/core/machine.py) with a synthetic clock, and
every call is timed. Phases, in order:

- cold start: `DecisionCore.start` with nothing restored (every link out until reported),
  and Diagnose's ranking then (its worst case: every link down, no agent connected);
- storm: a Hello from every switch with every cabled port up, one after the other, spread
  over `--storm-s` of the synthetic clock with the ticks the core asks for on the way; every
  switch acknowledges what it is sent at once (agents that ack at once);
- links usable: the tick after the hold-down, which returns every link still held down;
- cuts: for each kind (ToR-spine, spine-core), `--cuts` cables cut (PortStatus down from
  both ends), settled, the core's ticks after it (packing states changed in place), and
  restored (PortStatus up from both ends, then the tick after the hold-down), settled: the
  time of each call, the switches it sends to and the bytes; the resident memory after each
  kind's cuts (a state changed in place keeps what each change replaced until packed);
- diagnose: a handful of faults left in place (a ToR-spine and a spine-core cable cut, a
  spine's agent gone, a PFC storm on a ToR port, a port missing from a ToR's port map), then
  the ranking alone (`controller.core.diagnosis.diagnose`) and the whole Diagnose answer
  through the admin servicer (every page, default page size, in process: no gRPC), timed;
- restart: `DecisionCore.start` again from what a store would hold with every link up.

The figures come with their samples (calls, switches, messages). Memory is resident now
(VmRSS) at each point, and the peak (ru_maxrss) at the end. Figures only: nothing here
asserts a speed; the daemon's own figures are bench.swarm's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.swarm.daemon import rss_mib
from controller.core import diagnosis
from controller.core.clock import Now
from controller.core.effects import Effect, Push, Rebuild
from controller.core.links import DampingParams
from controller.core.machine import (
    EVERY_LINK_USABLE,
    PACK_DELAY_NS,
    ROUTING_BASELINE,
    DecisionCore,
    topology_digest,
)
from controller.core.planner import PlannedLink
from controller.core.records import LinkRecord, Restored
from controller.daemon import admin
from controller.daemon.core_planner import CorePlanner, load_planner
from controller.fabric import Role
from controller.intent import IntentError
from railfabric.v1 import admin_pb2, control_pb2

ROLES = {
    admin_pb2.SWITCH_ROLE_TOR: Role.TOR,
    admin_pb2.SWITCH_ROLE_SPINE: Role.SPINE,
    admin_pb2.SWITCH_ROLE_CORE: Role.CORE,
}


class Clock:
    """A synthetic clock: starts at the real one, moves only when told."""

    def __init__(self) -> None:
        self.now = Now(mono_ns=time.monotonic_ns(), wall_ns=time.time_ns())

    def advance(self, ns: int) -> Now:
        self.now = Now(self.now.mono_ns + ns, self.now.wall_ns + ns)
        return self.now


@dataclass
class Calls:
    """Timed calls of one kind: seconds each, and what they sent."""

    seconds: list[float] = field(default_factory=list)
    switches: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)

    def add(self, seconds: float, effects: Sequence[Effect]) -> None:
        pushes = [e for e in effects if isinstance(e, Push)]
        self.seconds.append(seconds)
        self.switches.append(len({p.switch for p in pushes}))
        self.bytes.append(sum(p.message.ByteSize() for p in pushes))

    def figures(self) -> dict[str, Any]:
        if not self.seconds:
            raise SystemExit("bench.core: a phase with no calls (empty sample)")
        ms = sorted(s * 1000 for s in self.seconds)
        return {
            "calls": len(ms),
            "ms_p50": round(statistics.median(ms), 2),
            "ms_p99": round(ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))], 2),
            "ms_max": round(ms[-1], 2),
            "ms_total": round(sum(ms), 1),
            "switches_sent_to_max": max(self.switches),
            "bytes_max": max(self.bytes),
        }


def _timed(calls: Calls, fn: Callable[..., list[Effect]], *args: Any) -> list[Effect]:
    t0 = time.perf_counter()
    effects = fn(*args)
    calls.add(time.perf_counter() - t0, effects)
    return effects


def _rss_mib() -> float:
    """This process's resident memory now (VmRSS), MiB."""
    rss = rss_mib(os.getpid())
    assert rss is not None  # this process is running
    return rss


def _peak_rss_mib() -> float:
    """The most this process was ever resident (ru_maxrss), MiB: a high-water mark, which
    freeing does not lower."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Fabric:
    """The core and the agents' side of it: what each switch was last sent, acked at once."""

    def __init__(self, planner: CorePlanner, clock: Clock) -> None:
        self.planner = planner
        self.clock = clock
        self.core = DecisionCore(planner, DampingParams())
        self.cabled: dict[str, list[int]] = {}
        for link in planner.links():
            for name, port in (link.a, link.b):
                self.cabled.setdefault(name, []).append(port)
        self.acks = Calls()
        # Computations from scratch: the job (off the event loop in the daemon), seconds
        # each; and the core taking each result in (`rebuilt`, on the loop).
        self.rebuild_jobs: list[float] = []
        self.rebuilds_taken_in = Calls()

    def hello(self, name: str) -> list[Effect]:
        msg = control_pb2.Hello(switch_name=name, agent_version="bench.core")
        for port in sorted(self.core.views[name].ports | set(self.cabled.get(name, ()))):
            msg.ports.add(port=port, oper_up=True)
        return self.core.hello(msg, self.clock.now)

    def settle(self, effects: list[Effect]) -> int:
        """Ack every state pushed, and what those acks release, until nothing is sent; run
        every Rebuild's job (as the daemon does, in a thread) and give the core its result."""
        acked = 0
        while True:
            pushes = {}
            rebuilds = []
            for e in effects:
                if isinstance(e, Push):
                    pushes[e.switch] = e.message
                elif isinstance(e, Rebuild):
                    rebuilds.append(e)
            if not pushes and not rebuilds:
                return acked
            effects = []
            for r in rebuilds:
                t0 = time.perf_counter()
                result = r.job()
                self.rebuild_jobs.append(time.perf_counter() - t0)
                effects += _timed(
                    self.rebuilds_taken_in, self.core.rebuilt, r.token, result, self.clock.now
                )
            for name, msg in pushes.items():
                kind = msg.WhichOneof("msg")
                if kind == "state_delta":
                    generation, digest = msg.state_delta.to_generation, msg.state_delta.digest
                elif kind == "desired_state":
                    generation, digest = msg.desired_state.generation, msg.desired_state.digest
                else:
                    continue
                applied = control_pb2.Applied(generation=generation, digest=digest)
                effects += _timed(self.acks, self.core.applied, name, applied, self.clock.now)
                acked += 1

    def port(self, end: tuple[str, int], up: bool) -> list[Effect]:
        msg = control_pb2.PortStatus(port=end[1], up=up)
        return self.core.port_status(end[0], msg, self.clock.now)

    def run_timers(self, ticks: Calls) -> int:
        """Tick when the core's earliest deadline has come (as the daemon's runner does);
        ack what it sent."""
        acked = 0
        while (deadline := self.core.next_deadline_ns()) is not None and (
            deadline <= self.clock.now.mono_ns
        ):
            acked += self.settle(_timed(ticks, self.core.tick, self.clock.now))
        return acked

    def after_hold_down(self) -> list[Effect]:
        self.clock.advance(DampingParams().hold_down_ns + 1_000_000)
        return self.core.tick(self.clock.now)


def _links_of(planner: CorePlanner, a: Role, b: Role) -> list[PlannedLink]:
    role = {s.name: ROLES[s.role] for s in planner.switches()}
    return [x for x in planner.links() if {role[x.a[0]], role[x.b[0]]} == {a, b}]


class _Context:
    """What the admin servicer uses of a grpc.aio.ServicerContext (bench: no server)."""

    async def abort(self, code: object, details: str) -> None:
        raise SystemExit(f"bench.core: Diagnose refused: {code}: {details}")


def _diagnose(fabric: Fabric, planner: CorePlanner, rng: random.Random) -> dict[str, Any]:
    """Leave a handful of faults, then time the ranking and the Diagnose answer."""
    core, clock = fabric.core, fabric.clock
    clock.advance(60 * 1_000_000_000)
    role = {s.name: s.role for s in planner.switches()}
    for roles in ((Role.TOR, Role.SPINE), (Role.SPINE, Role.CORE)):
        candidates = _links_of(planner, *roles)
        if candidates:
            link = rng.choice(candidates)
            fabric.settle(fabric.port(link.a, False) + fabric.port(link.b, False))
    spines = [n for n, r in role.items() if r == admin_pb2.SWITCH_ROLE_SPINE]
    tors = [n for n, r in role.items() if r == admin_pb2.SWITCH_ROLE_TOR]
    if spines:
        core.disconnected(rng.choice(spines), clock.now)
    storm = rng.choice(tors)
    port = min(core.views[storm].ports)
    for storms in (0, 3):
        clock.advance(5_000_000_000)
        counters = control_pb2.Counters(wall_ns=clock.now.wall_ns)
        counters.ports.add(port=port, pfc_watchdog_storms=storms, pfc_pause_tx=5000 * storms)
        core.counters(storm, counters, clock.now)
    unmapped = rng.choice([t for t in tors if t != storm])
    hello = control_pb2.Hello(switch_name=unmapped, agent_version="bench.core")
    gone = min(core.views[unmapped].ports)
    for p in sorted(core.views[unmapped].ports | set(fabric.cabled.get(unmapped, ()))):
        if p != gone:
            hello.ports.add(port=p, oper_up=True)
    fabric.settle(core.hello(hello, clock.now))

    rank_s = []
    for _ in range(3):
        t0 = time.perf_counter()
        ranked = diagnosis.diagnose(core, clock.now)
        rank_s.append(time.perf_counter() - t0)
    service = admin.AdminService(core)
    context: Any = _Context()
    answer_s, pages, biggest = [], 0, 0
    findings: list[admin_pb2.Finding] = []
    for _ in range(3):
        t0 = time.perf_counter()
        request = admin_pb2.DiagnoseRequest()
        findings, pages = [], 0
        while True:
            reply = asyncio.run(service.Diagnose(request, context))
            pages += 1
            biggest = max(biggest, reply.ByteSize())
            findings.extend(reply.findings)
            if not reply.next_page_token:
                break
            request.page_token = reply.next_page_token
        answer_s.append(time.perf_counter() - t0)
    return {
        "findings": len(ranked),
        "root_causes": sum(1 for r in ranked if not r.explained_by),
        "first": [f"{f.rank} {f.kind} {f.id}" for f in findings[:8]],
        "rank_s_max": round(max(rank_s), 3),
        "answer_s_max": round(max(answer_s), 3),
        "pages": pages,
        "page_bytes_max": biggest,
    }


def run(path: Path, cuts: int, seed: int, storm_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"fabric": str(path)}
    t0 = time.perf_counter()
    planner = load_planner(path)
    out["load_s"] = round(time.perf_counter() - t0, 2)
    names = [s.name for s in planner.switches()]
    out["switches"], out["links"] = len(names), len(planner.links())
    clock = Clock()
    fabric = Fabric(planner, clock)
    core = fabric.core

    t0 = time.perf_counter()
    core.start(Restored(), clock.now)
    core.sessions_open(clock.now)
    out["cold_start_s"] = round(time.perf_counter() - t0, 2)
    # Diagnose's worst case: every link down, every switch without its agent (one ranking
    # per read of its pages).
    t0 = time.perf_counter()
    cold = diagnosis.diagnose(core, clock.now)
    out["diagnose_cold"] = {"findings": len(cold), "rank_s": round(time.perf_counter() - t0, 2)}
    del cold
    out["rss_after_start_mib"] = round(_rss_mib())

    hellos, ticks = Calls(), Calls()
    step = int(storm_s * 1e9 / len(names))
    t0 = time.perf_counter()
    acked = 0
    for name in names:
        acked += fabric.settle(_timed(hellos, fabric.hello, name))
        clock.advance(step)
        acked += fabric.run_timers(ticks)
    out["storm_hellos"] = hellos.figures()
    back = Calls()
    effects = _timed(back, fabric.after_hold_down)
    out["links_usable"] = back.figures()
    acked += fabric.settle(effects)
    out["storm"] = {
        "spread_s": storm_s,
        "s": round(time.perf_counter() - t0, 2),
        "ticks": ticks.figures() if ticks.seconds else {"calls": 0},
        "acks": acked,
        # Routing from scratch once the links were discovered: the job off the event loop,
        # then the core taking it in.
        "rebuild_job_s": [round(s, 2) for s in fabric.rebuild_jobs],
        "rebuilt": fabric.rebuilds_taken_in.figures(),
    }
    out["rss_connected_mib"] = round(_rss_mib())
    unusable = core.unroutable_links()
    if unusable:
        raise SystemExit(f"bench.core: {len(unusable)} links not usable after the storm")

    rng = random.Random(seed)
    for kind, roles in (
        ("tor_spine", (Role.TOR, Role.SPINE)),
        ("spine_core", (Role.SPINE, Role.CORE)),
    ):
        candidates = _links_of(planner, *roles)
        if not candidates:
            continue
        down, down_far, up, acks = Calls(), Calls(), Calls(), Calls()
        after = Calls()
        for link in rng.sample(candidates, min(cuts, len(candidates))):
            clock.advance(60 * 1_000_000_000)  # past damping's memory of the last cut
            effects = _timed(down, fabric.port, link.a, False)
            effects += _timed(down_far, fabric.port, link.b, False)
            t0 = time.perf_counter()
            fabric.settle(effects)
            acks.seconds.append(time.perf_counter() - t0)
            # The core's housekeeping after the cut (packing states: machine.PACK_DELAY_NS),
            # timed apart from the restore's tick.
            clock.advance(PACK_DELAY_NS)
            fabric.run_timers(after)
            fabric.port(link.a, True)
            fabric.port(link.b, True)
            fabric.settle(_timed(up, fabric.after_hold_down))
        out[f"cut_{kind}"] = {
            "first_end": down.figures(),
            "second_end": down_far.figures(),
            "acks_s_max": round(max(acks.seconds), 3),
            "ticks_after_cut": after.figures() if after.seconds else {"calls": 0},
            "restore_tick": up.figures(),
        }
        out[f"rss_after_{kind}_cuts_mib"] = round(_rss_mib())
    out["applied"] = fabric.acks.figures()
    out["diagnose"] = _diagnose(fabric, planner, rng)

    restored = Restored(
        meta={"topology_digest": topology_digest(planner), ROUTING_BASELINE: EVERY_LINK_USABLE},
        links={x.key: LinkRecord(x.key, "up", clock.now.wall_ns, 0) for x in planner.links()},
    )
    again = Fabric(planner, clock)
    t0 = time.perf_counter()
    again.core.start(restored, clock.now)
    out["restart_all_up_s"] = round(time.perf_counter() - t0, 2)
    out["peak_rss_mib"] = round(_peak_rss_mib())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.core", description=__doc__.split("\n")[0]
    )
    parser.add_argument("fabric", type=Path, help="fabric intent YAML")
    parser.add_argument("--cuts", type=int, default=8, help="cables cut per kind (each restored)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--storm-s",
        type=float,
        default=0.0,
        help="spread the Hellos over this many seconds of the synthetic clock, ticking as the "
        "core asks (0: all at one instant, one tick returns every link)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.cuts < 1:
        parser.error("--cuts must be at least 1")
    gc.collect()
    try:
        out = run(args.fabric, args.cuts, args.seed, args.storm_s)
    except IntentError as exc:
        print(f"bench.core: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key:22s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
