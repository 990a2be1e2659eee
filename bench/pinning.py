"""Two sets of CPUs for a benchmark: the first CPU this process may use for the process it
measures, the others for what loads it, so that neither decides the result by taking the
other's CPU. The controller and its swarm (bench.swarm); the agent and its softswitch
(bench.agent: on a switch the target is silicon of its own, and two processes that float
over this machine's two CPUs now and then share one). Without taskset or a second CPU nothing
is pinned, and the report says so."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Pinning:
    measured: tuple[int, ...]
    load: tuple[int, ...]
    # Empty when both are pinned; else why nothing is.
    note: str
    # What runs on each: (measured, load).
    names: tuple[str, str]

    def prefix(self, cpus: tuple[int, ...]) -> list[str]:
        """`taskset -c CPUS` to put before a command line; nothing when not pinning."""
        if self.note or not cpus:
            return []
        return ["taskset", "-c", _cpus(cpus)]

    def describe(self) -> str:
        if self.note:
            return self.note
        measured, load = self.names
        return (
            f"{measured} on CPU {_cpus(self.measured)}, {load} on CPU {_cpus(self.load)} (taskset)"
        )


def _cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus))


def plan_pinning(measured: str, load: str) -> Pinning:
    """`measured` and `load` name what runs on each set, for the report."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    names = (measured, load)
    if shutil.which("taskset") is None:
        return Pinning(
            (), (), f"taskset not found: nothing pinned, {measured} and {load} share CPUs", names
        )
    if len(cpus) < 2:
        return Pinning(
            (),
            (),
            f"only CPU {_cpus(cpus)} available: nothing pinned, {measured} and {load} share it",
            names,
        )
    return Pinning(cpus[:1], cpus[1:], "", names)


@contextlib.contextmanager
def pinned(cpus: tuple[int, ...]) -> Iterator[None]:
    """Every thread of this process (gRPC's included) on `cpus` while inside, then back on
    the CPUs it had; nothing when `cpus` is empty (not pinning)."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    _set_all(set(cpus))
    try:
        yield
    finally:
        _set_all(before)


def _set_all(cpus: set[int]) -> None:
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task), cpus)
