"""What a link event costs the controller's store: SQLite and etcd side by side, in one run.

    python -m bench.store [--fabric examples/ref-100k.yaml] [--events 20]

The event is the remote failure of a 100k-GPU fabric: a spine loses its link to one ToR, and
every other ToR's group for that ToR's prefix changes, so one input writes the new generation
of every ToR (1,600 of them on ref-100k), the link's state, the routing step and its event; then
every ToR acknowledges (one SwitchApplied input each). Both go through the daemon's StoreWriter,
as in the daemon: the event's records are one commit, and acks that arrive while a commit runs
are merged into the next. Measured per event: the event's commit (submit -> durable) and every
ack durable. Backends: a SQLite file (WAL, synchronous=FULL) in a temporary directory, and etcd
with 1 and with 3 members on loopback (real etcd processes, fsync on, mutual TLS as etcds://
asks, the store fenced by a real lease as a leader's is). Before the events, each store gets
the fabric's full state (every switch's generation, every link), as a running controller's
has.

Goal (issue 16): etcd <= 3x SQLite (`goal_met` says). Prints JSON; exits 1 when a sample is
short or a commit failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from controller.core.records import (
    EventRecord,
    LinkRecord,
    Record,
    RoutingStep,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.daemon.election import Election
from controller.daemon.etcd_channel import parse
from controller.daemon.etcd_store import EtcdStore
from controller.daemon.store import SqliteStore
from controller.daemon.store_writer import RecordStore, StoreWriter
from controller.fabric import Role
from controller.intent import load_fabric
from mininet_labs.etcd import EtcdCluster, etcd_path
from railfabric import pki, tls
from railfabric.tls import Identity, Kind
from railfabric.v1 import admin_pb2

REPO = Path(__file__).resolve().parent.parent


def _digest(n: int) -> str:
    return f"v2:{n:064x}"


def _event(tors: Sequence[str], generation: int, link: str, wall_ns: int) -> list[Record]:
    return [
        LinkRecord(link, "down", wall_ns, generation),
        RoutingStep(link, usable=False),
        SwitchGenerations(
            tuple(SwitchGeneration(t, generation, _digest(generation)) for t in tors)
        ),
        EventRecord(
            admin_pb2.Event(
                wall_ns=wall_ns,
                kind="link_down",
                message=f"{link} down: {len(tors)} switches recomputed",
                generation=generation,
            )
        ),
    ]


def _wait(futures: Sequence[Future[bool]], what: str) -> None:
    for future in futures:
        if not future.result(timeout=60):
            raise SystemExit(f"bench.store: {what}: a commit failed")


def _measure(
    store: RecordStore, switches: list[str], links: list[str], events: int
) -> dict[str, Any]:
    tors = [s for s in switches if s.startswith("tor")]
    writer = StoreWriter(store)
    try:
        # The fabric's state, as a running controller's store holds it.
        wall = time.time_ns()
        full: list[Record] = [
            SwitchGenerations(tuple(SwitchGeneration(s, 1, _digest(1)) for s in switches)),
            *(LinkRecord(x, "up", wall, 0) for x in links),
        ]
        _wait([writer.submit(full)], "the initial state")
        commit_s: list[float] = []
        acked_s: list[float] = []
        for i in range(events):
            generation = i + 2
            link = links[i % len(links)]
            started = time.perf_counter()
            _wait([writer.submit(_event(tors, generation, link, time.time_ns()))], "an event")
            commit_s.append(time.perf_counter() - started)
            acks = [writer.submit([SwitchApplied(t, generation)]) for t in tors]
            _wait(acks, "the acks")
            acked_s.append(time.perf_counter() - started)
        stats = writer.stats
    finally:
        writer.close()
    return {
        "events": events,
        "switches_per_event": len(tors),
        "event_commit_ms_p50": round(statistics.median(commit_s) * 1000, 1),
        "event_commit_ms_max": round(max(commit_s) * 1000, 1),
        "all_acks_durable_ms_p50": round(statistics.median(acked_s) * 1000, 1),
        "all_acks_durable_ms_max": round(max(acked_s) * 1000, 1),
        "commits": stats.commits,
        "failed_commits": stats.failed_commits,
    }


async def _fenced_store(url: str, files: tls.TlsFiles) -> tuple[EtcdStore, Election]:
    """An etcd store fenced by a real election, as the leader's is (mutual TLS, etcds://)."""
    endpoints = parse(url).with_tls(files)
    election = Election(endpoints, "bench:0")
    await election.__aenter__()
    won = await election.campaign()
    store = EtcdStore.open(endpoints)
    store.load()
    store.fence(election.key, won.term)
    return store, election


def _etcd(
    members: int, work: Path, switches: list[str], links: list[str], events: int
) -> dict[str, Any]:
    ca = work / f"pki{members}"
    pki.init_ca(ca)
    issued = pki.issue(ca, Identity(Kind.CONTROLLER, "127.0.0.1"), ("127.0.0.1",))
    files = tls.TlsFiles(ca / pki.CA_CERT, issued.cert, issued.key)
    with EtcdCluster(members, work / f"etcd{members}", pki=ca) as cluster:
        loop = asyncio.new_event_loop()
        try:
            store, election = loop.run_until_complete(_fenced_store(f"{cluster.url}/bench", files))
            # The lease is kept alive meanwhile, as the leader's keeper does.
            keeper = election.keep(lambda why: print(f"bench.store: lost the lease: {why}"))
            try:
                figures = _measure(store, switches, links, events)
            finally:
                keeper.stop()
            reloaded = EtcdStore.open(store.endpoints)
            started = time.perf_counter()
            restored = reloaded.load()
            figures["load_s"] = round(time.perf_counter() - started, 3)
            figures["loaded_switches"] = len(restored.switches)
            reloaded.close()
            loop.run_until_complete(election.__aexit__(None, None, None))
        finally:
            loop.close()
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    fabric = load_fabric(args.fabric)
    switches = [s.name for s in fabric.switches]
    links = [x.key for x in fabric.links]
    tors = sum(1 for s in fabric.switches if s.role == Role.TOR)
    out: dict[str, Any] = {"fabric": str(args.fabric), "switches": len(switches), "tors": tors}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        work = Path(tmp)
        sqlite = SqliteStore.open(work / "controller.sqlite3")
        out["sqlite"] = _measure(sqlite, switches, links, args.events)
        out["etcd_1"] = _etcd(1, work, switches, links, args.events)
        out["etcd_3"] = _etcd(3, work, switches, links, args.events)
    base = out["sqlite"]["all_acks_durable_ms_p50"]
    for name in ("etcd_1", "etcd_3"):
        out[f"{name}_vs_sqlite"] = round(out[name]["all_acks_durable_ms_p50"] / base, 2)
    out["goal_ratio"] = 3.0
    out["goal_met"] = all(out[f"{n}_vs_sqlite"] <= 3.0 for n in ("etcd_1", "etcd_3"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--fabric", type=Path, default=REPO / "examples" / "ref-100k.yaml")
    parser.add_argument("--events", type=int, default=20)
    args = parser.parse_args(argv)
    if etcd_path() is None:
        print("bench.store: etcd is not installed (Debian: etcd-server)", file=sys.stderr)
        return 2
    out = run(args)
    print(json.dumps(out, indent=2))
    short = any(
        out[b]["events"] < args.events or out[b]["failed_commits"]
        for b in ("sqlite", "etcd_1", "etcd_3")
    )
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
