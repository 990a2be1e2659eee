"""ECMP spread, flow by flow, in two phases: RoCEv2 flows between two blocks that differ only
in their UDP source port (the 5-tuple hash), then — after reloading the controller with
`ecmp.hash: five_tuple_qp` — flows that share one source port and differ only in their
destination QP (collective-aware hashing). For each flow the controller predicts the source
ToR's uplink (PredictPath, the data plane's own hash and member order); the lab sends a burst
of that flow alone and reads which uplink's transmit counter moved. The aggregate per-uplink
load is reported too. The controller is reloaded back to the fabric's own hash afterwards."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter

from controller.fabric import ipv4_str
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget, flow, nics_on, tor_pair
from mininet_labs.traffic import FlowSpec
from railfabric.ecmp import HashFields

SPORT_BASE = 49152


def _uplinks(lab: Lab, tor: str) -> list[int]:
    return sorted(
        port
        for c in lab.topology.cables.values()
        for sw, port in ((c.link.a, c.link.a_port), (c.link.b, c.link.b_port))
        if sw == tor
    )


def run(lab: Lab, budget: Budget) -> Result:
    src_tor, dst_tor = tor_pair(lab)
    srcs, dsts = nics_on(lab, src_tor), nics_on(lab, dst_tor)
    five_tuple: list[FlowSpec] = []
    by_qp: list[FlowSpec] = []
    for k in range(budget.ecmp_flows):
        src, dst = srcs[k % len(srcs)], dsts[(k // len(srcs)) % len(dsts)]
        five_tuple.append(flow(k, src, dst, SPORT_BASE + k))
        by_qp.append(dataclasses.replace(flow(k, srcs[0], dsts[0], SPORT_BASE), dst_qp=k + 1))
    own = lab.fabric.ecmp_hash
    lab.set_ecmp_hash(HashFields.FIVE_TUPLE)
    first = _phase(lab, budget, "five_tuple", src_tor, five_tuple)
    lab.set_ecmp_hash(HashFields.FIVE_TUPLE_QP)
    second = _phase(lab, budget, "five_tuple_qp", src_tor, by_qp)
    lab.set_ecmp_hash(own)
    metrics: dict[str, float | int | str] = {}
    for phase in (first, second):
        metrics.update({f"{phase.name}_{k}": v for k, v in phase.metrics.items()})
    return Result(
        "ecmp",
        first.passed and second.passed,
        f"5-tuple: {first.reason}; QP hashing (one source port, {len(by_qp)} QPs): {second.reason}",
        metrics,
        (*first.tables, *second.tables),
    )


def _phase(lab: Lab, budget: Budget, name: str, src_tor: str, flows: list[FlowSpec]) -> Result:
    uplinks = _uplinks(lab, src_tor)
    predicted: dict[int, int] = {}
    for f in flows:
        path = lab.predict(f)
        if not path.hops or not path.delivered_to:
            raise LabError(f"the controller predicts no delivery for {f}: {path.error}")
        predicted[f.flow] = path.hops[0].egress_port
    measured: dict[int, int | None] = {}
    n = budget.ecmp_packets
    start = time.monotonic()
    host_of = {ipv4_str(s.ipv4): s.host for s in lab.fabric.nics}
    wanted = {f.dst for f in flows}
    by_host: dict[str, list[FlowSpec]] = {}
    for f in flows:
        by_host.setdefault(host_of[f.src], []).append(f)
    with contextlib.ExitStack() as stack:
        outs = [
            stack.enter_context(lab.receiver(host, f"ecmp-recv-{host}"))
            for host in sorted({d.host for d in lab.fabric.nics if ipv4_str(d.ipv4) in wanted})
        ]
        for host, host_flows in by_host.items():
            with lab.burster(host, f"ecmp-burst-{host}") as burster:
                for f in host_flows:
                    before = lab.counters(src_tor, uplinks)
                    burster.send(f, n)
                    measured[f.flow] = _moved(lab, src_tor, uplinks, before, n)
        time.sleep(0.2)
    elapsed = time.monotonic() - start
    got = Counter(p.flow for path in outs for p in lab.records(path) if p.seq < n)
    delivered = sum(1 for f in flows if got[f.flow] >= n)
    matches = sum(1 for f in flows if measured[f.flow] == predicted[f.flow])
    per_uplink_pred = Counter(predicted.values())
    per_uplink_meas = Counter(p for p in measured.values() if p is not None)
    mean = len(flows) / len(uplinks)
    imbalance = max(per_uplink_meas.values(), default=0) / mean
    table = Table(
        (f"uplink ({name})", "flows predicted", "flows measured", "packets (counter)"),
        tuple(
            (
                f"{src_tor}:{port}",
                str(per_uplink_pred[port]),
                str(per_uplink_meas[port]),
                str(per_uplink_meas[port] * n),
            )
            for port in uplinks
        ),
    )
    wrong = [
        (f, predicted[f.flow], measured[f.flow])
        for f in flows
        if measured[f.flow] != predicted[f.flow]
    ]
    mismatch = Table(
        ("flow", "sport", "qp", "predicted uplink", "measured uplink"),
        tuple(
            (f"{f.src}->{f.dst}", str(f.sport), str(f.dst_qp), str(p), str(m))
            for f, p, m in wrong[:10]
        ),
    )
    metrics: dict[str, float | int | str] = {
        "flows": len(flows),
        "packets_per_flow": n,
        "flows_matching_prediction": matches,
        "flows_delivered": delivered,
        "uplinks": len(uplinks),
        "uplinks_used": len(per_uplink_meas),
        "max_over_mean_flows": round(imbalance, 3),
        "seconds": round(elapsed, 2),
    }
    for port in uplinks:
        metrics[f"flows_on_port_{port}"] = per_uplink_meas[port]
    passed = (
        matches == len(flows) and delivered == len(flows) and len(per_uplink_meas) == len(uplinks)
    )
    reason = (
        f"{matches}/{len(flows)} flows took the uplink the controller predicted, "
        f"{delivered}/{len(flows)} delivered, {len(per_uplink_meas)}/{len(uplinks)} uplinks "
        f"used (max/mean {imbalance:.2f})"
    )
    return Result(name, passed, reason, metrics, (table, mismatch) if wrong else (table,))


def _moved(
    lab: Lab, switch: str, ports: list[int], before: dict[int, dict[str, int]], n: int
) -> int | None:
    """The uplink whose transmit counter grew by the burst (LLDP adds at most a frame or two
    to either port meanwhile); None when no single port carried it."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        after = lab.counters(switch, ports)
        grew = {p: after[p]["tx_packets"] - before[p]["tx_packets"] for p in ports}
        if sum(grew.values()) >= n:
            carriers = [p for p, g in grew.items() if g >= n]
            return carriers[0] if len(carriers) == 1 else None
        time.sleep(0.01)
    return None
