"""Benchmark of the controller's RoCE monitor at a fabric's size, in process:

    python -m bench.roce examples/ref-100k.yaml [--storm-tors 100] [--samples 256]
                         [--periods 2] [--json]

Every switch of the fabric reports a Counters message every period with RoCE counts on every
port (data and ACKs in the lossless class, CNPs in the CNP class: every port busy, the worst
case for ingest); with `--storm-tors N`, N ToRs also report NAKs on their host ports and
`--samples` sampled NAKs each per report, of random flows (nothing shared: the worst case for
localisation, and past the path-prediction budget). The figures are what the decision core's
`counters` input costs (decoding each report from the wire included, and given alone), as on
the event loop.

Figures only, each with its sample (switches, RoCE counts and samples per period, periods);
the share of a core is ingest time over the report period (5 s, the agents' default).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.output import print_figures
from bench.started import started_core
from controller.core.clock import Now
from controller.core.roce import PREDICTIONS_PER_S
from controller.fabric import ipv4_str
from railfabric.fabric_counters import roce_index
from railfabric.v1 import admin_pb2, control_pb2

REPORT_PERIOD_S = 5.0  # the agent's --counters-interval default
S = 1_000_000_000
K = control_pb2


def _report(
    wall_ns: int, ports: Sequence[int], period: int, naks: bool, samples: Sequence[bytes]
) -> bytes:
    msg = control_pb2.Counters(wall_ns=wall_ns)
    for port in ports:
        msg.ports.add(port=port, rx_packets=period * 1_000, tx_packets=period * 1_000)
        counts = [
            (3, K.ROCE_KIND_DATA, period * 1_000_000),
            (3, K.ROCE_KIND_ACK, period * 100_000),
            (6, K.ROCE_KIND_CNP, period * 50),
        ]
        if naks and port <= 64:
            counts.append((3, K.ROCE_KIND_NAK_PSN_SEQUENCE, period * 500))
        for tc, kind, packets in sorted(counts):
            msg.roce_cells.append(roce_index(port, tc, kind))
            msg.roce_packets.append(packets)
    for data in samples:
        msg.nak_samples.add().MergeFromString(data)
    return msg.SerializeToString()


def run(
    fabric_path: Path, storm_tors: int, samples: int, periods: int, seed: int
) -> dict[str, object]:
    begun = started_core(fabric_path)
    planner, core, now, ports = begun.planner, begun.core, begun.now, begun.ports
    names = list(ports)
    tors = [n for n in names if core.views[n].state.HasField("matrix")]
    nics = planner.fabric.nics
    host_nics = {t: [nic for nic in nics if nic.switch == t] for t in tors}
    rng = random.Random(seed)
    stormy = frozenset(rng.sample(tors, min(storm_tors, len(tors))))
    ingest_s: list[float] = []
    decode_s: list[float] = []
    counts = sampled = 0
    for period in range(periods + 1):  # the first report gives no rate yet
        wall_ns = now.wall_ns + period * int(REPORT_PERIOD_S * S)
        wire = {}
        for n in names:
            nak_samples = []
            if n in stormy and period:
                for _ in range(samples):
                    responder, requester = rng.choice(host_nics[n]), rng.choice(nics)
                    nak = control_pb2.NakSample(
                        port=responder.port,
                        src_ipv4=responder.ipv4,
                        dst_ipv4=requester.ipv4,
                        udp_sport=rng.randrange(49152, 65536),
                        kind=K.ROCE_KIND_NAK_PSN_SEQUENCE,
                    )
                    nak_samples.append(nak.SerializeToString())
            wire[n] = _report(wall_ns, ports[n], period, n in stormy, nak_samples)
        started = time.perf_counter()
        for data in wire.values():  # decoding alone: gRPC pays it for any report
            control_pb2.Counters().ParseFromString(data)
        decode_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        for i, (n, data) in enumerate(wire.items()):
            msg = control_pb2.Counters()
            msg.ParseFromString(data)
            # Reports spread over the period, as agents' timers are.
            spread = i * int(REPORT_PERIOD_S * S) // len(wire)
            at = Now(now.mono_ns + period * int(REPORT_PERIOD_S * S) + spread, wall_ns)
            core.counters(n, msg, at)
        ingest_s.append(time.perf_counter() - started)
        if period == periods:
            for data in wire.values():
                msg = control_pb2.Counters()
                msg.ParseFromString(data)
                counts += len(msg.roce_cells)
                sampled += len(msg.nak_samples)
    ingest = ingest_s[1:]
    if not ingest or counts == 0:
        raise SystemExit("bench.roce: no report carried a RoCE count: no figure")
    monitor = core.roce
    # The core above routes over no link (no agent said Hello): its predictions find no path.
    # What one costs with every link up, through the same planner call the monitor makes.
    routed = planner.fresh()
    requests = [
        admin_pb2.PredictPathRequest(
            src_ip=ipv4_str(rng.choice(nics).ipv4),
            dst_ip=ipv4_str(rng.choice(nics).ipv4),
            protocol=17,
            sport=rng.randrange(49152, 65536),
            dport=4791,
        )
        for _ in range(2_000)
    ]
    routed.predict_path(requests[0])  # routing computed outside the timing
    started = time.perf_counter()
    delivered = sum(bool(routed.predict_path(r).delivered_to) for r in requests)
    predict_s = (time.perf_counter() - started) / len(requests)
    return {
        "fabric": planner.fabric.name,
        "switches": len(names),
        "roce_counts_per_period": counts,
        "storm_tors": len(stormy),
        "nak_samples_per_period": sampled,
        "periods": len(ingest),
        "ingest_ms_p50": round(statistics.median(ingest) * 1e3, 1),
        "ingest_ms_max": round(max(ingest) * 1e3, 1),
        "ingest_core_share_at_5s": round(statistics.median(ingest) / REPORT_PERIOD_S, 3),
        # Of which decoding the reports from the wire (the same with or without this monitor).
        "decode_ms_p50": round(statistics.median(decode_s[1:]) * 1e3, 1),
        "paths_predicted": monitor.predictions,
        "predict_us_every_link_up": round(predict_s * 1e6, 1),
        "predicted_delivered": f"{delivered}/{len(requests)}",
        "predict_core_share_at_budget": round(predict_s * PREDICTIONS_PER_S, 3),
        "samples_unplaced": monitor.unplaced,
        "retransmission_alarms": len(core.alarms.kind("roce_retransmission")),
        "suspect_links": len(monitor.suspects()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.roce", description=__doc__)
    parser.add_argument("fabric", type=Path)
    parser.add_argument("--storm-tors", type=int, default=0, help="ToRs with a NAK storm")
    parser.add_argument("--samples", type=int, default=256, help="sampled NAKs per report")
    parser.add_argument("--periods", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.periods < 1 or args.storm_tors < 0 or not 0 <= args.samples <= 256:
        parser.error("--periods >= 1, --storm-tors >= 0, --samples in 0..256 (an agent's most)")
    figures = run(args.fabric, args.storm_tors, args.samples, args.periods, args.seed)
    print_figures(figures, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
