"""ECN and PFC under a 2->1 incast.

Two NICs on one ToR send to one NIC behind another ToR, each at 80 % of the port rate, with
UDP source ports chosen (by the controller's path prediction) so both flows leave their ToR
on the same uplink: that uplink is the congested port, 1.6x oversubscribed. The senders act
as RoCE NICs: DSCP 26 (lossless class, TC 3), ECT(0), and they honour PFC PAUSE frames for
priority 3 on their own link.

- ecn: CE-marked datagrams counted at the receiver; the switch's ECN mark counter on the
  congested port.
- pfc: with PFC (the lossless class, whose xoff/xon the controller configures on every port):
  no drop at the switch, no loss at the receiver, PAUSE frames sent by the ToR and honoured by
  the senders. Without PFC: the same incast in the best-effort class (TC 0, where no PFC is
  configured), which overflows the port's buffer and drops."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from controller.fabric import Nic
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import CE, DSCP_LOSSLESS, ECT0, Budget, flow, nics_on, tor_pair
from mininet_labs.traffic import FlowSpec

PAYLOAD = 1000
FRAME = PAYLOAD + 8 + 20 + 14
LOAD = 0.8  # of the port rate, per sender


@dataclass(frozen=True)
class Incast:
    tor: str
    uplink: int
    host_ports: tuple[int, ...]
    sent: int
    received: int
    ce_received: int
    pauses_honoured: int
    paused_ms: float
    delta: dict[int, dict[str, int]]  # ToR port -> counter growth
    path_marks: dict[str, int]  # "switch:port" -> ECN marks, every egress on the flows' path

    @property
    def lost(self) -> int:
        return self.sent - self.received

    @property
    def drops(self) -> int:
        return self.delta[self.uplink]["drops"]

    @property
    def pause_tx(self) -> int:
        return sum(self.delta[p]["pfc_pause_tx"] for p in self.host_ports)


def _flows(lab: Lab, senders: list[Nic], dst: Nic, tos: int) -> tuple[list[FlowSpec], int]:
    """One flow per sender, with source ports that put both on the same uplink."""
    first = flow(1, senders[0], dst, 50000, tos)
    uplink = lab.predict(first).hops[0].egress_port
    flows = [first]
    for k, nic in enumerate(senders[1:], start=2):
        for sport in range(50000, 50200):
            f = flow(k, nic, dst, sport, tos)
            if lab.predict(f).hops[0].egress_port == uplink:
                flows.append(f)
                break
        else:
            raise LabError(f"no source port puts {nic.full_name} on uplink {uplink}")
    return flows, uplink


def incast(lab: Lab, budget: Budget, tos: int) -> Incast:
    tor, dst_tor = tor_pair(lab)
    senders = nics_on(lab, tor)[:2]
    dst = nics_on(lab, dst_tor)[0]
    flows, uplink = _flows(lab, senders, dst, tos)
    ports = [uplink, *(n.port for n in senders)]
    rate_pps = LOAD * lab.options.port_rate_mbps * 1e6 / 8 / FRAME
    hops = sorted({(h.switch_name, h.egress_port) for f in flows for h in lab.predict(f).hops})
    marks_before = {hop: lab.counters(hop[0], [hop[1]])[hop[1]]["ecn_marks"] for hop in hops}
    before = lab.counters(tor, ports)
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
        # Let the congested queue drain before counting what arrived.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            size = out.stat().st_size if out.exists() else 0
            time.sleep(0.3)
            if (out.stat().st_size if out.exists() else 0) == size:
                break
    after = lab.counters(tor, ports)
    path_marks = {
        f"{sw}:{port}": lab.counters(sw, [port])[port]["ecn_marks"] - marks_before[(sw, port)]
        for sw, port in hops
    }
    packets = [p for p in lab.records(out) if p.flow in {f.flow for f in flows}]
    delta = {p: {k: after[p][k] - before[p][k] for k in after[p]} for p in ports}
    return Incast(
        tor,
        uplink,
        tuple(n.port for n in senders),
        sum(sum(s["sent"].values()) for s in summaries),
        len({(p.flow, p.seq) for p in packets}),
        sum(1 for p in packets if p.tos & 3 == CE),
        sum(int(s["pauses"]) for s in summaries),
        sum(float(s["paused_ms"]) for s in summaries),
        delta,
        path_marks,
    )


def _table(label: str, i: Incast) -> tuple[str, ...]:
    return (
        label,
        str(i.sent),
        str(i.received),
        str(i.lost),
        str(i.ce_received),
        str(i.delta[i.uplink]["ecn_marks"]),
        str(i.drops),
        str(i.pause_tx),
        str(i.pauses_honoured),
    )


HEADER = (
    "incast", "sent", "received", "lost", "CE at receiver", "ECN marks (port)",
    "drops (port)", "PAUSE sent by ToR", "PAUSE honoured",
)  # fmt: skip


def run_ecn(lab: Lab, budget: Budget) -> Result:
    i = incast(lab, budget, tos=DSCP_LOSSLESS << 2 | ECT0)
    marks = i.delta[i.uplink]["ecn_marks"]
    metrics: dict[str, float | int | str] = {
        "port_rate_mbps": lab.options.port_rate_mbps,
        "congested_port": f"{i.tor}:{i.uplink}",
        "sent": i.sent,
        "received": i.received,
        "ce_marked_received": i.ce_received,
        "ce_fraction": round(i.ce_received / max(1, i.received), 3),
        "ecn_marks_port": marks,
        "drops_port": i.drops,
    }
    on_path = sum(i.path_marks.values())
    for hop, n in i.path_marks.items():
        metrics[f"ecn_marks_{hop}"] = n
    # A CE packet is not ECT, so it is never marked twice: without loss, every mark on the
    # path arrives as exactly one CE datagram.
    consistent = i.ce_received == on_path if i.lost == 0 else i.ce_received <= on_path
    passed = i.ce_received > 0 and marks > 0 and consistent
    reason = (
        f"{i.ce_received}/{i.received} datagrams arrived CE-marked; {marks} marks counted on "
        f"the congested port {i.tor}:{i.uplink} ({lab.options.port_rate_mbps:g} Mb/s, 1.6x "
        f"oversubscribed), {on_path} on the whole path"
    )
    if not passed:
        reason += " — expected marks at the receiver and on the port, as many as on the path"
    return Result("ecn", passed, reason, metrics, (Table(HEADER, (_table("lossless", i),)),))


def run_pfc(lab: Lab, budget: Budget) -> Result:
    on = incast(lab, budget, tos=DSCP_LOSSLESS << 2 | ECT0)
    with contextlib.suppress(LabError):
        lab.wait_converged(timeout_s=5)
    off = incast(lab, budget, tos=0)
    metrics: dict[str, float | int | str] = {
        "port_rate_mbps": lab.options.port_rate_mbps,
        "congested_port": f"{on.tor}:{on.uplink}",
        "pfc_on_sent": on.sent,
        "pfc_on_lost": on.lost,
        "pfc_on_drops_port": on.drops,
        "pfc_on_pause_tx": on.pause_tx,
        "pfc_on_pauses_honoured": on.pauses_honoured,
        "pfc_on_paused_ms": round(on.paused_ms, 1),
        "pfc_off_sent": off.sent,
        "pfc_off_lost": off.lost,
        "pfc_off_drops_port": off.drops,
        "pfc_off_pause_tx": off.pause_tx,
    }
    problems = []
    if on.lost or on.drops:
        problems.append(f"with PFC: {on.drops} drops at the port, {on.lost} lost")
    if not on.pause_tx:
        problems.append("with PFC: the ToR sent no PAUSE")
    if not off.drops:
        problems.append("without PFC: no drops (the port was not congested?)")
    reason = (
        f"with PFC: {on.drops} drops, {on.lost} lost of {on.sent}, {on.pause_tx} PAUSE frames "
        f"sent; without PFC: {off.drops} drops, {off.lost} lost of {off.sent}"
    )
    if problems:
        reason += " — " + "; ".join(problems)
    table = Table(HEADER, (_table("PFC on (TC 3)", on), _table("PFC off (TC 0)", off)))
    return Result("pfc", not problems, reason, metrics, (table,))
