"""ECN and PFC under a 2->1 incast.

Two NICs on one ToR send to one NIC behind another ToR of the same rail, each at 80 % of the
port rate, with UDP source ports chosen (by the controller's path prediction) so the two flows
take different uplinks and spines and meet only at the receiver's ToR: its port to the
receiver is the congested one, 1.6x oversubscribed. The senders act as RoCE NICs: DSCP 26
(lossless class, TC 3), ECT(0), and they honour PFC PAUSE frames for priority 3 on their link.
Counters are read on every port of both paths.

- ecn: CE-marked datagrams counted at the receiver; the switch's ECN mark counter on the
  congested port; every mark on the paths arrives as exactly one CE datagram.
- pfc: with PFC (the lossless class, whose xoff/xon the controller configures on every port):
  no drop anywhere, no loss, PAUSE frames sent hop by hop back to the senders (receiver's ToR
  -> spines -> senders' ToR -> NICs; the wire namespace passes 802.1Qbb frames). Without PFC:
  the same incast in the best-effort class (TC 0, where no PFC is configured), which
  overflows the congested port's buffer and drops.

What the target models decides what runs: `ecn` needs queues the lab can congest at the
target's rate (bmv2: only through Thrift), `pfc` needs PFC (bmv2 has none); otherwise the
scenario is a SKIP with the reason, neither a pass nor a failure. Loss is sent - received of
the scenario's own datagrams, whatever dropped them: bmv2's tail drops at a full queue never
reach the program's drop counter (it counts `mark_to_drop` only), so `lost` reports them."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from controller.fabric import Nic
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.processes import PACED_FRAME_BYTES
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import CE, DSCP_LOSSLESS, ECT0, Budget, flow, nics_on, tor_pair
from mininet_labs.traffic import FlowSpec

FRAME = PACED_FRAME_BYTES  # the frame size bmv2's queue rate (frames/s) is computed for
PAYLOAD = FRAME - 14 - 20 - 8  # Ethernet, IPv4, UDP
LOAD = 0.8  # of the port rate, per sender
DRAIN_S = 0.5  # after the path has accounted for every datagram: for the receiver to read
DRAIN_TIMEOUT_S = 60.0  # an outcome bound: a loaded machine drains slowly
DRAIN_QUIET_S = 3.0  # counters that long unchanged: what is missing will not come


Port = tuple[str, int]


@dataclass(frozen=True)
class Incast:
    congested: Port
    sent: int
    received: int
    ce_received: int
    pauses_honoured: int
    paused_ms: float
    delta: dict[Port, dict[str, int]]  # counter growth on every port of the flows' paths
    # Where the controller's copy of the counters (from its agents' reports, what railctl
    # interfaces and diagnose show) or the agents' /metrics differ from the scenario's own
    # read of the switches; empty when all agree.
    observed_differs: tuple[str, ...] = ()

    @property
    def lost(self) -> int:
        return self.sent - self.received

    def total(self, counter: str) -> int:
        return sum(d[counter] for d in self.delta.values())

    @property
    def drops(self) -> int:
        return self.total("drops")

    @property
    def pause_tx(self) -> int:
        return self.total("pfc_pause_tx")

    @property
    def congested_marks(self) -> int:
        return self.delta[self.congested]["ecn_marks"]

    @property
    def congested_name(self) -> str:
        return f"{self.congested[0]}:{self.congested[1]}"


def _flows(lab: Lab, senders: list[Nic], dst: Nic, tos: int) -> list[FlowSpec]:
    """One flow per sender, with source ports that spread them over different uplinks, so
    the two meet only at the receiver's ToR (the classic incast)."""
    flows: list[FlowSpec] = []
    used: set[int] = set()
    for k, nic in enumerate(senders, start=1):
        for sport in range(50000, 50200):
            f = flow(k, nic, dst, sport, tos)
            uplink = lab.predict(f).hops[0].egress_port
            if uplink not in used:
                used.add(uplink)
                flows.append(f)
                break
        else:
            raise LabError(f"no source port gives {nic.full_name} an uplink of its own")
    return flows


