"""RoCEv2 retransmission alarms, checked with crafted frames (issue 14, part 2).

Clean phase: RoCEv2 SENDs one way and ACKs back between NIC pairs of different ToRs, for
CLEAN_S: no `roce_retransmission` alarm may appear. NAK phase: a target link, spine -> ToR T,
is picked; requesters on two other ToRs, each paired with its own responder NIC under T, with
UDP source ports chosen by PredictPath so that each data flow crosses the target link and the
flows share no other link. The responders then send NAKs (PSN sequence error) back to their
requesters on those 5-tuples at NAK_PPS each, as a NIC does after a loss. The controller must
raise `roce_retransmission` naming the spine's port toward T (the end that transmitted the
lost packets), and, once both flows are sampled, no other link (with one flow sampled every
link of its path is a suspect). GetRoce must name that link crossed by every flow and count
the NAKs at the responders' ports; while the clean traffic flows it must count SENDs and ACKs
where they enter and no NAK. When the NAKs stop, the alarm must clear (a window later).
The sample: NAKs sent, flows, the NAK-ing ports' rates.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import grpc

from controller.fabric import Nic, ipv4_str
from mininet_labs.lab import LAB_PORT, Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget, nics_on
from mininet_labs.traffic import FlowSpec
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

NAME = "retransmit"
KIND = "roce_retransmission"
DSCP_ROCE = 26
TC_ROCE = 3  # the class the fabric's QoS map gives DSCP 26
CLEAN_S = 6.0  # several counter reports of clean RoCE traffic
NAK_PPS = 50  # per flow: above any sane alarm threshold, far below the sampler's bound
ALARM_TIMEOUT_S = 30.0
CLEAR_TIMEOUT_S = 40.0  # the 10 s window, then the assessment, on a busy machine
SYNDROME_ACK = 0x00
SYNDROME_NAK_PSN = 0x60
SPORTS = range(49152, 49152 + 512)  # where to look for a source port that crosses the link


def _links(path: admin_pb2.PredictPathResponse) -> list[tuple[str, int]]:
    """The switch ports a path leaves by (its links, named by their transmitting end)."""
    return [(h.switch_name, h.egress_port) for h in path.hops if h.egress_port]


def _roce(fid: int, src: Nic, dst: Nic, sport: int, syndrome: int | None) -> FlowSpec:
    return FlowSpec(
        fid, ipv4_str(src.ipv4), ipv4_str(dst.ipv4), sport, LAB_PORT, DSCP_ROCE << 2, 0, syndrome
    )


def _plan(lab: Lab) -> tuple[tuple[str, int], list[tuple[Nic, Nic, int]]]:
    """The target link (spine, port toward T) and the (requester, responder, sport) flows whose
    predicted paths all cross it and share nothing else, each between two servers."""
    tors = [s.name for s in lab.fabric.switches if s.prefix is not None]
    for target_tor in tors:
        responders = nics_on(lab, target_tor)
        others = [t for t in tors if t != target_tor]
        if len(responders) < 2 or len(others) < 2:
            continue
        for spine_hop in _spine_ports(lab, target_tor):
            flows: list[tuple[Nic, Nic, int]] = []
            paths: list[set[tuple[str, int]]] = []
            for src_tor, responder in zip(others, responders, strict=False):
                # Another server's NIC: between two NICs of one server the kernel delivers
                # locally, and nothing would cross the fabric.
                remote = [n for n in nics_on(lab, src_tor) if n.host != responder.host]
                if not remote:
                    continue
                requester = remote[0]
                for sport in SPORTS:
                    links = _links(lab.predict(_roce(0, requester, responder, sport, None)))
                    if spine_hop in links:
                        flows.append((requester, responder, sport))
                        paths.append(set(links))
                        break
            if len(flows) >= 2 and set.intersection(*paths) == {spine_hop}:
                return spine_hop, flows
    raise LabError(f"fabric {lab.fabric.name}: no link two NAK-ing flows share alone")


def _spine_ports(lab: Lab, tor: str) -> list[tuple[str, int]]:
    """The spine ports cabled to `tor`, as (spine, port)."""
    # A link's `a` is its lower tier end: a ToR's uplink has the ToR at `a`, the spine at `b`.
    return sorted((link.b, link.b_port) for link in lab.fabric.links if link.a == tor)


def _alarms(lab: Lab) -> list[admin_pb2.Alarm]:
    try:
        alarms = lab.admin.ListAlarms(admin_pb2.ListAlarmsRequest(), timeout=10).alarms
    except grpc.RpcError:
        return []
    return [a for a in alarms if a.kind == KIND]


def _port_rates(
    lab: Lab, switches: Iterable[str]
) -> dict[tuple[str, int], admin_pb2.RocePortRates]:
    """The RoCE class's rates per port of `switches`, from the controller (GetRoce asked per
    switch lists every port with RoCE traffic, from its last two counter reports)."""
    out = {}
    for switch in sorted(set(switches)):
        request = admin_pb2.GetRoceRequest(switch_name=switch)
        for p in lab.admin.GetRoce(request, timeout=10).ports:
            if p.traffic_class == TC_ROCE:
                out[p.switch_name, p.port] = p
    return out


def run(lab: Lab, budget: Budget) -> Result:
    target, flows = _plan(lab)
    problems: list[str] = []
    # Clean: data one way, ACKs back, on the same 5-tuples.
    clean = [_roce(i, r, q, sport, None) for i, (r, q, sport) in enumerate(flows)]
    acks = [_roce(100 + i, q, r, sport, SYNDROME_ACK) for i, (r, q, sport) in enumerate(flows)]
    data_sent = ack_sent = 0
    by_host: dict[str, list[FlowSpec]] = {}
    for (r, q, _), data, ack in zip(flows, clean, acks, strict=True):
        by_host.setdefault(r.host, []).append(data)
        by_host.setdefault(q.host, []).append(ack)
    running = [
        lab.start_sender(host, f"roce-clean-{i}", fs, rate_pps=NAK_PPS * len(fs),
                         duration_s=CLEAN_S)
        for i, (host, fs) in enumerate(sorted(by_host.items()))
    ]  # fmt: skip
    # The data plane's own counts while the clean traffic flows: each ToR port the SENDs and
    # ACKs enter on counts them in the RoCE class, and no port counts a NAK.
    time.sleep(CLEAN_S - 2)
    counted = _port_rates(lab, [n.switch for r, q, _ in flows for n in (r, q)])
    for sender in running:
        summary = lab.finish_sender(sender, timeout_s=CLEAN_S + 30)
        for fid, n in summary.get("sent", {}).items():
            if int(fid) >= 100:
                ack_sent += int(n)
            else:
                data_sent += int(n)
    raised_clean = _alarms(lab)
    for r, q, _ in flows:
        sends, acked = counted.get((r.switch, r.port)), counted.get((q.switch, q.port))
        if sends is None or sends.data_per_s <= 0 or acked is None or acked.ack_per_s <= 0:
            problems.append(
                f"RoCE counts: no SENDs/s at {r.switch}:{r.port} or no ACKs/s at "
                f"{q.switch}:{q.port} in class {TC_ROCE} while they flowed"
            )
    nak_ports = [k for k, v in counted.items() if v.nak_psn_sequence_per_s or v.nak_other_per_s]
    if nak_ports:
        problems.append(f"RoCE counts: NAKs counted on clean traffic at {sorted(nak_ports)}")
    if data_sent <= 0 or ack_sent <= 0:
        problems.append(f"clean phase sent {data_sent} SENDs and {ack_sent} ACKs: no sample")
    if raised_clean:
        problems.append("clean traffic raised " + ", ".join(a.id for a in raised_clean))

    # NAKs back from each responder on its data flow's 5-tuple.
    naks = [_roce(200 + i, q, r, sport, SYNDROME_NAK_PSN) for i, (r, q, sport) in enumerate(flows)]
    nak_hosts: dict[str, list[FlowSpec]] = {}
    for f, (_, q, _) in zip(naks, flows, strict=True):
        nak_hosts.setdefault(q.host, []).append(f)
    started = time.monotonic()
    running = [
        lab.start_sender(host, f"roce-nak-{i}", fs, rate_pps=NAK_PPS * len(fs), duration_s=3600)
        for i, (host, fs) in enumerate(sorted(nak_hosts.items()))
    ]
    nak_sent = 0

    def localised() -> admin_pb2.Alarm | None:
        """The target's alarm once it is the only link accused: with one flow sampled so far
        every link of its path is a suspect, and the others clear as the second flow's NAKs
        leave the shared link alone in common."""
        raised = _alarms(lab)
        mine = [a for a in raised if (a.switch_name, a.port) == target]
        return mine[0] if mine and len(raised) == 1 else None

    try:
        alarm = wait_for(
            f"{KIND} on {target[0]}:{target[1]} alone", localised, ALARM_TIMEOUT_S, every_s=0.5
        )
        took = time.monotonic() - started
        others: list[admin_pb2.Alarm] = []
        roce = lab.admin.GetRoce(admin_pb2.GetRoceRequest(), timeout=10)
        suspects = [(x.end.switch_name, x.end.port, x.flows, x.of_flows) for x in roce.suspects]
        if suspects != [(*target, len(flows), len(flows))]:
            problems.append(f"GetRoce's suspects {suspects}, not {target} crossed by every flow")
        responders = {(q.switch, q.port) for _, q, _ in flows}

        def counted_naks() -> dict[tuple[str, int], float] | None:
            """The responders' NAK rates once each switch's last two reports lie in the NAK
            phase (an alarm can come from the first report that saw them)."""
            got = {
                (p.switch_name, p.port): p.nak_psn_sequence_per_s
                for p in lab.admin.GetRoce(admin_pb2.GetRoceRequest(), timeout=10).ports
                if (p.switch_name, p.port) in responders
            }
            full = len(got) == len(responders) and min(got.values()) >= NAK_PPS / 2
            return got if full else None

        try:
            nak_rates = wait_for("the NAK rates counted", counted_naks, 10.0, every_s=0.5)
        except LabError:
            nak_rates = {}
        if not nak_rates:
            problems.append(f"NAKs/s counted at the responders' ports: {nak_rates}")
    except LabError as err:
        alarm, took, others = None, float("nan"), _alarms(lab)
        suspects, nak_rates = [], {}
        problems.append(str(err))
        others = [a for a in others if (a.switch_name, a.port) != target]
    finally:
        for sender in running:
            summary = lab.stop_sender(sender)
            nak_sent += sum(int(n) for n in summary.get("sent", {}).values())
    if nak_sent <= 0:
        problems.append("no NAK was sent: no sample")
    if others:
        problems.append("other links accused: " + ", ".join(a.id for a in others))
    # NAKs stopped: the alarm clears once no NAK-ing flow is left in the window (roce.window_s,
    # 10 s by default), and leaves nothing behind for the scenarios after this one.
    stopped = time.monotonic()
    try:
        wait_for(f"the {KIND} alarms to clear", lambda: not _alarms(lab) or None,
                 CLEAR_TIMEOUT_S, every_s=0.5)  # fmt: skip
        cleared_after = time.monotonic() - stopped
    except LabError as err:
        cleared_after = float("nan")
        problems.append(str(err))

    link = f"{target[0]}:{target[1]}"
    reason = (
        f"clean: {data_sent:,} SENDs and {ack_sent:,} ACKs over {len(flows)} flows for "
        f"{CLEAN_S:g} s, {len(raised_clean)} alarms; NAKs: {len(flows)} flows crossing only "
        f"{link} in common, {nak_sent:,} NAKs at {NAK_PPS} pps each"
    )
    if alarm is not None:
        reason += f"; alarm on {link} after {took:.1f} s, cleared {cleared_after:.1f} s after"
    if problems:
        reason += "; " + "; ".join(problems)
    table = Table(
        ("flow", "requester", "responder", "sport", "path"),
        tuple(
            (str(i), r.full_name, q.full_name, str(sport),
             " > ".join(f"{s}:{p}" for s, p in _links(lab.predict(_roce(0, r, q, sport, None)))))
            for i, (r, q, sport) in enumerate(flows)
        ),
    )  # fmt: skip
    metrics: dict[str, float | int | str] = {
        "target_link": link,
        "flows": len(flows),
        "clean_sends": data_sent,
        "clean_acks": ack_sent,
        "clean_alarms": len(raised_clean),
        "naks_sent": nak_sent,
        "nak_pps_per_flow": NAK_PPS,
        "alarm_after_s": round(took, 2),
        "alarm_cleared_after_s": round(cleared_after, 2),
        "other_links_accused": len(others),
        "suspects": " ".join(f"{sw}:{port}({n}/{of})" for sw, port, n, of in suspects),
        "naks_per_s_at_responders_min": round(min(nak_rates.values(), default=0.0), 1),
        "clean_roce_ports_counted": len(counted),
    }
    if alarm is not None:
        metrics["alarm_message"] = alarm.message
    return Result(NAME, not problems, reason, metrics, (table,))
