"""Benchmark of the controller's traffic matrix at a fabric's size, in process:

    python -m bench.matrix examples/ref-100k.yaml [--active 1.0] [--periods 3] [--json]

Every ToR of the fabric reports a Counters message whose matrix holds a cell for `--active`
of the destination ToRs (1.0: all-to-all, the worst case), every report period; the figures
are what the controller spends on them, as it does on its event loop:

- ingest: decoding each ToR's report from the wire (protobuf) and `matrix.record` (the core's
  `counters` input), per period, over every ToR;
- answer by rail: `by_rail` (GetTrafficMatrix --by rail, the Prometheus gauge, the web view),
  once per period: a pass over ToRs and rails, the cells were summed by rail at ingest.

Figures only, each with its sample (ToRs, cells per report, periods); the share of a core is
ingest time over the report period (5 s, the agents' default).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from bench.output import print_figures
from controller.core import matrix
from controller.export import matrix_destinations
from controller.intent import load_fabric
from controller.routing import FabricRouting
from railfabric.v1 import control_pb2

REPORT_PERIOD_S = 5.0  # the agent's --counters-interval default


def _report(wall_ns: int, classes: Sequence[int], base: int, size: int) -> bytes:
    """A ToR's report as the agent sends it: dense over `size` classes, `classes` counting."""
    packets, octets = [0] * size, [0] * size
    for c in classes:
        packets[c], octets[c] = base + c, (base + c) * 1_000
    msg = control_pb2.Counters(wall_ns=wall_ns, matrix_packets=packets, matrix_bytes=octets)
    return msg.SerializeToString()


def run(fabric_path: Path, active: float, periods: int, seed: int) -> dict[str, object]:
    fabric = load_fabric(fabric_path)
    destinations = matrix_destinations(FabricRouting(fabric))
    rail_of = {s.name: s.rail for s in fabric.switches if s.rail is not None}
    rng = random.Random(seed)
    per_tor = max(1, round(active * len(destinations)))
    classes = {t: sorted(rng.sample(range(len(destinations)), per_tor)) for t in destinations}
    rails_of_class = matrix.class_rails(destinations, rail_of)
    histories: dict[str, deque[matrix.MatrixReport]] = {
        t: deque(maxlen=matrix.MATRIX_REPORTS) for t in destinations
    }
    ingest_s: list[float] = []
    answer_s: list[float] = []
    cells = 0
    for period in range(periods + 1):  # the first fills one report: no rate yet
        wall_ns = (1 + period) * int(REPORT_PERIOD_S * 1e9)
        base = 1_000 * (period + 1)
        wire = {t: _report(wall_ns, classes[t], base, len(destinations)) for t in destinations}
        started = time.perf_counter()
        for t, data in wire.items():
            msg = control_pb2.Counters()
            msg.ParseFromString(data)
            matrix.record(histories[t], msg, rails_of_class)
        ingest_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        rails = matrix.by_rail(histories, rail_of, 0)
        answer_s.append(time.perf_counter() - started)
        cells = sum(h[-1].active for h in histories.values()) if rails.cells else 0
    ingest, answer = ingest_s[1:], answer_s[1:]
    if not ingest or cells == 0:
        raise SystemExit("bench.matrix: no period measured a rate: no figure")
    return {
        "fabric": fabric.name,
        "tors": len(destinations),
        "cells_per_report": per_tor,
        "periods": len(ingest),
        "cells_reported": cells,
        "ingest_ms_p50": round(statistics.median(ingest) * 1e3, 2),
        "ingest_ms_max": round(max(ingest) * 1e3, 2),
        "ingest_core_share_at_5s": round(statistics.median(ingest) / REPORT_PERIOD_S, 4),
        "answer_by_rail_ms_p50": round(statistics.median(answer) * 1e3, 2),
        "answer_by_rail_ms_max": round(max(answer) * 1e3, 2),
        "wire_bytes_per_period": sum(
            len(_report(0, classes[t], 1_000_000, len(destinations))) for t in destinations
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.matrix", description=__doc__)
    parser.add_argument("fabric", type=Path)
    parser.add_argument("--active", type=float, default=1.0, help="share of cells with traffic")
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.active <= 1 or args.periods < 1:
        parser.error("--active must be in (0, 1] and --periods >= 1")
    figures = run(args.fabric, args.active, args.periods, args.seed)
    print_figures(figures, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
