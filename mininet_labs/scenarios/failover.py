"""Link failure and recovery under a steady probe (docs/architecture.md §7).

A probe flow runs at `probe_pps` across the fabric. The lab cuts the cable it uses — first the
source ToR's uplink (local: the agent repairs its groups, softswitch already skips the dead
member by watch_port), then the spine's link to the destination ToR (remote: only the
controller's recomputation moves the flow) — waits for the controller to converge, restores
the cable, waits for the link to return to routing, and repeats.

The loss window of a cut is measured from the probe's own timestamps: for each run of lost
sequence numbers, the send-time distance between the datagrams received on either side, less
one probe interval. Every loss figure comes with its sample, the datagrams it was computed
from (sent, and received of those), and a figure from an empty or broken sample fails the
scenario; so does a probe that delivered less than MIN_DELIVERY outside the cut windows (a
target that forwards nothing loses no time "at the cuts"). The controller's CONVERGED event
for the link gives the breakdown in its typed ConvergenceFigures: detection (cut -> agent saw
carrier loss), report, recomputation, push and applied; the LOCAL_REPAIR event of the
repairing switch's port gives its local repair time (carrier event -> committed P4Runtime
Write, PortChange.local_repair_ns as the agent reported it). No figure is read back from
text."""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mininet_labs.lab import Lab, Sender
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table, fmt, percentile
from mininet_labs.scenarios.common import (
    Budget,
    Sample,
    flow,
    nics_on,
    sample_problem,
    tor_pair,
)
from mininet_labs.traffic import FlowSpec, Packet
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

LOCAL_TARGET_MS = 50.0
REMOTE_TARGET_MS = 250.0
SETTLE_S = 0.4  # steady traffic on the new path after convergence, before the restore
CUT_LEAD_NS = 50_000_000
MIN_DELIVERY = 0.95  # of the probe, outside the cut windows


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


@dataclass(frozen=True)
class Window:
    """What the probe did in one span of send time. A run of lost datagrams counts in the
    window where the last datagram before it was sent (so in one window only); `sample` is
    the datagrams received in the window plus those runs."""

    loss_ms: float  # NaN: empty or broken sample
    sample: Sample

    @property
    def lost(self) -> int:
        return self.sample.lost


NO_WINDOW = Window(math.nan, Sample(0, 0))


