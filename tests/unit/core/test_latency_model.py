"""The latency windows against a from-scratch computation (controller/core/latency.py).

A model keeps every report ever fed (when it arrived, its probe results) and sums, from that
log alone, what the windows keep in slots and epochs: per cable and per mesh key, the
window's and the baseline's probes (the latest complete epoch, or what there is of the
next). Random interleavings of reports from several switches (link and mesh results, merged
and per-uplink), time passing by small steps and long gaps must never make them differ, nor
the outliers read from them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.core.latency import (
    SLOTS_PER_WINDOW,
    Acc,
    Fabric,
    LatencyParams,
    LatencyWindows,
    Period,
    Stats,
    acc_of,
    add,
    outliers,
    rail_sums,
)
from railfabric.latency import Result, merge, results_of
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

S = 1_000_000_000
TORS = {"t0": 0, "t1": 0, "t2": 1}
# Every ToR has uplinks 1 and 2 to spines s1 and s2 (the spine's port is the ToR's number).
CABLES = [(f"{t}:{u}--s{u}:{i}", (t, u), (f"s{u}", i)) for i, t in enumerate(TORS) for u in (1, 2)]
FABRIC = Fabric.of(CABLES, TORS)
ENDS = {k: (a, b) for k, a, b in CABLES}
PARAMS = LatencyParams(
    window_ns=10 * S, baseline_ns=16 * S, outlier_margin_ns=20_000, min_samples=3
)


def probe_path(src: str, port: int, dst: str) -> list[str] | None:
    """A made-up prediction: out over the uplink, into dst over the same spine."""
    if port == 0:
        return None
    return [
        f"{src}:{port}--s{port}:{list(TORS).index(src)}",
        f"{dst}:{port}--s{port}:{list(TORS).index(dst)}",
    ]


@dataclass(frozen=True)
class Logged:
    mono_ns: int
    switch: str
    probes: tuple[Result, ...]


results = st.builds(
    lambda kind, port, target, sent, lost, buckets: Result(
        kind=kind,
        port=port,
        target=target if kind == control_pb2.PROBE_KIND_MESH else "",
        sent=sent,
        received=max(0, sent - lost),
        bucket_index=sorted(buckets)[: max(0, sent - lost)],
        bucket_count=[1] * min(len(buckets), max(0, sent - lost)),
    ),
    st.sampled_from([control_pb2.PROBE_KIND_LINK, control_pb2.PROBE_KIND_MESH]),
    st.sampled_from([0, 1, 2]),
    st.sampled_from(list(TORS)),
    st.integers(0, 6),
    st.integers(0, 3),
    st.sets(st.integers(20, 60), max_size=6),
)


def _fix(p: Result) -> Result:
    """received is what the histogram counts (the agent's invariant)."""
    received = sum(p.bucket_count)
    port = 1 if p.kind == control_pb2.PROBE_KIND_LINK and p.port == 0 else p.port
    return p._replace(received=received, sent=max(p.sent, received), port=port)


class LatencyModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # A slot leaves the window one key a report: reads must finish what is left.
        self.windows = LatencyWindows(PARAMS, roll_budget=1)
        self.log: list[Logged] = []
        self.now = 1_000 * S

    @rule(step=st.integers(0, 4 * S))
    def time_passes(self, step: int) -> None:
        self.now += step

    @rule(gap=st.sampled_from([6 * S, 13 * S, 40 * S]))
    def a_long_gap(self, gap: int) -> None:
        self.now += gap

    @rule(switch=st.sampled_from(list(TORS)), probes=st.lists(results, max_size=5))
    def report(self, switch: str, probes: list[Result]) -> None:
        fixed = tuple(
            _fix(p)
            for p in probes
            if not (p.kind == control_pb2.PROBE_KIND_MESH and p.target == switch)
        )
        problems = self.windows.ingest(switch, results_of(fixed), self.now, FABRIC)
        assert problems == []
        self.log.append(Logged(self.now, switch, fixed))

    def _period(self, keep: list[Logged]) -> Period:
        links: dict[str, Acc] = {}
        mesh: dict[tuple[str, str, int], Acc] = {}
        for r in keep:
            for p in r.probes:
                if p.sent == 0:
                    continue  # nothing probed: not kept
                if p.kind == control_pb2.PROBE_KIND_LINK:
                    acc = links.setdefault(FABRIC.link_of[(r.switch, p.port)], {})
                else:
                    acc = mesh.setdefault((r.switch, p.target, p.port), {})
                hist: dict[int, int] = {}
                merge(hist, p.bucket_index, p.bucket_count)
                add(acc, acc_of(p.sent, p.received, hist))
        results = sum(1 for r in keep for p in r.probes if p.sent)
        return Period(links, mesh, rail_sums(mesh, TORS), len(keep), results)

    def expected(self, slots: int) -> tuple[Period, Period]:
        slot_ns = self.windows.slot_ns
        per = self.windows.per_epoch
        n = self.now // slot_ns
        edge = n - SLOTS_PER_WINDOW
        window = [r for r in self.log if n - slots < r.mono_ns // slot_ns <= n]
        latest = (edge + 1) // per - 1
        gone = [r for r in self.log if r.mono_ns // slot_ns <= edge]
        baseline = [r for r in gone if (r.mono_ns // slot_ns) // per == latest] or [
            r for r in gone if (r.mono_ns // slot_ns) // per == latest + 1
        ]
        return self._period(window), self._period(baseline)

    @invariant()
    def windows_hold_what_the_log_says(self) -> None:
        for slots in (1, 3, SLOTS_PER_WINDOW):
            want_w, want_b = self.expected(slots)
            got_w = self.windows.window(self.now, slots)
            for want, got in ((want_w, got_w), (want_b, self.windows.baseline(self.now, TORS))):
                assert {k: Stats.of(a) for k, a in got.links.items()} == {
                    k: Stats.of(a) for k, a in want.links.items()
                }
                if got is got_w:  # a window by mesh key; a baseline by rail pair only
                    assert {k: Stats.of(a) for k, a in got.mesh.items()} == {
                        k: Stats.of(a) for k, a in want.mesh.items()
                    }
                else:
                    assert {k: Stats.of(a) for k, a in got.rails.items()} == {
                        k: Stats.of(a) for k, a in want.rails.items()
                    }
                assert (got.reports, got.results) == (want.reports, want.results)
        want_w, want_b = self.expected(SLOTS_PER_WINDOW)
        kwargs = {"fabric": FABRIC, "ends": ENDS, "probe_path": probe_path}
        assert outliers(PARAMS, want_w, want_b, **kwargs) == outliers(  # type: ignore[arg-type]
            PARAMS,
            self.windows.window(self.now),
            self.windows.baseline(self.now, TORS),
            **kwargs,  # type: ignore[arg-type]
        )

    @invariant()
    def memory_is_bounded(self) -> None:
        slots, _ = self.windows.memory_items()
        assert slots <= SLOTS_PER_WINDOW + 1 + 2 + 1  # fine, epochs, one on its way


TestLatencyModel = LatencyModel.TestCase
TestLatencyModel.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
