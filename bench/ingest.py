"""Benchmark of what the controller spends taking in telemetry at a fabric's size, in process:
every switch's whole counter report every period, through the decision core's `counters`
input, as on the event loop.

    python -m bench.ingest examples/ref-100k.yaml [--periods 6] [--parts all] [--json]

A report holds what an agent sends every 5 s (its --counters-interval default) under the
default intent: every port's counters (bmv2's drop reasons, a queue watermark), RoCE counts
on every port (data and ACKs in the lossless class, CNPs in the CNP class: every port busy,
bench.roce's worst case), a ToR's traffic matrix row over every destination class (all-to-all,
bench.matrix's worst case), and the probe results of `latency` (bench.latency's). `--parts`
leaves parts out, to see what each costs; the goal (issue 14) is for all of them.

Figures, each with its sample (switches, ports, RoCE counts, matrix cells, probe results a
period, periods): the core's time a period (decoding each report from the wire included),
the share of a core at the 5 s period, the longest report, and the bytes on the wire.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.latency import ProbeReports
from bench.output import print_figures
from bench.started import started_core
from controller.core.clock import Now
from controller.core.effects import Level, Log
from railfabric.fabric_counters import PIPELINE_REASONS, roce_index
from railfabric.v1 import control_pb2

REPORT_PERIOD_S = 5.0  # the agent's --counters-interval default
S = 1_000_000_000
K = control_pb2
PARTS = ("ports", "roce", "matrix", "probes")


def _ports(msg: control_pb2.Counters, ports: Sequence[int], n: int, roce: bool) -> None:
    for port in ports:
        pc = msg.ports.add(
            port=port, rx_packets=n * 1_000, rx_bytes=n * 1_000_000, tx_packets=n * 1_000,
            tx_bytes=n * 1_000_000, ecn_marks=n, pfc_pause_rx=n, queue_watermark_packets=12,
        )  # fmt: skip
        for reason in PIPELINE_REASONS:
            pc.drops_by_reason.add(reason=reason.value, packets=0)
        if roce:
            for tc, kind, packets in (
                (3, K.ROCE_KIND_DATA, n * 1_000_000),
                (3, K.ROCE_KIND_ACK, n * 100_000),
                (6, K.ROCE_KIND_CNP, n * 50),
            ):
                msg.roce_cells.append(roce_index(port, tc, kind))
                msg.roce_packets.append(packets)


def run(fabric_path: Path, periods: int, parts: frozenset[str], seed: int) -> dict[str, object]:
    begun = started_core(fabric_path)
    planner, core, now, ports = begun.planner, begun.core, begun.now, begun.ports
    names = list(ports)
    classes = len(planner.matrix_destinations())
    tors = {n for n in names if core.views[n].state.HasField("matrix")}
    probes = ProbeReports(planner.fabric, 0, random.Random(seed))
    period_ns = int(REPORT_PERIOD_S * S)
    ingest_s: list[float] = []
    longest_s = 0.0
    sample = {"ports": 0, "roce_counts": 0, "matrix_cells": 0, "probe_results": 0, "bytes": 0}
    for period in range(periods + 1):  # the first gives no rate yet
        wall_ns = now.wall_ns + period * period_ns
        wire: dict[str, bytes] = {}
        for n in names:
            msg = control_pb2.Counters(wall_ns=wall_ns)
            if "ports" in parts:
                _ports(msg, ports[n], period + 1, "roce" in parts)
            if "matrix" in parts and n in tors:
                msg.matrix_packets.extend(range(period, period + classes))
                msg.matrix_bytes.extend(range(period * 1_000, period * 1_000 + classes))
            if "probes" in parts:
                probes.add(msg, n, period, False)
            wire[n] = msg.SerializeToString()
            if period == periods:
                sample["ports"] += len(msg.ports)
                sample["roce_counts"] += len(msg.roce_cells)
                sample["matrix_cells"] += len(msg.matrix_packets)
                sample["probe_results"] += len(msg.probe_results.kind)
                sample["bytes"] += len(wire[n])
        started = time.process_time()
        for i, (n, data) in enumerate(wire.items()):
            took = time.process_time()
            msg = control_pb2.Counters()
            msg.ParseFromString(data)
            # Reports spread over the period, as agents' timers are.
            at = Now(now.mono_ns + period * period_ns + i * period_ns // len(wire), wall_ns)
            for effect in core.counters(n, msg, at):
                if isinstance(effect, Log) and effect.level >= Level.WARNING:
                    raise SystemExit(f"bench.ingest: the core refused {n}'s report: {effect}")
            if period:  # the first report of each switch also builds what the core caches
                longest_s = max(longest_s, time.process_time() - took)
        ingest_s.append(time.process_time() - started)
    ingest = ingest_s[1:]
    if not ingest or not any(sample[k] for k in ("ports", "matrix_cells", "probe_results")):
        raise SystemExit("bench.ingest: the reports carried nothing: no figure")
    return {
        "fabric": planner.fabric.name,
        "switches": len(names),
        "parts": ",".join(p for p in PARTS if p in parts),
        "periods": len(ingest),
        **{f"{k}_per_period": v for k, v in sample.items()},
        "ingest_s_per_period": [round(s, 3) for s in ingest],
        "ingest_s_per_period_p50": round(statistics.median(ingest), 3),
        "ingest_s_per_period_max": round(max(ingest), 3),
        "ingest_core_share_at_5s": round(statistics.median(ingest) / REPORT_PERIOD_S, 3),
        "longest_report_ms": round(longest_s * 1e3, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("fabric", type=Path)
    parser.add_argument("--periods", type=int, default=6)
    parser.add_argument(
        "--parts", default="all", help=f"comma-separated, of {', '.join(PARTS)} (default: all)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    parts = frozenset(PARTS if args.parts == "all" else args.parts.split(","))
    if args.periods < 1 or not parts <= set(PARTS):
        parser.error(f"--periods must be >= 1 and --parts of {', '.join(PARTS)} or all")
    if "roce" in parts and "ports" not in parts:
        parser.error("--parts: roce counts are carried by ports")
    figures = run(args.fabric, args.periods, parts, args.seed)
    print_figures(figures, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