def incast(lab: Lab, budget: Budget, tos: int) -> Incast:
    tor, dst_tor = tor_pair(lab)
    senders = nics_on(lab, tor)[:2]
    dst = nics_on(lab, dst_tor)[0]
    flows = _flows(lab, senders, dst, tos)
    paths = [lab.predict(f).hops for f in flows]
    ports = sorted(
        {
            (h.switch_name, p)
            for hops in paths
            for h in hops
            for p in (h.ingress_port, h.egress_port)
        }
    )
    congested = (paths[0][-1].switch_name, paths[0][-1].egress_port)
    rate_pps = LOAD * lab.target.port_rate_mbps * 1e6 / 8 / FRAME
    before = lab.counters_at(ports)
    with lab.receiver(dst.host, f"incast-recv-{tos}") as out:
        running = [
            lab.start_sender(
                nic.host,
                f"incast-send-{nic.host}-{tos}",
                [f],
                rate_pps=rate_pps,
                duration_s=budget.incast_s,
                size=PAYLOAD,
                pfc_iface=nic.name,
            )
            for nic, f in zip(senders, flows, strict=True)
        ]
        summaries = [lab.finish_sender(s, timeout_s=budget.incast_s + 60) for s in running]
        sent = sum(sum(s["sent"].values()) for s in summaries)
        _drain(lab, ports, congested, before, sent)
    read_wall_ns = time.time_ns()
    after = lab.counters_at(ports)
    views = {
        "controller": lab.observed_counters(ports, read_wall_ns),
        "agent /metrics": lab.scraped_counters(ports, read_wall_ns),
    }
    differs = tuple(
        f"{sw}:{port} {key}: switch {after[(sw, port)][key]}, {where} {value}"
        for where, view in views.items()
        for (sw, port), values in view.items()
        for key, value in values.items()
        if after[(sw, port)][key] != value
    )
    packets = [p for p in lab.records(out) if p.flow in {f.flow for f in flows}]
    return Incast(
        congested,
        sent,
        len({(p.flow, p.seq) for p in packets}),
        sum(1 for p in packets if p.tos & 3 == CE),
        sum(int(s["pauses"]) for s in summaries),
        sum(float(s["paused_ms"]) for s in summaries),
        {port: {k: after[port][k] - before[port][k] for k in after[port]} for port in ports},
        differs,
    )


def _observed(*runs: Incast) -> str:
    """'' when the controller's counters equal the scenario's, else what differs."""
    differs = [d for i in runs for d in i.observed_differs]
    if not differs:
        return ""
    return (
        f" — the counters operators see (railctl interfaces, agents' /metrics) differ from "
        f"the switches' in {len(differs)} places, first: {differs[0]}"
    )


