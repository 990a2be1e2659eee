"""The leading controller killed under traffic (docs/architecture.md §12; issue 16).

The lab runs controller replicas on an etcd cluster (LabOptions.controllers; `python -m
mininet_labs run` builds such a lab for this scenario), every agent listing them all. A probe
flows at `probe_pps` across the fabric, as in the failover scenario. The leader is killed
with SIGKILL (a crash: no resignation, its lease runs out at etcd), and from the kill the lab
measures:

- elected: until another replica's health says SERVING for FabricControl (polled);
- takeover: until the last agent's session came up on the new leader (the newest of the first
  SESSION_UP event of each switch on it; the new leader's ListSwitches then shows every
  switch connected and converged);
- the probe's loss in the takeover window: from TAKEOVER_LEAD_NS before the kill until
  SETTLE_S after the takeover, with its sample (datagrams sent, received), counted as the
  failover scenario counts its cut windows;
- the P4Runtime updates the agents wrote meanwhile, per switch: Applied.updates_written as
  the new leader sums them (SwitchStatus.updates_written) from its own start, which was
  before the takeover (it never led: every leader before it was killed), read SETTLE_S after
  the takeover so that a push would have been applied and reported; and the PUSHED events of
  the new leader (pushes that wrote nothing would show there only).

Then the killed replica is started again, as its supervisor (systemd) would start it, and
comes back as a follower; the next kill waits for it and for the fabric to be converged.

Verdict: 0 datagrams lost in every takeover window, 0 updates written on every switch, every
switch's agent on the new leader, every figure from a non-empty sample (the probe delivering
>= MIN_DELIVERY outside the takeovers, so a probe that never got through cannot pass), and
the slowest takeover within the lease TTL + TAKEOVER_MARGIN_S. That last one is a timing
goal, judged here as the failover scenario judges its loss targets: `make demo` reports it
and fails on it; the lab tests check outcomes with wide bounds (`outcome_problems` counts
every problem that is not a timing goal).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from mininet_labs.lab import Lab, Sender
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table, fmt, percentile
from mininet_labs.scenarios.common import Budget, Sample, flow, nics_on, sample_problem, tor_pair
from mininet_labs.scenarios.failover import MIN_DELIVERY, NO_WINDOW, Probe, Window, windows
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

NAME = "controller-failover"
# The goal: the last agent on the new leader within the lease TTL and this much more.
TAKEOVER_MARGIN_S = 1.0
# After the takeover: traffic on, and time for a push (if any) to be applied and reported.
SETTLE_S = 1.0
# A takeover window opens this long before the kill (datagrams in flight at the kill).
TAKEOVER_LEAD_NS = 50_000_000
NEEDS_REPLICAS = (
    "needs a lab with controller replicas on etcd (`python -m mininet_labs run FABRIC "
    f"--scenario {NAME}` builds one; `up FABRIC --controllers 3` for the CLI)"
)


@dataclass
class Kill:
    """One kill of the leader and its takeover."""

    killed: str  # the leader killed (address)
    kill_mono_ns: int
    kill_wall_ns: int
    new_leader: str = ""
    elected_ms: float = math.nan
    takeover_ms: float = math.nan  # NaN: a switch has no SESSION_UP on the new leader
    end_mono_ns: int = 0
    switches: int = 0  # in the fabric
    on_new_leader: int = 0  # connected to the new leader SETTLE_S after the takeover
    without_session_up: tuple[str, ...] = ()
    writes: dict[str, int] = field(default_factory=dict)  # switch -> updates written
    pushes: int = 0
    window: Window = field(default=NO_WINDOW)

    @property
    def written(self) -> int:
        return sum(self.writes.values())


def goal_ms(lease_ttl_s: float) -> float:
    return (lease_ttl_s + TAKEOVER_MARGIN_S) * 1000


def _events(
    lab: Lab, addr: str, kind: admin_pb2.EventKind.ValueType, after_wall_ns: int
) -> list[admin_pb2.Event]:
    request = admin_pb2.ListEventsRequest(limit=1000, types=[kind], after_wall_ns=after_wall_ns)
    reply = lab.admin_at(addr).ListEvents(request, timeout=5)
    return [e for e in reply.events if e.type == kind and e.wall_ns >= after_wall_ns]


def _all_on(lab: Lab, addr: str) -> list[admin_pb2.SwitchStatus] | None:
    """The new leader's switches when every one is connected and converged there."""
    try:
        reply = lab.admin_at(addr).ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=5)
    except grpc.RpcError:  # while it starts: asked again
        return None
    switches = list(reply.switches)
    everyone = len(switches) == len(lab.fabric.switches)
    return switches if everyone and all(s.connected and s.converged for s in switches) else None


