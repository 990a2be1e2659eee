"""The decision core of a fabric as the daemon starts it, for the in-process benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.core.clock import Now
from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.daemon.core_planner import CorePlanner, load_planner
from controller.daemon.store import SqliteStore
from railfabric.collector import freeze_start_up

S = 1_000_000_000


@dataclass(frozen=True)
class Started:
    planner: CorePlanner
    core: DecisionCore
    # The time it started at, and every switch's name and ports, sorted by name.
    now: Now
    ports: dict[str, list[int]]


def started_core(fabric_path: Path) -> Started:
    """The core of `fabric_path` started from an empty store, its start-up frozen out of the
    collector's scans as the daemon does before the fabric's calls."""
    planner = load_planner(fabric_path)
    core = DecisionCore(planner, DampingParams())
    now = Now(1_000 * S, 1_700_000_000 * S)
    core.start(SqliteStore.open(":memory:").load(), now)
    freeze_start_up()
    ports = {n: [p.port for p in core.views[n].state.ports] for n in sorted(core.views)}
    return Started(planner, core, now, ports)
