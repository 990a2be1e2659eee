"""Benchmark of the controller core on a fabric file:

    python -m bench.controller examples/ref-100k.yaml --json

Measures loading/expansion, the full route computation, and incremental recomputation for
random single switch-to-switch link failures, each applied then reverted (both timed), then the
store's share of the largest of those failures: committing its records (one input: the link,
the routing step, a generation per switch it changed, three events) to a SqliteStore on disk
(`--store-dir`, default the system temp directory; WAL, synchronous=FULL), and the caller's
cost of handing them to the StoreWriter. Figures only; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.output import percentile
from controller.core.records import (
    EventRecord,
    LinkRecord,
    Record,
    RoutingStep,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.daemon.store import SqliteStore
from controller.daemon.store_writer import StoreWriter
from controller.fabric import Link
from controller.intent import IntentError, load_fabric
from controller.routing import FabricRouting, LinkEvent
from railfabric.v1 import admin_pb2


def _failure_records(link: Link, switches: Sequence[str], run: int) -> list[Record]:
    """What the core persists for one remote failure: one input, one transaction."""
    now = time.time_ns()
    generation = run + 2
    digests = (
        "v2:" + hashlib.sha256(f"{name}:{generation}".encode()).hexdigest() for name in switches
    )
    return [
        LinkRecord(link.key, "down", now, run),
        RoutingStep(link.key, False),
        SwitchGenerations(
            tuple(
                SwitchGeneration(name, generation, digest)
                for name, digest in zip(switches, digests, strict=True)
            )
        ),
        EventRecord(
            admin_pb2.Event(
                wall_ns=now,
                kind="port_down",
                type=admin_pb2.EVENT_KIND_PORT_DOWN,
                switch_name=link.a,
                port=link.a_port,
                message=f"{link.a}:{link.a_port} lost carrier",
                port_change=admin_pb2.PortChange(
                    up=False, groups_repaired=1, local_repair_ns=40_000, detected_wall_ns=now
                ),
            )
        ),
        EventRecord(
            admin_pb2.Event(
                wall_ns=now,
                kind="link_down",
                type=admin_pb2.EVENT_KIND_LINK_DOWN,
                switch_name=link.a,
                port=link.a_port,
                message=f"{link.key} out of routing",
                link_change=admin_pb2.LinkChange(
                    link=link.key,
                    a=admin_pb2.LinkEnd(switch_name=link.a, port=link.a_port),
                    b=admin_pb2.LinkEnd(switch_name=link.b, port=link.b_port),
                    usable=False,
                    state=admin_pb2.LINK_STATE_DOWN,
                    switches_changed=len(switches),
                    compute_ns=9_000_000,
                ),
            )
        ),
        EventRecord(
            admin_pb2.Event(
                wall_ns=now,
                kind="pushed",
                type=admin_pb2.EVENT_KIND_PUSHED,
                message=f"{len(switches)} switches pushed",
                generation=generation,
                push=admin_pb2.PushSummary(switches=len(switches), objects=2 * len(switches)),
            )
        ),
    ]


def _store_figures(
    link: Link, switches: Sequence[str], runs: int, store_dir: str | None
) -> dict[str, Any]:
    inputs = [_failure_records(link, switches, run) for run in range(runs)]
    commit_ms: list[float] = []
    submit_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="railfabric-bench-", dir=store_dir) as tmp:
        store = SqliteStore.in_dir(Path(tmp))
        for records in inputs:
            t0 = time.perf_counter()
            store.commit(records)
            commit_ms.append((time.perf_counter() - t0) * 1000)
        fsyncs_per_input = store.commits / runs
        # What the event loop pays: StoreWriter.submit merges and returns; the fsync is the
        # writer thread's. Each input waits for the previous one so none are grouped.
        writer = StoreWriter(store)
        for records in inputs:
            t0 = time.perf_counter()
            future = writer.submit(records)
            submit_ms.append((time.perf_counter() - t0) * 1000)
            future.result(60)
        writer.close()
    return {
        "remote_failure_store_ms": round(statistics.median(commit_ms), 2),
        "remote_failure_store_ms_max": round(max(commit_ms), 2),
        "remote_failure_submit_ms": round(statistics.median(submit_ms), 3),
        "store_fsyncs_per_input": fsyncs_per_input,
        "store_switch_records": len(switches),
        "store_runs": runs,
        "store_dir": str(Path(store_dir or tempfile.gettempdir()).resolve()),
    }


def run(
    path: str, samples: int, seed: int, store_runs: int = 30, store_dir: str | None = None
) -> dict[str, Any]:
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
    # The cut that changed the most switches: the input whose records the store bench writes.
    widest: tuple[Link, list[str]] | None = None
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
            if not up and (widest is None or len(deltas) > len(widest[1])):
                widest = (link, sorted(deltas))
    if widest is None:  # no samples: cut a ToR-spine link (fabric.links[0]: `a` is the ToR)
        link = fabric.links[0]
        widest = (link, sorted(routing.apply([LinkEvent(link.a, link.a_port, up=False)])))
        routing.apply([LinkEvent(link.a, link.a_port, up=True)])
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
        "incremental_ms_p50": round(percentile(times_ms, 50), 2),
        "incremental_ms_p99": round(percentile(times_ms, 99), 2),
        "incremental_ms_max": round(max(times_ms, default=0.0), 2),
        "incremental_cpu_ms_p50": round(percentile(cpu_ms, 50), 2),
        "incremental_cpu_ms_p99": round(percentile(cpu_ms, 99), 2),
        "delta_entries_p50": int(percentile(entries, 50)),
        "delta_switches_p50": int(percentile(switches_touched, 50)),
        "split_groups": len(routing.split_notices()),
        "samples": samples,
        "seed": seed,
        "python": sys.version.split()[0],
        "mean_incremental_ms": round(statistics.fmean(times_ms), 2) if times_ms else 0.0,
        **_store_figures(*widest, store_runs, store_dir),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller", description=__doc__)
    parser.add_argument("fabric", help="fabric intent YAML")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--samples", type=int, default=200, help="link failures (each reverted)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--store-runs", type=int, default=30, help="commits of the largest failure's records"
    )
    parser.add_argument(
        "--store-dir", help="directory for the bench's store (on the disk to measure)"
    )
    args = parser.parse_args(argv)
    if args.store_runs < 1:
        parser.error("--store-runs must be at least 1")
    try:
        result = run(args.fabric, args.samples, args.seed, args.store_runs, args.store_dir)
    except IntentError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