@dataclass(frozen=True)
class Probe:
    """The whole probe: every datagram sent, and those outside the cut windows."""

    total: Sample
    outside: Sample
    broken: str | None = None  # why the receiver's records cannot be trusted
    duplicates: int = 0


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
    window: Window = field(default=NO_WINDOW)  # from CUT_LEAD_NS before the cut to the restore
    restore: Window = field(default=NO_WINDOW)  # from the restore to the next cut window

    @property
    def loss_ms(self) -> float:
        return self.window.loss_ms

    @property
    def restore_loss_ms(self) -> float:
        return self.restore.loss_ms


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
    the controller's LOCAL_REPAIR event for it carries it; NaN when no such event arrived
    after `after_wall_ns` (nothing needed repair)."""
    kinds = (admin_pb2.EVENT_KIND_LOCAL_REPAIR,)
    repairs = [
        e.port_change.local_repair_ns
        for e in lab.events(limit=200, types=kinds, after_wall_ns=after_wall_ns)
        if e.type == admin_pb2.EVENT_KIND_LOCAL_REPAIR
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


def windows(
    packets: Sequence[Packet],
    sent: int,
    spans: Sequence[tuple[int, int]],
    interval_ns: int,
    claiming: frozenset[int] = frozenset(),
) -> tuple[list[Window], Probe]:
    """The probe's figures in each of the disjoint, ordered send-time `spans` [start, end)
    from the receiver's records of one flow and the number of datagrams the sender reports
    `sent` (sequence numbers 0 .. sent-1). A run of lost datagrams is one outage and counts
    in one span: where it started, unless it ended inside a span of `claiming` (a cut's
    window: on a loaded machine the datagrams queued behind a cable when it is cut were
    sent well before the cut, so its outage can start in the window before). Datagrams lost
    after the last one received count where it was sent, one interval each; those lost
    before the first one received, where the first was sent less the intervals.
    `Probe.outside` is what no span holds."""
    by_seq: dict[int, Packet] = {}
    for p in packets:
        by_seq.setdefault(p.seq, p)
    got = [by_seq[seq] for seq in sorted(by_seq)]
    duplicates = len(packets) - len(got)
    if got and got[-1].seq == sent:
        sent += 1  # the sender was stopped between sending its last datagram and counting it
    broken = None
    if got and got[-1].seq >= sent:
        broken = f"datagram #{got[-1].seq} received, but the sender reports {sent:,} sent"
    elif any(b.sent_ns < a.sent_ns for a, b in itertools.pairwise(got)):
        broken = "send stamps do not grow with sequence numbers"
    if broken is not None:
        empty = [NO_WINDOW for _ in spans]
        return empty, Probe(Sample(sent, len(got)), Sample(0, 0), broken, duplicates)
    starts = [start for start, _ in spans]

    def span_of(sent_ns: int) -> int:
        """Index of the span holding `sent_ns`, -1 for none."""
        i = bisect.bisect_right(starts, sent_ns) - 1
        return i if i >= 0 and sent_ns < spans[i][1] else -1

    n = len(spans) + 1  # the last slot: outside every span
    received, lost, lost_ns = [0] * n, [0] * n, [0] * n
    for p in got:
        received[span_of(p.sent_ns)] += 1
    # (send times the run spans [from, to), datagrams, ns lost)
    runs: list[tuple[int, int, int, int]] = []
    if got:
        first, last = got[0], got[-1]
        if first.seq:
            lost_for = first.seq * interval_ns
            runs.append((first.sent_ns - lost_for, first.sent_ns, first.seq, lost_for))
        for before, after in itertools.pairwise(got):
            gap = after.seq - before.seq - 1
            if gap > 0:
                ns = max(0, after.sent_ns - before.sent_ns - interval_ns)
                runs.append((before.sent_ns, after.sent_ns, gap, ns))
        if sent - 1 > last.seq:
            tail = sent - 1 - last.seq
            runs.append((last.sent_ns, last.sent_ns + tail * interval_ns, tail, tail * interval_ns))
    else:
        lost[-1] = sent  # nothing arrived: when it was sent is unknown, so no span holds it

    for from_ns, to_ns, count, ns in runs:
        i = span_of(from_ns)
        if i not in claiming and (end := span_of(to_ns - 1)) in claiming:
            i = end  # the outage ended inside a cut's window: the cut's
        lost[i] += count
        lost_ns[i] += ns
    result = []
    for i in range(len(spans)):
        sample = Sample(received[i] + lost[i], received[i])
        result.append(Window(math.nan if sample.empty else lost_ns[i] / 1e6, sample))
    outside = Sample(received[-1] + lost[-1], received[-1])
    return result, Probe(Sample(sent, len(got)), outside, None, duplicates)


def measure(cuts: Sequence[Cut], packets: Sequence[Packet], sent: int, interval_ns: int) -> Probe:
    """Fill in each cut's windows from the probe's records; the whole probe and what it did
    outside the cut windows. Windows are disjoint, so a gap counts once: a cut's window opens
    CUT_LEAD_NS before it (datagrams queued behind a cable when it is cut are lost with it)
    and closes the previous restore's window there; an outage that ends inside a cut's
    window is the cut's, wherever it started."""
    spans: list[tuple[int, int]] = []
    for i, c in enumerate(cuts):
        end = c.end_mono_ns
        if i + 1 < len(cuts):
            end = min(end, cuts[i + 1].cut_mono_ns - CUT_LEAD_NS)
        spans += [(c.cut_mono_ns - CUT_LEAD_NS, c.restore_mono_ns), (c.restore_mono_ns, end)]
    cut_windows = frozenset(range(0, len(spans), 2))
    result, probe = windows(packets, sent, spans, interval_ns, cut_windows)
    for i, c in enumerate(cuts):
        c.window, c.restore = result[2 * i], result[2 * i + 1]
    if probe.broken is not None:
        return probe
    in_cuts = sum((c.window.sample for c in cuts), Sample(0, 0))
    return Probe(probe.total, probe.total - in_cuts, None, probe.duplicates)


