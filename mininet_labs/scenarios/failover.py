"""Link failure and recovery under a steady probe (ARCHITECTURE §7).

A probe flow runs at `probe_pps` across the fabric. The lab cuts the cable it uses — first the
source ToR's uplink (local: the agent repairs its groups, softswitch already skips the dead
member by watch_port), then the spine's link to the destination ToR (remote: only the
controller's recomputation moves the flow) — waits for the controller to converge, restores
the cable, waits for the link to return to routing, and repeats.

The loss window of a cut is measured from the probe's own timestamps: for each run of lost
sequence numbers, the send-time distance between the datagrams received on either side, less
one probe interval. The controller's CONVERGED event for the link gives the breakdown in its
typed ConvergenceFigures: detection (cut -> agent saw carrier loss), report, recomputation,
push and applied; the PORT_DOWN event of the repairing switch's port gives its local repair
time (carrier event -> committed P4Runtime Write, PortChange.local_repair_ns as the agent
reported it). No figure is read back from text."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from mininet_labs.lab import Lab, Sender
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table, fmt, percentile
from mininet_labs.scenarios.common import Budget, flow, nics_on, tor_pair, wait_for
from mininet_labs.traffic import FlowSpec, Packet
from railfabric.v1 import admin_pb2

LOCAL_TARGET_MS = 50.0
REMOTE_TARGET_MS = 250.0
SETTLE_S = 0.4  # steady traffic on the new path after convergence, before the restore
CUT_LEAD_NS = 50_000_000


@dataclass(frozen=True)
class Convergence:
    wall_ns: int
    total_ms: float
    report_ms: float
    compute_ms: float
    push_ms: float
    apply_ms: float
    switches: int
    objects: int

    @property
    def event_wall_ns(self) -> int:
        """When the first agent saw the change (its PortStatus wall time)."""
        return self.wall_ns - int(self.total_ms * 1e6)


@dataclass
class Cut:
    kind: str  # "local" | "remote"
    link: str
    repair_switch: str
    repair_port: int
    cut_mono_ns: int
    cut_wall_ns: int
    restore_mono_ns: int = 0
    end_mono_ns: int = 0
    down: Convergence | None = None
    up: Convergence | None = None
    local_repair_ms: float = float("nan")
    loss_ms: float = float("nan")
    restore_loss_ms: float = float("nan")
    lost: int = 0


def _converged_after(lab: Lab, link: str, usable: bool, after_wall_ns: int) -> Convergence | None:
    """The controller's CONVERGED event for `link` leaving (usable=False) or returning to
    (usable=True) routing at or after `after_wall_ns`."""
    kinds = (admin_pb2.EVENT_KIND_CONVERGED,)
    for e in lab.events(limit=60, types=kinds, after_wall_ns=after_wall_ns):
        if (
            e.type != admin_pb2.EVENT_KIND_CONVERGED
            or e.WhichOneof("detail") != "convergence"
            or e.wall_ns < after_wall_ns
        ):
            continue
        c = e.convergence
        if c.link == link and c.usable == usable:
            return Convergence(
                e.wall_ns,
                c.event_to_applied_ns / 1e6,
                c.report_ns / 1e6,
                c.compute_ns / 1e6,
                c.push_ns / 1e6,
                c.apply_ns / 1e6,
                c.switches,
                c.entries,
            )
    return None


def _local_repair_ms(lab: Lab, switch: str, port: int, after_wall_ns: int) -> float:
    """The agent's local repair of `switch`:`port` (carrier loss -> committed Write, ms) as
    the controller's PORT_DOWN event for it carries it; NaN when no such event arrived after
    `after_wall_ns` or nothing needed repair (local_repair_ns 0)."""
    kinds = (admin_pb2.EVENT_KIND_PORT_DOWN,)
    repairs = [
        e.port_change.local_repair_ns
        for e in lab.events(limit=200, types=kinds, after_wall_ns=after_wall_ns)
        if e.type == admin_pb2.EVENT_KIND_PORT_DOWN
        and e.WhichOneof("detail") == "port_change"
        and e.wall_ns >= after_wall_ns
        and (e.switch_name, e.port) == (switch, port)
    ]
    return repairs[0] / 1e6 if repairs and repairs[0] > 0 else float("nan")


def _path_uses(lab: Lab, probe: FlowSpec, switch: str, port: int) -> bool:
    path = lab.predict(probe)
    return bool(path.delivered_to) and any(
        (h.switch_name, h.egress_port) == (switch, port) for h in path.hops
    )


def _one_cut(lab: Lab, probe: FlowSpec, kind: str, switch: str, port: int) -> Cut:
    cable = lab.topology.cable(switch, port)
    key = cable.link.key
    wait_for(
        f"the probe to use {switch}:{port} again",
        lambda: True if _path_uses(lab, probe, switch, port) else None,
        timeout_s=10,
    )
    cut = Cut(kind, key, switch, port, time.monotonic_ns(), time.time_ns())
    lab.topology.cut(key)
    cut.down = wait_for(
        f"the controller to converge after cutting {key}",
        lambda: _converged_after(lab, key, False, cut.cut_wall_ns),
        timeout_s=10,
    )
    time.sleep(SETTLE_S)
    cut.local_repair_ms = _local_repair_ms(lab, switch, port, cut.cut_wall_ns)
    restore_wall = time.time_ns()
    cut.restore_mono_ns = time.monotonic_ns()
    lab.topology.restore(key)
    cut.up = wait_for(
        f"{key} to return to routing",
        lambda: _converged_after(lab, key, True, restore_wall),
        timeout_s=lab.options.hold_down_s + 10,
    )
    wait_for(
        f"{key} to be up",
        lambda: True if lab.link_state(key) == admin_pb2.LINK_STATE_UP else None,
        timeout_s=5,
    )
    time.sleep(SETTLE_S)
    cut.end_mono_ns = time.monotonic_ns()
    return cut


def _loss(packets: list[Packet], start_ns: int, end_ns: int, interval_ns: int) -> tuple[float, int]:
    """(ms of lost send time, datagrams lost) for gaps whose last datagram before the gap was
    sent in [start_ns, end_ns)."""
    lost_ns, lost = 0, 0
    for before, after in itertools.pairwise(packets):
        gap = after.seq - before.seq - 1
        if gap > 0 and start_ns <= before.sent_ns < end_ns:
            lost += gap
            lost_ns += max(0, after.sent_ns - before.sent_ns - interval_ns)
    return lost_ns / 1e6, lost


def run(lab: Lab, budget: Budget) -> Result:
    src_tor, dst_tor = tor_pair(lab)
    src, dst = nics_on(lab, src_tor)[0], nics_on(lab, dst_tor)[0]
    probe = flow(0, src, dst, 49152)
    path = lab.predict(probe)
    if len(path.hops) < 3 or not path.delivered_to:
        raise LabError(f"the probe {probe} has no 3-hop path: {path.error or path.hops}")
    local = (path.hops[0].switch_name, path.hops[0].egress_port)
    remote = (path.hops[1].switch_name, path.hops[1].egress_port)
    interval_ns = int(1e9 / budget.probe_pps)
    cuts: list[Cut] = []
    sender: Sender | None = None
    with lab.receiver(dst.host, "probe-recv") as out:
        sender = lab.start_sender(
            src.host, "probe-send", [probe], rate_pps=budget.probe_pps, duration_s=3600
        )
        try:
            time.sleep(0.5)
            for _ in range(budget.failover_reps):
                for kind, (switch, port) in (("local", local), ("remote", remote)):
                    cuts.append(_one_cut(lab, probe, kind, switch, port))
        finally:
            summary = lab.stop_sender(sender)
            time.sleep(0.2)
    packets = sorted((p for p in lab.records(out) if p.flow == 0), key=lambda p: p.seq)
    # Windows are disjoint, so a gap counts once: a cut's window opens CUT_LEAD_NS before it
    # (datagrams queued behind a cable when it is cut are lost with it) and closes the
    # previous restore's window there.
    for i, c in enumerate(cuts):
        c.loss_ms, c.lost = _loss(
            packets, c.cut_mono_ns - CUT_LEAD_NS, c.restore_mono_ns, interval_ns
        )
        end = c.end_mono_ns
        if i + 1 < len(cuts):
            end = min(end, cuts[i + 1].cut_mono_ns - CUT_LEAD_NS)
        c.restore_loss_ms, _ = _loss(packets, c.restore_mono_ns, end, interval_ns)
    return _result(lab, cuts, budget, summary, len(packets))


def _result(
    lab: Lab, cuts: list[Cut], budget: Budget, summary: dict[str, object], received: int
) -> Result:
    rows = []
    nan = float("nan")
    for i, c in enumerate(cuts, start=1):
        d = c.down
        detection, report, compute, push, apply, total = (
            (
                (d.event_wall_ns - c.cut_wall_ns) / 1e6,
                d.report_ms,
                d.compute_ms,
                d.push_ms,
                d.apply_ms,
                d.total_ms,
            )
            if d
            else (nan, nan, nan, nan, nan, nan)
        )
        rows.append(
            (
                str(i), c.kind, c.link, fmt(c.loss_ms), fmt(c.restore_loss_ms), fmt(detection),
                fmt(c.local_repair_ms, 2), fmt(report), fmt(compute, 2), fmt(push), fmt(apply),
                fmt(total),
            )
        )  # fmt: skip
    table = Table(
        (
            "#", "cut", "link", "loss ms", "restore loss ms", "detect ms", "local repair ms",
            "report ms", "recompute ms", "push ms", "applied ms", "converged ms",
        ),
        tuple(rows),
    )  # fmt: skip

    def values(kind: str, attr: str) -> list[float]:
        return [getattr(c, attr) for c in cuts if c.kind == kind]

    local_loss, remote_loss = values("local", "loss_ms"), values("remote", "loss_ms")
    conv = [c.down.total_ms for c in cuts if c.down]
    detect = [(c.down.event_wall_ns - c.cut_wall_ns) / 1e6 for c in cuts if c.down]
    repair = [c.local_repair_ms for c in cuts if c.local_repair_ms == c.local_repair_ms]
    sent = summary["sent"]
    metrics: dict[str, float | int | str] = {
        "repetitions": budget.failover_reps,
        "probe_pps": budget.probe_pps,
        "probe_sent": sum(int(n) for n in sent.values()) if isinstance(sent, dict) else 0,
        "probe_received": received,
        "local_loss_ms_p50": percentile(local_loss, 50),
        "local_loss_ms_p99": percentile(local_loss, 99),
        "remote_loss_ms_p50": percentile(remote_loss, 50),
        "remote_loss_ms_p99": percentile(remote_loss, 99),
        "restore_loss_ms_p99": percentile([c.restore_loss_ms for c in cuts], 99),
        "convergence_ms_p50": percentile(conv, 50),
        "convergence_ms_p99": percentile(conv, 99),
        "detection_ms_p50": percentile(detect, 50),
        "detection_ms_p99": percentile(detect, 99),
        "local_repair_ms_p50": percentile(repair, 50),
        "local_repair_ms_p99": percentile(repair, 99),
        "report_ms_p50": percentile([c.down.report_ms for c in cuts if c.down], 50),
        "recompute_ms_p50": percentile([c.down.compute_ms for c in cuts if c.down], 50),
        "push_ms_p50": percentile([c.down.push_ms for c in cuts if c.down], 50),
        "applied_ms_p50": percentile([c.down.apply_ms for c in cuts if c.down], 50),
    }
    metrics = {k: round(v, 3) if isinstance(v, float) else v for k, v in metrics.items()}
    lp99, rp99 = percentile(local_loss, 99), percentile(remote_loss, 99)
    problems = []
    if not lp99 <= LOCAL_TARGET_MS:
        problems.append(f"local loss p99 {fmt(lp99)} ms > {LOCAL_TARGET_MS:g} ms")
    if not rp99 <= REMOTE_TARGET_MS:
        problems.append(f"remote loss p99 {fmt(rp99)} ms > {REMOTE_TARGET_MS:g} ms")
    if len(conv) != len(cuts):
        problems.append(f"{len(cuts) - len(conv)} cuts without a convergence event")
    reason = (
        f"{len(cuts)} cuts at {budget.probe_pps} pps: loss p99 local {fmt(lp99)} ms "
        f"(<= {LOCAL_TARGET_MS:g}), remote {fmt(rp99)} ms (<= {REMOTE_TARGET_MS:g}); "
        f"convergence p99 {fmt(percentile(conv, 99))} ms; loss when links return p99 "
        f"{fmt(percentile([c.restore_loss_ms for c in cuts], 99))} ms"
    )
    if problems:
        reason += "; " + "; ".join(problems)
    return Result("failover", not problems, reason, metrics, (table,))
