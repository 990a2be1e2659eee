"""Every NIC sends to every NIC of every other server (same rail and across rails); the
receivers count what arrives. A NIC's own server is left out: the kernel delivers that
locally, no fabric involved."""

from __future__ import annotations

import contextlib
import time

from mininet_labs.lab import Lab
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget, flow
from mininet_labs.traffic import FlowSpec

RATE_PPS_PER_HOST = 500


def run(lab: Lab, budget: Budget) -> Result:
    nics = list(lab.fabric.nics)
    pairs: dict[int, tuple[int, int]] = {}
    flows_by_host: dict[str, list[FlowSpec]] = {}
    for i, src in enumerate(nics):
        for j, dst in enumerate(nics):
            if src.host == dst.host:
                continue
            fid = len(pairs)
            pairs[fid] = (i, j)
            flows_by_host.setdefault(src.host, []).append(flow(fid, src, dst, 20000 + fid))
    received: dict[int, set[int]] = {fid: set() for fid in pairs}
    sent: dict[int, int] = {}
    host_ports = [(n.switch, n.port) for n in nics]
    # The servers' lldpd counts what it sends; read before and after the switch's counters,
    # it brackets the LLDPDUs among the frames the ToR port received.
    lldp_before = (lab.lldpdus_sent(), lab.counters_at(host_ports), lab.lldpdus_sent())
    before = lldp_before[1]
    with contextlib.ExitStack() as stack:
        files = [
            stack.enter_context(lab.receiver(host, f"reach-recv-{host}"))
            for host in lab.topology.hosts
        ]
        senders = [
            lab.start_sender(
                host,
                f"reach-send-{host}",
                flows,
                rate_pps=RATE_PPS_PER_HOST,
                count=budget.reach_packets,
            )
            for host, flows in flows_by_host.items()
        ]
        for s in senders:
            for fid, n in lab.finish_sender(s)["sent"].items():
                sent[int(fid)] = n
        time.sleep(0.3)  # the last datagrams in flight
    lldp_after = (lab.lldpdus_sent(), lab.counters_at(host_ports), lab.lldpdus_sent())
    after = lldp_after[1]
    # Each NIC's datagrams must enter the fabric on its own ToR port (policy routing by
    # source address): the ToR port's receive counter grew by exactly what the NIC sent, and
    # the LLDPDUs of the NIC's lldpd (as many as it sent between the two brackets' inner
    # reads, at most as many as between their outer ones; one either way may be in flight).
    from_nic = [
        sum(sent.get(f, 0) for f, (i, _) in pairs.items() if i == k) for k in range(len(nics))
    ]
    entered = [after[hp]["rx_packets"] - before[hp]["rx_packets"] for hp in host_ports]

    def own(k: int) -> bool:
        nic = nics[k].full_name
        least = lldp_after[0].get(nic, 0) - lldp_before[2].get(nic, 0) - 1
        most = lldp_after[2].get(nic, 0) - lldp_before[0].get(nic, 0) + 1
        return least <= entered[k] - from_nic[k] <= most

    own_port = sum(1 for k in range(len(nics)) if own(k))
    for path in files:
        for p in lab.records(path):
            if p.flow in received:
                received[p.flow].add(p.seq)

    def loss(fids: list[int]) -> float:
        total = sum(sent.get(f, 0) for f in fids)
        got = sum(len(received[f]) for f in fids)
        return 100.0 * (total - got) / total if total else 100.0

    same = [f for f, (i, j) in pairs.items() if nics[i].rail == nics[j].rail]
    cross = [f for f in pairs if f not in same]
    unreachable = [f for f in pairs if not received[f]]
    names = [n.full_name for n in nics]
    cells = {(i, j): f"{100.0 * (1 - len(received[f]) / max(1, sent.get(f, 0))):.0f}%"
             for f, (i, j) in pairs.items()}  # fmt: skip
    matrix = Table(
        ("loss: src \\ dst", *names),
        tuple(
            (names[i], *(cells.get((i, j), "·") for j in range(len(nics))))
            for i in range(len(nics))
        ),
    )
    metrics: dict[str, float | int | str] = {
        "pairs": len(pairs),
        "pairs_reachable": len(pairs) - len(unreachable),
        "packets_per_pair": budget.reach_packets,
        "same_rail_pairs": len(same),
        "cross_rail_pairs": len(cross),
        "same_rail_loss_pct": round(loss(same), 3),
        "cross_rail_loss_pct": round(loss(cross), 3),
        "loss_pct": round(loss(list(pairs)), 3),
        "nics_entering_on_own_tor_port": own_port,
    }
    total_loss = loss(list(pairs))
    if unreachable:
        bad = ", ".join(f"{names[pairs[f][0]]}->{names[pairs[f][1]]}" for f in unreachable[:5])
        reason = f"{len(unreachable)}/{len(pairs)} pairs unreachable: {bad}"
        passed = False
    else:
        passed = total_loss <= 1.0 and own_port == len(nics)
        reason = (
            f"all {len(pairs)} NIC pairs reachable ({len(same)} same rail, {len(cross)} across "
            f"rails), loss {total_loss:.2f}%"
            + ("" if total_loss <= 1.0 else " (> 1%)")
            + f"; {own_port}/{len(nics)} NICs sent everything through their own ToR port"
        )
    ports = Table(
        ("NIC", "ToR port", "datagrams sent", "LLDPDUs sent", "frames received by that port"),
        tuple(
            (
                n.full_name,
                f"{n.switch}:{n.port}",
                str(from_nic[k]),
                str(lldp_after[0].get(n.full_name, 0) - lldp_before[2].get(n.full_name, 0)),
                str(entered[k]),
            )
            for k, n in enumerate(nics)
        ),
    )
    return Result("reachability", passed, reason, metrics, (matrix, ports))