def run(lab: Lab, budget: Budget) -> Result:
    return judge(*cut_repeatedly(lab, budget), budget)


def cut_repeatedly(lab: Lab, budget: Budget) -> tuple[list[Cut], Probe]:
    """Make `budget.failover_reps` local and as many remote cuts under the probe flow: the
    cuts and what the probe did (`judge` gives the verdict)."""
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
            total = 2 * budget.failover_reps
            for _ in range(budget.failover_reps):
                for kind, (switch, port) in (("local", local), ("remote", remote)):
                    lab.progress(f"failover: cut {len(cuts) + 1}/{total} ({kind}, {switch}:{port})")
                    cuts.append(_one_cut(lab, probe, kind, switch, port))
        finally:
            summary = lab.stop_sender(sender)
            time.sleep(0.2)
    packets = [p for p in lab.records(out) if p.flow == probe.flow]
    sent = summary.get("sent")
    sent_n = int(sent.get(str(probe.flow), 0)) if isinstance(sent, dict) else 0
    return cuts, measure(cuts, packets, sent_n, interval_ns)


@dataclass(frozen=True)
class Figures:
    """Each cut's figures in ms, one tuple per figure, in cut order; a cut whose figure was
    not measured (an empty sample, no convergence event) is left out of that tuple. `judge`
    summarises them; a benchmark pools them over runs."""

    local_loss: tuple[float, ...]
    remote_loss: tuple[float, ...]
    restore_loss: tuple[float, ...]
    convergence: tuple[float, ...]
    detection: tuple[float, ...]
    local_repair: tuple[float, ...]

    @classmethod
    def of(cls, cuts: Sequence[Cut]) -> Figures:
        def loss(windows: Sequence[Window]) -> tuple[float, ...]:
            return tuple(w.loss_ms for w in windows if not w.sample.empty)

        converged = [(c, c.down) for c in cuts if c.down]
        return cls(
            local_loss=loss([c.window for c in cuts if c.kind == "local"]),
            remote_loss=loss([c.window for c in cuts if c.kind == "remote"]),
            restore_loss=loss([c.restore for c in cuts]),
            convergence=tuple(d.total_ms for _, d in converged),
            detection=tuple((d.event_wall_ns - c.cut_wall_ns) / 1e6 for c, d in converged),
            local_repair=tuple(
                c.local_repair_ms for c in cuts if not math.isnan(c.local_repair_ms)
            ),
        )


