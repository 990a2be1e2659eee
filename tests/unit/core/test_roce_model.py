"""The RoCE monitor's kept state against a from-scratch computation (controller/core/roce.py).

A model keeps every report ever fed (when, the counts, the samples) and computes from that log
alone what the monitor keeps incrementally: each switch's rates between its last two reports
(none after a restart or a clock gone back), the samples of the last window, the ports and ToR
pairs hot at some report of the window, and so the evidence localisation looks at. Random
interleavings of reports on two switches, counter restarts, wall clocks going back and time
passing must never make them differ."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.core.roce import (
    CONGESTION,
    NETWORK_NAKS,
    RETRANSMISSION,
    WATCHED,
    Active,
    Flow,
    Pair,
    Placed,
    ReportRates,
    RoceMonitor,
    RoceParams,
    localise,
)
from railfabric.fabric_counters import roce_index
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

S = 1_000_000_000
K = control_pb2.RoceKind
SWITCHES = ("tor-a", "tor-b")
WINDOW_NS = 10 * S
THRESHOLD = 2.0
KINDS = (K.ROCE_KIND_DATA, K.ROCE_KIND_NAK_PSN_SEQUENCE, K.ROCE_KIND_NAK_RNR, K.ROCE_KIND_CNP)


class Fabric:
    """A made-up fabric: flow (requester r, responder switch i, sport) crosses r's uplink,
    a spine chosen by the sport, and the responder's ToR host port."""

    def predict(self, flow: Flow, qp: int | None) -> Placed | None:
        requester, responder, sport = flow
        if requester == 0:
            return None  # not a NIC of the fabric
        tor = SWITCHES[responder]
        links = ((f"tor-{requester}", 9), (f"spine-{sport % 2}", responder), (tor, 1))
        return Placed((f"tor-{requester}", tor), links)

    def host_ports(self, switch: str) -> frozenset[int]:
        return frozenset({1, 2})

    def peer(self, end: tuple[str, int]) -> str:
        return ""

    def report_rates(self, switch: str) -> ReportRates:
        return ReportRates({}, 0, 0)


@dataclass(frozen=True)
class Logged:
    mono_ns: int
    wall_ns: int
    counts: dict[tuple[int, int, int], int]
    # (port, kind, flow) of each sample, in order
    samples: tuple[tuple[int, int, Flow], ...]


def rates_of(before: Logged | None, after: Logged) -> dict[tuple[int, int, int], float]:
    if before is None or after.wall_ns <= before.wall_ns:
        return {}
    if any(after.counts.get(k, 0) < n for k, n in before.counts.items()):
        return {}
    span = after.wall_ns - before.wall_ns
    return {
        k: (n - before.counts.get(k, 0)) * 1e9 / span
        for k, n in after.counts.items()
        if n != before.counts.get(k, 0)
    }


def watched(counts: dict[tuple[int, int, int], int]) -> dict[tuple[int, int, int], int]:
    """The counts the monitor keeps: NAKs and CNPs (data is left in the reports)."""
    return {k: n for k, n in counts.items() if k[2] in WATCHED}


class RoceModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fabric = Fabric()
        self.monitor = RoceMonitor(
            RoceParams(nak_alarm_per_s=THRESHOLD, window_ns=WINDOW_NS, cnp_alarm_ns=5 * S)
        )
        self.mono = 1_000 * S
        self.wall = {name: 1_700_000_000 * S for name in SWITCHES}
        self.counts = {name: dict[tuple[int, int, int], int]() for name in SWITCHES}
        self.log: dict[str, list[Logged]] = {name: [] for name in SWITCHES}
        self.active: dict[str, dict[str, object]] = {RETRANSMISSION: {}, CONGESTION: {}}

    @rule(ns=st.sampled_from([S // 2, S, 3 * S, 5 * S, 10 * S]))
    def time_passes(self, ns: int) -> None:
        self.mono += ns
        for name in SWITCHES:
            self.wall[name] += ns

    @rule(
        i=st.integers(0, 1),
        grow=st.dictionaries(
            st.tuples(st.integers(1, 2), st.sampled_from(KINDS)), st.integers(0, 40), max_size=4
        ),
        restart=st.booleans(),
        clock_back=st.booleans(),
        samples=st.lists(
            st.tuples(
                st.integers(1, 2),
                st.sampled_from(KINDS[1:3]),
                st.integers(0, 3),
                st.integers(0, 3),
            ),
            max_size=4,
        ),
    )
    def report(
        self,
        i: int,
        grow: dict[tuple[int, int], int],
        restart: bool,
        clock_back: bool,
        samples: list[tuple[int, int, int, int]],
    ) -> None:
        name = SWITCHES[i]
        counts = {} if restart else dict(self.counts[name])
        for (port, kind), n in grow.items():
            key = (port, 3, kind)
            counts[key] = counts.get(key, 0) + n
        self.counts[name] = counts
        if clock_back:
            self.wall[name] -= 2 * S
        msg = control_pb2.Counters(wall_ns=self.wall[name])
        for port in (1, 2):
            msg.ports.add(port=port)
        for (p, tc, kind), n in sorted(counts.items()):
            msg.roce_cells.append(roce_index(p, tc, kind))
            msg.roce_packets.append(n)
        logged: list[tuple[int, int, Flow]] = []
        for port, kind, requester, sport in samples:
            msg.nak_samples.add(
                port=port, src_ipv4=i, dst_ipv4=requester, udp_sport=sport, kind=kind
            )
            logged.append((port, kind, (requester, i, sport)))
        active = Active(self.active[RETRANSMISSION], self.active[CONGESTION])
        verdict = self.monitor.report(name, msg, self.mono, self.fabric, active)
        for r in verdict.raised:
            self.active[r.kind][r.alarm_id] = r
        for c in verdict.cleared:
            for alarms in self.active.values():
                alarms.pop(c.alarm_id, None)
        self.log[name].append(Logged(self.mono, self.wall[name], watched(counts), tuple(logged)))

    # -- from scratch
    def _window(
        self, name: str, at_ns: int, upto: int | None = None
    ) -> list[tuple[int, int, int, Flow]]:
        """(at, port, kind, flow) of the samples of `name` in the window ending at `at_ns`
        (of its reports up to the `upto`-th, all of them by default)."""
        log = self.log[name] if upto is None else self.log[name][: upto + 1]
        return [
            (r.mono_ns, port, kind, flow)
            for r in log
            if at_ns - WINDOW_NS < r.mono_ns <= at_ns
            for port, kind, flow in r.samples
        ]

    def _hot(self) -> tuple[set[tuple[str, int]], set[Pair]]:
        ports: set[tuple[str, int]] = set()
        pairs: set[Pair] = set()
        for name in SWITCHES:
            log = self.log[name]
            for j, r in enumerate(log):
                if r.mono_ns <= self.mono - WINDOW_NS:
                    continue
                rates = rates_of(log[j - 1] if j else None, r)
                by_port: dict[int, float] = {}
                for (port, _tc, kind), rate in rates.items():
                    if kind in NETWORK_NAKS:
                        by_port[port] = by_port.get(port, 0.0) + rate
                ports |= {(name, p) for p, rate in by_port.items() if rate > THRESHOLD}
                shares: dict[int, dict[Pair, int]] = {}
                for _at, port, kind, flow in self._window(name, r.mono_ns, j):
                    placed = self.fabric.predict(flow, None)
                    if kind in NETWORK_NAKS and placed is not None and port in by_port:
                        c = shares.setdefault(port, {})
                        c[placed.pair] = c.get(placed.pair, 0) + 1
                pair_rates: dict[Pair, float] = {}
                for port, c in shares.items():
                    total = sum(c.values())
                    for pair, n in c.items():
                        pair_rates[pair] = pair_rates.get(pair, 0.0) + by_port[port] * n / total
                pairs |= {p for p, rate in pair_rates.items() if rate > THRESHOLD}
        return ports, pairs

    @invariant()
    def rates_are_the_last_two_reports(self) -> None:
        for name in SWITCHES:
            log = self.log[name]
            want = rates_of(log[-2] if len(log) > 1 else None, log[-1]) if log else {}
            sw = self.monitor.switches.get(name)
            got = sw.rates_by_key() if sw is not None else {}
            assert got == pytest.approx(want), name

    @invariant()
    def samples_are_the_windows(self) -> None:
        for name in SWITCHES:
            sw = self.monitor.switches.get(name)
            if sw is None:
                assert not self._window(name, self.mono), name
                continue
            sw.expire(self.mono, WINDOW_NS)
            got = [(s.at_ns, s.port, s.kind, s.flow) for s in sw.samples]
            assert got == self._window(name, self.mono), name

    @invariant()
    def evidence_and_localisation_are_from_scratch(self) -> None:
        ports, pairs = self._hot()
        want = []
        for name in SWITCHES:
            for at, port, kind, flow in self._window(name, self.mono):
                placed = self.fabric.predict(flow, None) if kind in NETWORK_NAKS else None
                if (name, port) in ports or (placed is not None and placed.pair in pairs):
                    want.append((at, name, port, kind, flow))
        evidence = self.monitor.evidence(self.mono)
        got = [(s.at_ns, s.switch, s.port, s.kind, s.flow) for s in evidence]
        assert sorted(got) == sorted(want)
        found = localise(evidence)
        assert found.flows == len(
            {f for _a, _n, _p, k, f in want if k in NETWORK_NAKS and f[0] != 0}
        )


TestRoceModel = RoceModel.TestCase
TestRoceModel.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
