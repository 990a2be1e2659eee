"""Benchmark of the controller core on a fabric file:

    python -m controller.bench examples/ref-100k.yaml --json

Measures loading/expansion, the full route computation, and incremental recomputation for
random single switch-to-switch link failures, each applied then reverted (both timed).
Figures only; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from controller.intent import IntentError, load_fabric
from controller.routing import FabricRouting, LinkEvent


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def run(path: str, samples: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    fabric = load_fabric(path)
    load_s = time.perf_counter() - t0
    gc.collect()
    t0 = time.perf_counter()
    routing = FabricRouting(fabric)
    full_s = time.perf_counter() - t0
    # The computed state lives as long as the process: keep the cyclic GC from rescanning it
    # on every later collection (what the daemon does too).
    gc.collect()
    gc.freeze()
    rng = random.Random(seed)
    times_ms: list[float] = []
    cpu_ms: list[float] = []  # CPU time: the same work without the waits of a shared machine
    entries: list[int] = []
    switches_touched: list[int] = []
    for _ in range(samples):
        link = rng.choice(fabric.links)
        for up in (False, True):
            c0 = time.thread_time()
            t0 = time.perf_counter()
            deltas = routing.apply([LinkEvent(link.a, link.a_port, up=up)])
            times_ms.append((time.perf_counter() - t0) * 1000)
            cpu_ms.append((time.thread_time() - c0) * 1000)
            entries.append(sum(d.entries for d in deltas.values()))
            switches_touched.append(len(deltas))
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "fabric": fabric.name,
        "gpus": len(fabric.nics),
        "switches": len(fabric.switches),
        "links": len(fabric.links),
        "host_links": len(fabric.nics),
        "route_entries": routing.route_count(),
        "groups": routing.group_count(),
        "load_expand_s": round(load_s, 3),
        "full_compute_s": round(full_s, 3),
        "peak_rss_mb": round(peak_rss_mb, 1),
        "incremental_events": len(times_ms),
        "incremental_ms_p50": round(_percentile(times_ms, 50), 2),
        "incremental_ms_p99": round(_percentile(times_ms, 99), 2),
        "incremental_ms_max": round(max(times_ms, default=0.0), 2),
        "incremental_cpu_ms_p50": round(_percentile(cpu_ms, 50), 2),
        "incremental_cpu_ms_p99": round(_percentile(cpu_ms, 99), 2),
        "delta_entries_p50": int(_percentile(entries, 50)),
        "delta_switches_p50": int(_percentile(switches_touched, 50)),
        "split_groups": len(routing.split_notices()),
        "samples": samples,
        "seed": seed,
        "python": sys.version.split()[0],
        "mean_incremental_ms": round(statistics.fmean(times_ms), 2) if times_ms else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller.bench", description=__doc__)
    parser.add_argument("fabric", help="fabric intent YAML")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--samples", type=int, default=200, help="link failures (each reverted)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        result = run(args.fabric, args.samples, args.seed)
    except IntentError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