def judge(cuts: Sequence[Cut], probe: Probe, budget: Budget) -> Result:
    """The verdict and report from measured cuts (see `measure`). Every loss figure comes
    with its sample (datagrams sent / received) in its row and in the metrics; a figure
    from an empty or broken sample, or a probe that delivered less than MIN_DELIVERY
    outside the cut windows, fails."""
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
        w, r = c.window.sample, c.restore.sample
        rows.append(
            (
                str(i), c.kind, c.link, fmt(c.loss_ms), f"{w.sent:,}", f"{w.received:,}",
                fmt(c.restore_loss_ms), f"{r.sent:,}", f"{r.received:,}", fmt(detection),
                fmt(c.local_repair_ms, 2), fmt(report), fmt(compute, 2), fmt(push), fmt(apply),
                fmt(total),
            )
        )  # fmt: skip
    table = Table(
        (
            "#", "cut", "link", "loss ms", "sent", "received", "restore loss ms",
            "restore sent", "restore received", "detect ms", "local repair ms", "report ms",
            "recompute ms", "push ms", "applied ms", "converged ms",
        ),
        tuple(rows),
    )  # fmt: skip

    def sample(windows: list[Window]) -> Sample:
        return sum((w.sample for w in windows), Sample(0, 0))

    f = Figures.of(cuts)
    local_loss, remote_loss, restore_loss = f.local_loss, f.remote_loss, f.restore_loss
    conv, detect, repair = f.convergence, f.detection, f.local_repair
    local_sample = sample([c.window for c in cuts if c.kind == "local"])
    remote_sample = sample([c.window for c in cuts if c.kind == "remote"])
    restore_sample = sample([c.restore for c in cuts])
    outside = probe.outside
    empty = sum(w.sample.empty for c in cuts for w in (c.window, c.restore))
    metrics: dict[str, float | int | str] = {
        "repetitions": budget.failover_reps,
        "cuts": len(cuts),
        "cuts_converged": len(conv),
        "probe_pps": budget.probe_pps,
        "probe_sent": probe.total.sent,
        "probe_received": probe.total.received,
        "probe_duplicates": probe.duplicates,
        "outside_cuts_sent": outside.sent,
        "outside_cuts_received": outside.received,
        "outside_cuts_delivered_pct": 100 * outside.delivered,
        "windows_with_empty_sample": empty,
        "local_loss_ms_p50": percentile(local_loss, 50),
        "local_loss_ms_p99": percentile(local_loss, 99),
        "local_loss_sent": local_sample.sent,
        "local_loss_received": local_sample.received,
        "remote_loss_ms_p50": percentile(remote_loss, 50),
        "remote_loss_ms_p99": percentile(remote_loss, 99),
        "remote_loss_sent": remote_sample.sent,
        "remote_loss_received": remote_sample.received,
        "restore_loss_ms_p99": percentile(restore_loss, 99),
        "restore_loss_sent": restore_sample.sent,
        "restore_loss_received": restore_sample.received,
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
    problems: list[str] = []
    if probe.broken is not None:
        problems.append(f"the probe's records are broken: {probe.broken}")
    else:
        if not cuts:
            problems.append("no cut was made")
        for where, unmeasured in (
            ("window", [i for i, c in enumerate(cuts, 1) if c.window.sample.empty]),
            ("restore window", [i for i, c in enumerate(cuts, 1) if c.restore.sample.empty]),
        ):
            if unmeasured:
                which = ", ".join(map(str, unmeasured))
                cut = "cuts" if len(unmeasured) > 1 else "cut"
                problems.append(f"empty sample (no probe datagram) in the {where} of {cut} {which}")
        delivery = sample_problem("probe", outside, MIN_DELIVERY, where="outside the cut windows")
        if delivery:
            problems.append(delivery)
    if local_loss and not lp99 <= LOCAL_TARGET_MS:
        problems.append(f"local loss p99 {fmt(lp99)} ms > {LOCAL_TARGET_MS:g} ms")
    if remote_loss and not rp99 <= REMOTE_TARGET_MS:
        problems.append(f"remote loss p99 {fmt(rp99)} ms > {REMOTE_TARGET_MS:g} ms")
    if len(conv) != len(cuts):
        problems.append(f"{len(cuts) - len(conv)} cuts without a convergence event")
    reason = (
        f"{len(cuts)} cuts at {budget.probe_pps} pps: loss p99 local {fmt(lp99)} ms "
        f"(<= {LOCAL_TARGET_MS:g}; {local_sample} datagrams received/sent), remote "
        f"{fmt(rp99)} ms (<= {REMOTE_TARGET_MS:g}; {remote_sample}); convergence p99 "
        f"{fmt(percentile(conv, 99))} ms; loss when links return p99 "
        f"{fmt(percentile(restore_loss, 99))} ms ({restore_sample}); outside the cut "
        f"windows {outside} delivered ({fmt(100 * outside.delivered)}%)"
    )
    if problems:
        reason += "; " + "; ".join(problems)
    return Result("failover", not problems, reason, metrics, (table,))