def _one_kill(lab: Lab) -> Kill:
    # Steady first: every replica up (the one killed last time a follower again), the fabric
    # converged on the leader.
    lab.wait_converged(timeout_s=30)
    leader = lab.leader()
    replica = lab.replica_of(leader)
    others = [a for a in lab.controller_addrs if a != leader]
    kill = Kill(leader, time.monotonic_ns(), time.time_ns(), switches=len(lab.fabric.switches))
    lab.kill_replica(replica)
    kill.new_leader = lab.find_leader(among=others, timeout_s=lab.options.lease_ttl_s + 30)
    kill.elected_ms = (time.monotonic_ns() - kill.kill_mono_ns) / 1e6
    wait_for(
        f"every agent on the new leader {kill.new_leader}",
        lambda: _all_on(lab, kill.new_leader),
        timeout_s=30,
        every_s=0.02,
    )
    first_up: dict[str, int] = {}
    for e in _events(lab, kill.new_leader, admin_pb2.EVENT_KIND_SESSION_UP, kill.kill_wall_ns):
        first_up.setdefault(e.switch_name, e.wall_ns)
    missing = tuple(s.name for s in lab.fabric.switches if s.name not in first_up)
    kill.without_session_up = missing
    if not missing:
        kill.takeover_ms = (max(first_up.values()) - kill.kill_wall_ns) / 1e6
    time.sleep(SETTLE_S)
    reply = lab.admin_at(kill.new_leader).ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=5)
    kill.writes = {s.info.name: int(s.updates_written) for s in reply.switches}
    kill.on_new_leader = sum(s.connected for s in reply.switches)
    pushed = _events(lab, kill.new_leader, admin_pb2.EVENT_KIND_PUSHED, kill.kill_wall_ns)
    kill.pushes = len(pushed)
    kill.end_mono_ns = time.monotonic_ns()
    # As its supervisor would: the killed replica starts again, and follows.
    lab.start_replica(replica)
    return kill


def run(lab: Lab, budget: Budget) -> Result:
    if not lab.replicated:
        return Result.skip(NAME, NEEDS_REPLICAS)
    src_tor, dst_tor = tor_pair(lab)
    src, dst = nics_on(lab, src_tor)[0], nics_on(lab, dst_tor)[0]
    probe = flow(0, src, dst, 49152)
    path = lab.predict(probe)
    if not path.delivered_to:
        raise LabError(f"the probe {probe} has no path: {path.error or path.hops}")
    interval_ns = int(1e9 / budget.probe_pps)
    restarts_before = len(lab.replica_restarts)
    kills: list[Kill] = []
    sender: Sender | None = None
    with lab.receiver(dst.host, "ctl-probe-recv") as out:
        sender = lab.start_sender(
            src.host, "ctl-probe-send", [probe], rate_pps=budget.probe_pps, duration_s=3600
        )
        try:
            time.sleep(0.5)
            for n in range(1, budget.controller_kills + 1):
                lab.progress(f"{NAME}: kill {n}/{budget.controller_kills} of the leader")
                kills.append(_one_kill(lab))
        finally:
            summary = lab.stop_sender(sender)
            time.sleep(0.2)
    packets = [p for p in lab.records(out) if p.flow == probe.flow]
    sent = summary.get("sent")
    sent_n = int(sent.get(str(probe.flow), 0)) if isinstance(sent, dict) else 0
    spans = [(k.kill_mono_ns - TAKEOVER_LEAD_NS, k.end_mono_ns) for k in kills]
    found, whole = windows(packets, sent_n, spans, interval_ns, frozenset(range(len(spans))))
    for k, w in zip(kills, found, strict=True):
        k.window = w
    restarts = len(lab.replica_restarts) - restarts_before
    return judge(kills, whole, budget, lab.options.lease_ttl_s, restarts)