def _drain(
    lab: Lab,
    ports: list[Port],
    congested: Port,
    before: dict[Port, dict[str, int]],
    sent: int,
) -> None:
    """Wait until the path has accounted for every datagram sent (out of the congested port
    to the receiver, or dropped), not a fixed time: queues and the switches' receive sockets
    drain at the speed the machine allows. Stops early when the counters stand still."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    last: tuple[int, int] | None = None
    changed = time.monotonic()
    while time.monotonic() < deadline:
        now = lab.counters_at(ports)
        out = now[congested]["tx_packets"] - before[congested]["tx_packets"]
        drops = sum(now[p]["drops"] - before[p]["drops"] for p in ports)
        if out + drops >= sent:
            break
        if (out, drops) != last:
            last, changed = (out, drops), time.monotonic()
        elif time.monotonic() - changed > DRAIN_QUIET_S:
            break
        time.sleep(0.1)
    time.sleep(DRAIN_S)


def _row(label: str, i: Incast) -> tuple[str, ...]:
    return (
        label,
        str(i.sent),
        str(i.received),
        str(i.lost),
        str(i.ce_received),
        str(i.congested_marks),
        str(i.total("ecn_marks")),
        str(i.drops),
        str(i.pause_tx),
        str(i.pauses_honoured),
    )


HEADER = (
    "incast", "sent", "received", "lost", "CE at receiver", "ECN marks (congested port)",
    "ECN marks (path)", "drops (path)", "PAUSE sent (path)", "PAUSE honoured by senders",
)  # fmt: skip


def _per_port(i: Incast, label: str) -> Table:
    """Where the marks, drops and PAUSE frames happened, port by port."""
    keys = ("ecn_marks", "drops", "pfc_pause_tx", "pfc_pause_rx", "pfc_storms")
    rows = tuple(
        (f"{sw}:{port}", *(str(d[k]) for k in keys))
        for (sw, port), d in sorted(i.delta.items())
        if any(d[k] for k in keys)
    )
    header = (label, "ECN marks", "drops", "PAUSE sent", "PAUSE received", "PFC storms")
    return Table(header, rows)


def _load(lab: Lab, i: Incast) -> str:
    return (
        f"2 senders at {LOAD:.0%} of {lab.target.port_rate_mbps:g} Mb/s into "
        f"{i.congested_name} ({2 * LOAD:.1f}x)"
    )


def _loss(i: Incast) -> str:
    """'' without loss, else what was lost and how much of it no drop counter saw."""
    if i.lost <= 0:
        return ""
    uncounted = max(0, i.lost - i.drops)
    text = f"; {i.lost:,} of {i.sent:,} datagrams lost"
    if uncounted:
        text += (
            f", {uncounted:,} of them in no drop counter (tail drops at a full queue, which "
            "the program's drop counter does not see)"
        )
    return text


NO_PFC = "not supported by this target ({kind}: no PFC, FabricEgress.pfc_config is ignored)"


def run_ecn(lab: Lab, budget: Budget) -> Result:
    if (why := lab.target.unpaced()) is not None:
        return Result.skip("ecn", why)
    i = incast(lab, budget, tos=DSCP_LOSSLESS << 2 | ECT0)
    marks, on_path = i.congested_marks, i.total("ecn_marks")
    metrics: dict[str, float | int | str] = {
        "port_rate_mbps": lab.target.port_rate_mbps,
        "congested_port": i.congested_name,
        "sent": i.sent,
        "received": i.received,
        "lost": i.lost,
        "lost_not_in_drop_counter": max(0, i.lost - i.drops),
        "ce_marked_received": i.ce_received,
        "ce_fraction": round(i.ce_received / max(1, i.received), 3),
        "ecn_marks_port": marks,
        "ecn_marks_path": on_path,
        "drops_path": i.drops,
        "pfc_storms_path": i.total("pfc_storms"),
        "observed_counters_differ": len(i.observed_differs),
    }
    # A CE packet is not ECT, so it is never marked twice: without loss, every mark on the
    # path arrives as exactly one CE datagram.
    consistent = i.ce_received == on_path if i.lost == 0 else i.ce_received <= on_path
    passed = i.ce_received > 0 and marks > 0 and consistent and not i.observed_differs
    reason = (
        f"{i.ce_received}/{i.received} datagrams arrived CE-marked; {marks} marks counted on the "
        f"congested port {i.congested_name}, {on_path} on the whole path ({_load(lab, i)})"
        + _loss(i)
    )
    if not (i.ce_received > 0 and marks > 0 and consistent):
        reason += " — expected marks at the receiver and on the port, as many as on the path"
    reason += _observed(i)
    tables = (Table(HEADER, (_row("lossless", i),)), _per_port(i, "port"))
    return Result("ecn", passed, reason, metrics, tables)


def run_pfc(lab: Lab, budget: Budget) -> Result:
    if not lab.target.supports_pfc:
        return Result.skip("pfc", NO_PFC.format(kind=lab.target.kind))
    if (why := lab.target.unpaced()) is not None:
        return Result.skip("pfc", why)
    on = incast(lab, budget, tos=DSCP_LOSSLESS << 2 | ECT0)
    with contextlib.suppress(LabError):
        lab.wait_converged(timeout_s=5)
    off = incast(lab, budget, tos=0)
    metrics: dict[str, float | int | str] = {
        "port_rate_mbps": lab.target.port_rate_mbps,
        "congested_port": on.congested_name,
        "pfc_on_sent": on.sent,
        "pfc_on_lost": on.lost,
        "pfc_on_drops": on.drops,
        "pfc_on_pause_tx": on.pause_tx,
        "pfc_on_pause_tx_congested_switch": sum(
            d["pfc_pause_tx"] for (sw, _), d in on.delta.items() if sw == on.congested[0]
        ),
        "pfc_on_pauses_honoured": on.pauses_honoured,
        "pfc_on_paused_ms": round(on.paused_ms, 1),
        "pfc_off_sent": off.sent,
        "pfc_off_lost": off.lost,
        "pfc_off_drops": off.drops,
        "pfc_off_drops_congested_port": off.delta[off.congested]["drops"],
        "pfc_off_pause_tx": off.pause_tx,
        "observed_counters_differ": len(on.observed_differs) + len(off.observed_differs),
    }
    problems = []
    if on.lost or on.drops:
        problems.append(f"with PFC: {on.drops} drops on the path, {on.lost} lost")
    if not on.pause_tx:
        problems.append("with PFC: no switch sent a PAUSE")
    if not off.drops:
        problems.append("without PFC: no drops (the port was not congested?)")
    if observed := _observed(on, off):
        problems.append(observed.removeprefix(" — "))
    reason = (
        f"with PFC: {on.drops} drops, {on.lost} lost of {on.sent}, {on.pause_tx} PAUSE frames "
        f"sent along the path; without PFC: {off.drops} drops, {off.lost} lost of {off.sent} "
        f"({_load(lab, on)})"
    )
    if problems:
        reason += " — " + "; ".join(problems)
    tables = (
        Table(HEADER, (_row("PFC on (TC 3)", on), _row("PFC off (TC 0)", off))),
        _per_port(on, "PFC on: port"),
        _per_port(off, "PFC off: port"),
    )
    return Result("pfc", not problems, reason, metrics, tables)
