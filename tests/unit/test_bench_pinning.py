"""bench/pinning.py: the CPUs a benchmark gives what it measures and what loads it."""

from __future__ import annotations

import os
import threading

import pytest

from bench.pinning import pinned, plan_pinning

pytestmark = pytest.mark.unit


def _affinities() -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}


def test_pinned_moves_every_thread_and_puts_them_back() -> None:
    """Threads that exist before (gRPC's pollers) move too, not only the caller; each gets
    back what it had."""
    before = os.sched_getaffinity(0)
    one = min(before)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        had = _affinities()
        with pinned((one,)):
            assert all(cpus == {one} for cpus in _affinities().values())
        assert _affinities() == had
    finally:
        stop.set()
        worker.join()
    with pinned(()):  # not pinning: nothing moves
        assert os.sched_getaffinity(0) == before


def test_a_plan_takes_the_first_cpu_for_the_measured_process_or_says_why_not() -> None:
    plan = plan_pinning("agent", "softswitch")
    cpus = sorted(os.sched_getaffinity(0))
    if plan.note:
        assert plan.measured == plan.load == () and plan.prefix(plan.load) == []
        assert "agent and softswitch share" in plan.note
    else:
        assert plan.measured == (cpus[0],) and plan.load == tuple(cpus[1:])
        assert plan.prefix(plan.load)[:2] == ["taskset", "-c"]
        assert plan.describe().startswith(f"agent on CPU {cpus[0]}, softswitch on CPU")