def judge(
    kills: Sequence[Kill], probe: Probe, budget: Budget, lease_ttl_s: float, restarts: int = 0
) -> Result:
    """The verdict and report from measured kills (`probe`: the whole probe, as `windows`
    gives it). Every figure comes with its sample; see the module's docstring."""
    goal = goal_ms(lease_ttl_s)
    rows = tuple(
        (
            str(i), k.killed, k.new_leader, fmt(k.elected_ms), fmt(k.takeover_ms),
            f"{k.window.sample.sent:,}", f"{k.window.sample.received:,}",
            f"{k.window.lost:,}", f"{k.written:,}", str(k.pushes),
            f"{k.on_new_leader}/{k.switches}",
        )
        for i, k in enumerate(kills, start=1)
    )  # fmt: skip
    table = Table(
        (
            "#", "leader killed", "new leader", "elected ms", "takeover ms", "sent",
            "received", "lost", "updates written", "pushes", "agents on new leader",
        ),
        rows,
    )  # fmt: skip
    writes_by_switch: dict[str, int] = {}
    for k in kills:
        for switch, n in k.writes.items():
            writes_by_switch[switch] = writes_by_switch.get(switch, 0) + n
    per_switch = Table(
        ("switch", "updates written during the takeovers", "takeovers read"),
        tuple(
            (sw, f"{n:,}", str(sum(sw in k.writes for k in kills)))
            for sw, n in sorted(writes_by_switch.items())
        ),
    )
    elected = [k.elected_ms for k in kills if not math.isnan(k.elected_ms)]
    takeover = [k.takeover_ms for k in kills if not math.isnan(k.takeover_ms)]
    in_takeovers = sum((k.window.sample for k in kills), Sample(0, 0))
    outside = probe.total - in_takeovers if probe.broken is None else Sample(0, 0)
    written = sum(k.written for k in kills)
    reads = sum(len(k.writes) for k in kills)
    empty = sum(k.window.sample.empty for k in kills)

    problems: list[str] = []
    if probe.broken is not None:
        problems.append(f"the probe's records are broken: {probe.broken}")
    else:
        empties = [str(i) for i, k in enumerate(kills, 1) if k.window.sample.empty]
        if empties:
            problems.append(
                f"empty sample (no probe datagram) in the takeover window of kill "
                f"{', '.join(empties)}"
            )
        lossy = [f"{k.window.lost:,} at kill {i}" for i, k in enumerate(kills, 1) if k.window.lost]
        if lossy:
            problems.append(f"datagrams lost during the takeover: {'; '.join(lossy)}")
        delivery = sample_problem("probe", outside, MIN_DELIVERY, where="outside the takeovers")
        if delivery:
            problems.append(delivery)
    if len(kills) < budget.controller_kills or not kills:
        problems.append(f"{len(kills)} of {budget.controller_kills} kills measured")
    for i, k in enumerate(kills, 1):
        if k.on_new_leader != k.switches:
            problems.append(
                f"kill {i}: {k.on_new_leader}/{k.switches} agents on the new leader {k.new_leader}"
            )
        if k.without_session_up:
            problems.append(
                f"kill {i}: no SESSION_UP on the new leader for {', '.join(k.without_session_up)}"
            )
        if len(k.writes) != k.switches:
            problems.append(f"kill {i}: updates written read for {len(k.writes)}/{k.switches}")
        if k.written:
            wrote = ", ".join(f"{sw} {n}" for sw, n in sorted(k.writes.items()) if n)
            problems.append(f"kill {i}: P4Runtime updates written during the takeover: {wrote}")
    outcome_problems = len(problems)
    slowest = max(takeover) if takeover else math.nan
    if takeover and not slowest <= goal:
        problems.append(
            f"takeover max {fmt(slowest)} ms > {goal:g} ms (lease {lease_ttl_s:g} s + "
            f"{TAKEOVER_MARGIN_S:g} s)"
        )

    metrics: dict[str, float | int | str] = {
        "kills": len(kills),
        "lease_ttl_s": lease_ttl_s,
        "takeover_goal_ms": goal,
        "elected_ms_p50": percentile(elected, 50),
        "elected_ms_max": max(elected) if elected else math.nan,
        "takeover_ms_p50": percentile(takeover, 50),
        "takeover_ms_max": slowest,
        "takeovers_measured": len(takeover),
        "takeovers_within_goal": sum(t <= goal for t in takeover),
        "probe_pps": budget.probe_pps,
        "probe_sent": probe.total.sent,
        "probe_received": probe.total.received,
        "probe_duplicates": probe.duplicates,
        "takeover_sent": in_takeovers.sent,
        "takeover_received": in_takeovers.received,
        "takeover_lost": in_takeovers.lost,
        "outside_takeovers_sent": outside.sent,
        "outside_takeovers_received": outside.received,
        "outside_takeovers_delivered_pct": 100 * outside.delivered,
        "windows_with_empty_sample": empty,
        "updates_written": written,
        "updates_written_reads": reads,  # switches x kills whose count was read
        "switches_with_writes": sum(1 for n in writes_by_switch.values() if n),
        "pushes": sum(k.pushes for k in kills),
        "agents_on_new_leader_min": min((k.on_new_leader for k in kills), default=0),
        "switches": kills[0].switches if kills else 0,
        "replicas_restarted_unasked": restarts,
        "outcome_problems": outcome_problems,
    }
    metrics = {k: round(v, 3) if isinstance(v, float) else v for k, v in metrics.items()}
    reason = (
        f"{len(kills)} kills of the leader at {budget.probe_pps} pps: takeover (last agent on "
        f"the new leader) p50 {fmt(percentile(takeover, 50))} ms, max {fmt(slowest)} ms "
        f"(<= {goal:g}; {len(takeover)} kills), elected p50 "
        f"{fmt(percentile(elected, 50))} ms; lost during the takeovers {in_takeovers.lost:,} "
        f"({in_takeovers} datagrams received/sent); P4Runtime updates written "
        f"{written:,} ({reads} switch counts read), pushes {metrics['pushes']}; outside the "
        f"takeovers {outside} delivered ({fmt(100 * outside.delivered)}%)"
    )
    if restarts:
        reason += f"; {restarts} replica(s) exited on their own and were started again"
    if problems:
        reason += "; " + "; ".join(problems)
    return Result(NAME, not problems, reason, metrics, (table, per_switch))
