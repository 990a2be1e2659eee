"""One swarm run, phase by phase, and the report it makes (bench/swarm/__init__.py says what
each figure means).

1. setup: plan (bench/swarm/plan.py), the run's PKI (unless --insecure), the swarm processes
   started and ready (each loaded the fabric), all before the controller starts;
2. start: the controller started, grpc health polled until SERVING;
3. storm: every agent starts its session at once; the admin probe runs throughout; done when
   every agent holds state, then when the fabric is quiet (every link between agents up, the
   controller counts every agent's switch converged, no message for QUIET_S);
4. cuts: each cable cut from both ends (PortStatus down), its messages attributed by time
   window (until no message for QUIET_S and every switch converged), restored (PortStatus
   up), and waited for until it is back in routing and quiet again;
5. railctl: each read command run as an operator runs it (bench/swarm/railctl.py), every
   agent still connected.

Every process and the temporary directory are removed on every way out (the caller's
`finally`), including Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.pinning import plan_pinning
from bench.swarm import certs, railctl
from bench.swarm.admin import PROBE_RPC, Admin, link_ends
from bench.swarm.agents import CONNECT_TIMEOUT_S
from bench.swarm.daemon import Controller, ControllerFailed, wait_serving
from bench.swarm.figures import EmptySample, distribution, one
from bench.swarm.fleet import Fleet
from bench.swarm.plan import Cut, Plan, make_plan
from railfabric.grpc_wakeups import drain_wakeups_or_warn

# No message for this long closes a window (the storm's, a cut's).
QUIET_S = 0.3
POLL_S = 0.1
# A cut whose first StateDelta has not come after this long changed nothing.
FIRST_MESSAGE_S = 10.0
# A window that never goes quiet is a controller that never settles.
WINDOW_MAX_S = 120.0
# ListLinks on a large fabric is not free: asked at most this often while waiting.
LINKS_POLL_S = 1.0
STATE_KINDS = ("desired_state", "state_delta")


class Failure(Exception):
    """The run cannot give a figure it promised; the text says which and why."""


@dataclass(frozen=True)
class Options:
    fabric: str
    agents: int | None
    processes: int
    cuts: int
    insecure: bool
    hold_down_s: float
    serve_timeout_s: float
    storm_timeout_s: float
    # Where to copy the controller's and the swarm processes' logs (None: dropped).
    logs: Path | None = None
    # An agent's channel must be ready this fast or the try is a reset (0: no limit).
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    # Runs of each railctl command after the cuts (0: none).
    railctl_runs: int = railctl.RUNS
    # Seconds between each agent's Counters, with its neighbours once (0: no reports).
    reports_s: float = 0.0


# Switches whose reports (--reports-s) the run checks the controller holds, spread over the plan.
REPORTS_CHECKED = 16


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _s(ns: int) -> float:
    return ns / 1e9


def _ms(ns: int) -> float:
    return ns / 1e6


class Phases:
    """Wall time and CPU seconds (the controller's; the swarm processes' and this one's) of
    each phase, from one end() to the next."""

    def __init__(self, controller: Controller, fleet: Fleet) -> None:
        self.controller = controller
        self.fleet = fleet
        self.wall: dict[str, float] = {}
        self.controller_cpu: dict[str, float] = {}
        self.swarm_cpu: dict[str, float] = {}
        self._last = (time.monotonic(), 0.0, self._swarm())

    def _swarm(self) -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return self.fleet.cpu_s() + own.ru_utime + own.ru_stime

    def end(self, phase: str) -> None:
        wall, controller, swarm = time.monotonic(), self.controller.cpu_s(), self._swarm()
        self.wall[phase] = round(wall - self._last[0], 2)
        self.controller_cpu[phase] = round(controller - self._last[1], 2)
        self.swarm_cpu[phase] = round(swarm - self._last[2], 2)
        self._last = (wall, controller, swarm)


class Run:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.began = time.monotonic()
        self._said = 0.0
        self.workdir = Path(tempfile.mkdtemp(prefix="railfabric-swarm-"))
        self.fleet = Fleet(self.workdir)
        self.controller: Controller | None = None
        self.admin: Admin | None = None
        self.notes: list[str] = []
        self._codes_said: set[str] = set()

    def say(self, text: str) -> None:
        """Progress for people, on stderr (stdout is the report)."""
        print(f"[{time.monotonic() - self.began:7.1f} s] {text}", file=sys.stderr, flush=True)
        self._said = time.monotonic()

    def say_every(self, seconds: float, text: str) -> None:
        if time.monotonic() - self._said >= seconds:
            self.say(text)

    async def close(self) -> None:
        """Everything started, stopped; the temporary directory removed. Safe to call on any
        path, also after a partial start."""
        try:
            self.fleet.stop()
            if self.controller is not None:
                self.controller.stop()
            if self.admin is not None:
                await self.admin.close()
            if self.options.logs is not None:
                self.options.logs.mkdir(parents=True, exist_ok=True)
                for log in self.workdir.glob("*.log"):
                    shutil.copy(log, self.options.logs / log.name)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def run(self) -> dict[str, Any]:
        o = self.options
        plan = make_plan(o.fabric, o.agents, o.processes, o.cuts)
        pinning = plan_pinning("controller", "swarm and coordinator")
        if pinning.load:  # this process drives the swarm: off the controller's CPU too
            os.sched_setaffinity(0, pinning.load)
        setup: dict[str, Any] = {
            "pinning": pinning.describe(),
            "hold_down_s": o.hold_down_s,
            "connect_timeout_s": o.connect_timeout_s,
            "reports_s": o.reports_s,
            # Others may share the machine: their load moves every figure.
            "load_average": {"before": [round(x, 2) for x in os.getloadavg()]},
        }
        pki: Path | None = None
        if o.insecure:
            setup["security"] = "plaintext (--insecure): controller --insecure, agents insecure"
        else:
            pki = self.workdir / "pki"
            self.say(f"issuing {len(plan.agents):,} switch certificates")
            issued = certs.make(pki, (spec.name for spec in plan.agents))
            self.say(f"issued them in {issued.issue_s:.1f} s; starting the swarm processes")
            setup["security"] = "mutual TLS, one certificate per switch (railfabric.pki, EC P-256)"
            setup["certificates"] = {"count": issued.switches, "issue_s": round(issued.issue_s, 2)}
        for kind in plan.missing_kinds:
            self.notes.append(
                f"no {kind} cable between agents in this fabric: that kind is not cut"
            )
        if len(plan.cuts) < o.cuts:
            self.notes.append(f"--cuts {o.cuts}: only {len(plan.cuts)} cables can be cut once each")
        address = f"127.0.0.1:{_free_port()}"
        args = [
            "--fabric",
            o.fabric,
            "--listen",
            address,
            "--store",
            "memory:",
            "--hold-down-s",
            f"{o.hold_down_s:g}",
        ]
        if pki is None:
            args.append("--insecure")
        else:
            own = certs.controller(pki)
            args += [
                "--tls-ca",
                str(own.ca),
                "--tls-cert",
                str(own.cert),
                "--tls-key",
                str(own.key),
            ]
        setup["controller_args"] = [a.replace(str(self.workdir), "$RUN") for a in args]
        await self.fleet.start(
            plan, address, pki, pinning, o.connect_timeout_s, reports_s=o.reports_s
        )
        setup["swarm_load_s"] = round(self.fleet.load_s, 2)

        controller = self.controller = Controller(args, self.workdir / "controller.log", pinning)
        reader = None if pki is None else certs.reader(pki)
        self.say(
            f"starting the controller; {len(plan.agents):,} agents wait in {plan.shards} processes"
        )
        phases = Phases(controller, self.fleet)
        controller.start()
        serving_ns = await wait_serving(controller, address, reader, o.serve_timeout_s)
        phases.end("startup")
        rss = {"idle": controller.rss_mib()}
        self.say(f"SERVING after {_s(serving_ns - controller.started_ns):.1f} s; the storm begins")
        self.admin = Admin(address, reader)
        # The admin probe's latencies are the controller's, not this loop's stall behind the
        # large pages it also reads (railfabric/grpc_wakeups.py).
        drain_wakeups_or_warn(asyncio.get_running_loop())

        storm = await self._storm(plan, controller, self.admin)
        phases.end("storm")
        rss["connected"] = controller.rss_mib()
        cuts = await self._cuts(plan, controller, self.admin)
        phases.end("cuts")
        rss["after_cuts"] = controller.rss_mib()
        operator: dict[str, Any] = {"skipped": "not run (--railctl-runs 0)"}
        if o.railctl_runs:
            self.say(f"railctl: each read command {o.railctl_runs} times")
            operator = await railctl.measure(
                address, reader, o.fabric, pinning.prefix(pinning.load), o.railctl_runs
            )
            phases.end("railctl")
        setup["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]

        storm_ns = storm.pop("storm_ns")
        ready_ns = storm.pop("state_ns")
        return {
            "fabric": {
                "name": plan.fabric_name,
                "file": plan.fabric_file,
                "switches": plan.switches,
                "links": plan.links,
                "agents": len(plan.agents),
                "processes": plan.shards,
                "agent_links": len(plan.agent_links),
            },
            "setup": setup,
            "start": {
                "to_serving_s": one("start -> SERVING", _s(serving_ns - controller.started_ns))
            },
            "desired_state_ready": {
                "from_start_s": {
                    **one("start -> every DesiredState", _s(ready_ns - controller.started_ns)),
                    "n": len(plan.agents),
                },
                "from_storm_s": {
                    **one("storm -> every DesiredState", _s(ready_ns - storm_ns)),
                    "n": len(plan.agents),
                },
            },
            "storm": storm,
            "controller": {
                "rss_mib": {k: round(v, 1) for k, v in rss.items()},
                "cpu_s": phases.controller_cpu,
            },
            "phases_wall_s": phases.wall,
            "load_generator": {
                "cpus": len(pinning.load) or os.cpu_count(),
                "cpu_s": phases.swarm_cpu,
            },
            "admin": {
                "rpc": PROBE_RPC,
                "period_s": 0.1,
                "latency_ms": distribution(
                    f"admin {PROBE_RPC} latency during the storm", self.admin.latencies_ms
                ),
                "errors": sum(self.admin.errors.values()),
                "errors_by_code": dict(self.admin.errors),
                "slowest": _slowest(self.admin, storm_ns),
            },
            "cuts": cuts,
            "railctl": operator,
            "controller_log": controller.log_summary(),
            "notes": self.notes,
        }

    # -- the storm ----------------------------------------------------------------------

    async def _storm(self, plan: Plan, controller: Controller, admin: Admin) -> dict[str, Any]:
        deadline = time.monotonic() + self.options.storm_timeout_s
        probe = asyncio.create_task(admin.probe(), name="admin-probe")
        try:
            storm_ns = time.time_ns()
            await self.fleet.ask_all({"cmd": "storm"})
            await self._until_all_hold(plan, controller, storm_ns, deadline)
            self.say(
                f"every agent holds state after {_s(time.time_ns() - storm_ns):.1f} s; waiting "
                "for every link up and quiet"
            )
            rows = await self.fleet.rows("agents")
            never = [name for name, _, applied, _ in rows if not applied]
            if never:
                raise Failure(f"{len(never)} agents never held state, e.g. {never[:5]}")
            first_state = [int(state) for _, state, _, _ in rows]
            first_applied = [int(applied) for _, _, applied, _ in rows]
            quiet_ns, links_up = await self._until_quiet(
                plan, controller, admin, storm_ns, deadline
            )
            reports: dict[str, Any] = {"interval_s": self.options.reports_s}
            if self.options.reports_s:
                await self._until_reported_twice(plan, controller, deadline)
                reports.update(await self._reports_held(plan, admin))
            totals = await self.fleet.totals()
        finally:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
        connected, converged = await admin.switch_view(spec.name for spec in plan.agents)
        if connected != len(plan.agents):
            raise Failure(
                f"after the storm the controller counts {connected} of {len(plan.agents)} "
                "agents connected"
            )
        return {
            "storm_ns": storm_ns,
            "state_ns": max(first_state),
            "all_hold_state_s": one(
                "storm -> every agent holds state", _s(max(first_applied) - storm_ns)
            ),
            "per_agent_hold_s": distribution(
                "storm -> agent holds state, per agent",
                [_s(t - storm_ns) for t in first_applied],
                digits=3,
            ),
            "quiet_s": one("storm -> quiet", _s(quiet_ns - storm_ns)),
            "links_up": links_up,
            "sessions_opened": totals.connections,
            "retries": totals.attempts - totals.agents,
            "resets": {
                "count": sum(totals.resets.values()),
                "by_code": dict(totals.resets),
                "examples": totals.reset_examples,
            },
            "swarm_loop_lag_max_ms": round(totals.lag_max_ms, 1),
            "resyncs": totals.resyncs,
            "gap_examples": totals.gap_examples,
            "outbox_dropped": totals.dropped,
            "reports": {
                **reports,
                "counters_sent": totals.counters_sent,
                "agents_reported_twice": totals.reported_twice,
            },
            "messages": {"count": dict(totals.messages), "bytes": dict(totals.size)},
            "controller_view": {
                "agents": len(plan.agents),
                "connected": connected,
                "converged": converged,
            },
        }

    async def _until_all_hold(
        self, plan: Plan, controller: Controller, storm_ns: int, deadline: float
    ) -> None:
        while True:
            totals = await self.fleet.totals()
            if totals.holding == len(plan.agents):
                return
            if controller.exit_code() is not None:
                raise controller.failed("during the storm")
            progress = (
                f"storm +{_s(time.time_ns() - storm_ns):.0f} s: {totals.holding:,} of "
                f"{len(plan.agents):,} agents hold state, {totals.in_session:,} in session, "
                f"{_count(totals.messages)}, resets {dict(totals.resets)}; controller "
                f"{controller.rss_mib():.0f} MiB, {controller.cpu_s():.0f} CPU s"
            )
            if time.monotonic() > deadline:
                rows = await self.fleet.rows("agents")
                never = [name for name, _, applied, _ in rows if not applied]
                raise Failure(
                    f"{len(never)} of {len(plan.agents)} agents hold no state "
                    f"{_s(time.time_ns() - storm_ns):.0f} s after the storm began "
                    f"(e.g. {', '.join(never[:5])}). At that time: {progress}; reset examples: "
                    f"{totals.reset_examples}; swarm event loop lag up to "
                    f"{totals.lag_max_ms:,.0f} ms"
                )
            self.say_every(10.0, progress)
            for code, examples in totals.reset_examples.items():
                if code not in self._codes_said:  # each new kind of reset, once, as it comes
                    self._codes_said.add(code)
                    self.say(f"first {code} resets: {examples}")
            await asyncio.sleep(POLL_S)

    async def _until_reported_twice(
        self, plan: Plan, controller: Controller, deadline: float
    ) -> None:
        """With --reports-s: until every agent sent Counters twice (the controller holds its
        last two reports, so its memory is the steady state's), and a second for the last to
        be taken in."""
        while True:
            totals = await self.fleet.totals()
            if totals.reported_twice == len(plan.agents):
                await asyncio.sleep(1.0)
                return
            if controller.exit_code() is not None:
                raise controller.failed("while the agents reported")
            if time.monotonic() > deadline:
                raise Failure(
                    f"{len(plan.agents) - totals.reported_twice} of {len(plan.agents)} agents "
                    "did not send Counters twice before the storm's deadline"
                )
            await asyncio.sleep(POLL_S)

    @staticmethod
    async def _reports_held(plan: Plan, admin: Admin) -> dict[str, int]:
        """What the controller shows of the reports, for REPORTS_CHECKED switches spread
        over the plan: Failure unless it holds two Counters and the planned LLDP peers of
        every one of them."""
        step = max(1, len(plan.agents) // REPORTS_CHECKED)
        names = [spec.name for spec in plan.agents[::step]]
        counted, heard = await admin.reports_held(names)
        if counted != len(names) or heard != len(names):
            raise Failure(
                f"of {len(names)} switches checked, the controller holds two Counters of "
                f"every port of {counted} and hears every planned switch peer of {heard}"
            )
        return {"switches_checked": len(names), "with_two_counters": counted, "heard": heard}

    async def _until_quiet(
        self, plan: Plan, controller: Controller, admin: Admin, since_ns: int, deadline: float
    ) -> tuple[int, int]:
        """When every link between agents is up, the controller counts every agent's switch
        converged and no message came for QUIET_S: (the last message's wall time, the links
        counted up). A pause alone is not enough: a controller busy with one long input sends
        nothing for a while and then goes on."""
        ends = [link_ends(ln) for ln in plan.agent_links]
        next_check = 0.0
        while True:
            totals = await self.fleet.totals()
            last = max(totals.last_received_ns, since_ns)
            if time.time_ns() - last >= QUIET_S * 1e9 and time.monotonic() >= next_check:
                next_check = time.monotonic() + LINKS_POLL_S
                if await self._links_up(plan, admin, ends) and await self._converged(plan, admin):
                    return last, len(ends)
            if controller.exit_code() is not None:
                raise controller.failed("while the storm settled")
            if time.monotonic() > deadline:
                down = await admin.links_not_up(ends)
                raise Failure(
                    f"the fabric never settled after the storm: {down} of {len(ends)} links "
                    f"between agents are not up, {_count(totals.messages)} so far"
                )
            self.say_every(
                10.0,
                f"storm +{_s(time.time_ns() - since_ns):.0f} s: settling, "
                f"{_count(totals.messages)}",
            )
            await asyncio.sleep(POLL_S)

    @staticmethod
    async def _links_up(
        plan: Plan, admin: Admin, ends: Sequence[frozenset[tuple[str, int]]]
    ) -> bool:
        """Every link between agents is in routing. Asked of one link first: until the
        discovered links are routed every link is down, and listing them all (135,168 on
        ref-100k, every LINKS_POLL_S) took a quarter of the controller's CPU while it
        computed the states the storm waits for."""
        if not await admin.any_link_down():
            return True
        if len(ends) == plan.links:
            return False  # the agents have every link
        return not await admin.links_not_up(ends)

    # -- cuts ---------------------------------------------------------------------------

    async def _cuts(self, plan: Plan, controller: Controller, admin: Admin) -> dict[str, Any]:
        if not plan.cuts:
            return {"skipped": "not run (--cuts 0)"}
        before = await self.fleet.totals()
        await self.fleet.ask_all({"cmd": "record", "on": True})
        cuts: list[dict[str, Any]] = []
        for index, cut in enumerate(plan.cuts, 1):
            what = f"cut {index} ({cut.kind} {cut.key})"
            event_ns = await self._port(plan, cut, up=False, what=what)
            rows = await self._window(
                plan, controller, admin, start_ns=event_ns, first_s=FIRST_MESSAGE_S, what=what
            )
            if not rows:
                raise Failure(
                    f"{what} changed no switch: no state message within "
                    f"{FIRST_MESSAGE_S:g} s of its PortStatus"
                )
            figures = _window_figures(what, rows, event_ns)
            what_back = f"restore {index} ({cut.key})"
            restore_ns = await self._port(plan, cut, up=True, what=what_back)
            first_s = FIRST_MESSAGE_S + self.options.hold_down_s
            back = await self._window(
                plan, controller, admin, start_ns=restore_ns, first_s=first_s, what=what_back
            )
            await admin.wait_link_up(cut.link, FIRST_MESSAGE_S + self.options.hold_down_s)
            if not back:
                raise Failure(f"{what_back} changed no switch")
            cuts.append(
                {
                    "kind": cut.kind,
                    "link": cut.key,
                    **figures,
                    "restore": _window_figures(what_back, back, restore_ns),
                }
            )
            self.say(
                f"{what}: {figures['switches']} switches, last delta "
                f"{figures['to_last_delta_ms']:.0f} ms, last Applied "
                f"{figures['to_last_applied_ms']:.0f} ms"
            )
        after = await self.fleet.totals()
        await self.fleet.ask_all({"cmd": "record", "on": False})
        return {
            **_cut_figures(cuts, sum(after.resets.values()) - sum(before.resets.values())),
            "swarm_loop_lag_max_ms": round(after.lag_max_ms, 1),
        }

    async def _port(self, plan: Plan, cut: Cut, *, up: bool, what: str) -> int:
        """Both ends report the carrier change at once; the earlier wall time (the event)."""
        ln = cut.link
        replies = await asyncio.gather(
            *(
                self.fleet.ask(
                    plan.agent_by_name[switch].shard,
                    {"cmd": "port", "switch": switch, "port": port, "up": up},
                )
                for switch, port in ((ln.a, ln.a_port), (ln.b, ln.b_port))
            )
        )
        sent = [r["wall_ns"] for r in replies]
        if None in sent:
            raise Failure(f"{what}: an end's agent had no session to report it on")
        return int(min(sent))

    async def _window(
        self,
        plan: Plan,
        controller: Controller,
        admin: Admin,
        *,
        start_ns: int,
        first_s: float,
        what: str,
    ) -> list[list[Any]]:
        """The state messages received from `start_ns` until none came for QUIET_S and the
        controller counts every agent's switch converged; [] when none came within
        `first_s`."""
        began = time.monotonic()
        next_check = 0.0
        while True:
            await asyncio.sleep(POLL_S)
            totals = await self.fleet.totals()
            last = totals.last_received_ns
            waited = time.monotonic() - began
            if last >= start_ns:
                if time.time_ns() - last >= QUIET_S * 1e9 and time.monotonic() >= next_check:
                    next_check = time.monotonic() + LINKS_POLL_S
                    if await self._converged(plan, admin):
                        break
            elif waited > first_s:
                break
            if controller.exit_code() is not None:
                raise controller.failed(what)
            if waited > WINDOW_MAX_S:
                raise Failure(f"{what}: not settled after {WINDOW_MAX_S:g} s")
        rows = await self.fleet.rows("take")
        return [row for row in rows if row[4] >= start_ns and row[1] in STATE_KINDS]

    @staticmethod
    async def _converged(plan: Plan, admin: Admin) -> bool:
        _, converged = await admin.switch_view(spec.name for spec in plan.agents)
        return converged == len(plan.agents)


# The slowest admin calls reported, each with when it was made.
SLOWEST = 5


def _slowest(admin: Admin, storm_ns: int) -> list[dict[str, float]]:
    """The SLOWEST admin probe calls, slowest first: when each was made (s after the storm
    began) and how long it took (ms)."""
    calls = sorted(zip(admin.latencies_ms, admin.started_ns, strict=True), reverse=True)
    return [{"at_s": round(_s(ns - storm_ns), 2), "ms": round(ms, 1)} for ms, ns in calls[:SLOWEST]]


def _count(messages: Counter[str]) -> str:
    return ", ".join(f"{n:,} {kind}" for kind, n in sorted(messages.items())) or "no message"


def _window_figures(what: str, rows: Sequence[list[Any]], event_ns: int) -> dict[str, Any]:
    """One window's figures. Rows: [switch, kind, generation, bytes, received_ns,
    applied_ns]."""
    answered = [int(r[5]) for r in rows if r[5]]
    if not answered:
        raise EmptySample(f"{what}: no Applied was sent for any of its {len(rows)} messages")
    kinds = Counter(str(r[1]) for r in rows)
    return {
        "to_last_delta_ms": round(_ms(max(int(r[4]) for r in rows) - event_ns), 2),
        "to_last_applied_ms": round(_ms(max(answered) - event_ns), 2),
        "switches": len({r[0] for r in rows}),
        "messages": dict(kinds),
        "bytes": sum(int(r[3]) for r in rows),
        "unanswered": len(rows) - len(answered),
    }


def _cut_figures(cuts: list[dict[str, Any]], resets: int) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cut in cuts:
        by_kind[cut["kind"]].append(cut)

    def dists(label: str, sample: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "count": len(sample),
            "to_last_delta_ms": distribution(
                f"{label}: event -> last StateDelta", [c["to_last_delta_ms"] for c in sample], 2
            ),
            "to_last_applied_ms": distribution(
                f"{label}: event -> last Applied", [c["to_last_applied_ms"] for c in sample], 2
            ),
            "switches": distribution(
                f"{label}: switches touched", [c["switches"] for c in sample], 0
            ),
            "bytes": distribution(f"{label}: bytes pushed", [c["bytes"] for c in sample], 0),
        }

    restores = [c["restore"] for c in cuts]
    return {
        **dists("cuts", cuts),
        "by_kind": {kind: dists(kind, sample) for kind, sample in by_kind.items()},
        "restore": dists("restores", restores),
        "resets": resets,
        "unanswered": sum(c["unanswered"] for c in cuts),
        "snapshots": sum(c["messages"].get("desired_state", 0) for c in cuts),
        "list": cuts,
    }


async def run(options: Options) -> dict[str, Any]:
    """The report of one run; every process and file it made are gone when it returns or
    raises (Failure, EmptySample, ControllerFailed, SwarmFailed, PlanError, IntentError)."""
    current = Run(options)
    try:
        return await current.run()
    finally:
        await current.close()


__all__ = ["ControllerFailed", "Failure", "Options", "run"]
