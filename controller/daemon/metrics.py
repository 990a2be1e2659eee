"""Prometheus metrics of the controller: sessions, generations, convergence, links, alarms,
the store, refused inputs; process_* and railfabric_build_info (railfabric.metrics).

A scrape renders a `Snapshot` taken on the event loop between two inputs (railfabric.metrics
says why). The convergence histogram is observed on the loop as each converged event is
emitted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from controller.core import latency, matrix
from controller.core.links import LinkState
from controller.core.machine import DecisionCore
from controller.daemon.runner import now
from railfabric import metrics
from railfabric.tls import TlsFiles
from railfabric.v1 import admin_pb2, control_pb2


@dataclass(frozen=True)
class Snapshot:
    sessions: int
    # switch -> (desired generation, applied generation, converged)
    switches: dict[str, tuple[int, int, bool]]
    links_by_state: dict[str, int]
    # (kind, severity) -> active alarms
    alarms: dict[tuple[str, str], int]
    store_available: bool
    refused: dict[str, int]
    # Links an operator drained.
    drained: int = 0
    # The traffic matrix by rail, (source rail, destination rail) -> bytes/s, over each ToR's
    # last report period; only rails that carried traffic.
    matrix_by_rail: dict[tuple[int, int], float] = field(default_factory=dict)
    # RoCE NAKs/s by (switch, port, kind) and CNPs/s by (switch, port), every traffic class,
    # between each switch's last two reports: only nonzero rates (on a 100k-GPU fabric every
    # port of every kind would be 1.2 M series), and the links localisation suspects.
    roce_naks: dict[tuple[str, int, str], float] = field(default_factory=dict)
    roce_cnps: dict[tuple[str, int], float] = field(default_factory=dict)
    roce_suspects: int = 0
    # The latency heat map by rail pair over the intent's window: (source rail, destination
    # rail) -> (p50 s, p99 s, answered probes, loss ratio); only rail pairs with probes.
    latency_rails: dict[tuple[int, int], tuple[float, float, int, float]] = field(
        default_factory=dict
    )
    # The first MAX_OUTLIER_SERIES outlier cables, ranked: (link, reason, p50 s, bad pairs);
    # and how many there are.
    latency_outliers: list[tuple[str, str, float, int]] = field(default_factory=list)
    latency_outlier_count: int = 0


def snapshot(core: DecisionCore, sessions: int, store_available: bool) -> Snapshot:
    """Copy what metrics show; called on the event loop."""
    states = Counter(core.tracker.state(link.key).value for link in core.links())
    return Snapshot(
        sessions=sessions,
        switches={
            v.name: (v.state.generation, v.applied_generation, v.converged)
            for v in core.views.values()
        },
        # Every state, so a gauge reads 0 rather than vanishing.
        links_by_state={s.value: states.get(s.value, 0) for s in LinkState},
        alarms=dict(Counter((a.kind, a.severity) for a in core.alarms.active.values())),
        store_available=store_available,
        refused=dict(core.refused),
        drained=len(core.drains),
        matrix_by_rail=_matrix_by_rail(core),
        **_roce(core),
        **_latency(core),
    )


# Outlier cables with a series of their own: the head of the ranking, a bounded series count.
MAX_OUTLIER_SERIES = 100


def _latency(core: DecisionCore) -> dict[str, Any]:
    at = now()
    heat, _window_ns = core.latency_heat(latency.By.RAIL, at)
    rails = {
        (c.src_rail, c.dst_rail): (
            (c.judged.window.p50_ns or 0) / 1e9,
            (c.judged.window.p99_ns or 0) / 1e9,
            c.judged.window.samples,
            c.judged.window.loss,
        )
        for c in heat.cells
    }
    found = core.latency_outliers(at)
    outliers = [
        (
            o.link,
            o.reason.value,
            ((o.judged.window.p50_ns or 0) / 1e9) if o.judged is not None else 0.0,
            o.bad_pairs,
        )
        for o in found[:MAX_OUTLIER_SERIES]
    ]
    return {
        "latency_rails": rails,
        "latency_outliers": outliers,
        "latency_outlier_count": len(found),
    }


# The NAK kinds as the metric's `kind` label.
_NAK_LABEL: dict[int, str] = {
    control_pb2.ROCE_KIND_NAK_PSN_SEQUENCE: "psn_sequence",
    control_pb2.ROCE_KIND_NAK_OTHER: "other",
    control_pb2.ROCE_KIND_NAK_RNR: "rnr",
}


def _roce(core: DecisionCore) -> dict[str, Any]:
    naks: dict[tuple[str, int, str], float] = {}
    cnps: dict[tuple[str, int], float] = {}
    for name, sw in core.roce.switches.items():
        for (port, _tc, kind), rate in sw.rates_by_key().items():
            if kind == control_pb2.ROCE_KIND_CNP:
                cnps[(name, port)] = cnps.get((name, port), 0.0) + rate
            elif (label := _NAK_LABEL.get(kind)) is not None:
                key = (name, port, label)
                naks[key] = naks.get(key, 0.0) + rate
    return {
        "roce_naks": naks,
        "roce_cnps": cnps,
        "roce_suspects": len(core.roce.suspects()),
    }


def _matrix_by_rail(core: DecisionCore) -> dict[tuple[int, int], float]:
    rails = matrix.rail_matrix(core, 0)
    return {k: octets for k, (_, octets) in rails.cells.items()}


def render(snap: Snapshot) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "railfabric_agent_sessions", "Connected agent sessions", value=snap.sessions
    )
    desired = GaugeMetricFamily(
        "railfabric_switch_generation",
        "Desired and applied generation per switch",
        labels=["switch", "kind"],
    )
    converged = GaugeMetricFamily(
        "railfabric_switch_converged",
        "1 when the switch applied its desired state",
        labels=["switch"],
    )
    for name, (want, have, ok) in snap.switches.items():
        desired.add_metric([name, "desired"], want)
        desired.add_metric([name, "applied"], have)
        converged.add_metric([name], 1.0 if ok else 0.0)
    yield desired
    yield converged
    links = GaugeMetricFamily("railfabric_links", "Links by state", labels=["state"])
    for state, n in sorted(snap.links_by_state.items()):
        links.add_metric([state], n)
    yield links
    yield GaugeMetricFamily(
        "railfabric_drained_links",
        "Links an operator drained (routes avoid them whatever their state)",
        value=snap.drained,
    )
    alarms = GaugeMetricFamily(
        "railfabric_alarms",
        "Active alarms by kind and severity (0 once a kind seen since start-up cleared)",
        labels=["kind", "severity"],
    )
    for (kind, severity), n in sorted(snap.alarms.items()):
        alarms.add_metric([kind, severity], n)
    yield alarms
    yield GaugeMetricFamily(
        "railfabric_store_available",
        "1 when the controller's store takes writes",
        value=1.0 if snap.store_available else 0.0,
    )
    refused = CounterMetricFamily(
        "railfabric_inputs_refused",
        "Agent messages the controller refused since start-up, by reason",
        labels=["reason"],
    )
    for reason, n in sorted(snap.refused.items()):
        refused.add_metric([reason], n)
    yield refused
    traffic = GaugeMetricFamily(
        "railfabric_traffic_matrix_bytes_per_second",
        "Traffic between rails the ToRs counted at their host ports, over each ToR's last "
        "report period (by ToR: railctl matrix)",
        labels=["src_rail", "dst_rail"],
    )
    for (src, dst), octets in sorted(snap.matrix_by_rail.items()):
        traffic.add_metric([str(src), str(dst)], octets)
    yield traffic
    naks = GaugeMetricFamily(
        "railfabric_roce_naks_per_second",
        "RoCEv2 NAKs arriving on a port by syndrome, every traffic class, over its switch's "
        "last report period; only ports with NAKs (railctl roce)",
        labels=["switch", "port", "kind"],
    )
    for (name, port, kind), rate in sorted(snap.roce_naks.items()):
        naks.add_metric([name, str(port), kind], rate)
    yield naks
    cnps = GaugeMetricFamily(
        "railfabric_roce_cnps_per_second",
        "RoCEv2 CNPs arriving on a port, every traffic class, over its switch's last report "
        "period; only ports with CNPs (railctl ecn)",
        labels=["switch", "port"],
    )
    for (name, port), rate in sorted(snap.roce_cnps.items()):
        cnps.add_metric([name, str(port)], rate)
    yield cnps
    yield GaugeMetricFamily(
        "railfabric_roce_suspect_links",
        "Links the sampled NAK-ing flows localise RoCE retransmissions to (each has a "
        "roce_retransmission alarm while NAKs are above the threshold)",
        value=snap.roce_suspects,
    )
    yield from _render_latency(snap)


def _render_latency(snap: Snapshot) -> Iterator[Metric]:
    p50 = GaugeMetricFamily(
        "railfabric_latency_rail_p50_seconds",
        "Median RTT of the mesh probes between ToRs of two rails over the heat map's window "
        "(railctl latency --by rail)",
        labels=["src_rail", "dst_rail"],
    )
    p99 = GaugeMetricFamily(
        "railfabric_latency_rail_p99_seconds",
        "99th percentile RTT of the mesh probes between ToRs of two rails over the window",
        labels=["src_rail", "dst_rail"],
    )
    answered = GaugeMetricFamily(
        "railfabric_latency_rail_samples",
        "Answered mesh probes between ToRs of two rails over the window",
        labels=["src_rail", "dst_rail"],
    )
    loss = GaugeMetricFamily(
        "railfabric_latency_rail_loss_ratio",
        "Mesh probes between ToRs of two rails lost over the window, of those sent",
        labels=["src_rail", "dst_rail"],
    )
    for (src, dst), (q50, q99, n, lost) in sorted(snap.latency_rails.items()):
        labels = [str(src), str(dst)]
        p50.add_metric(labels, q50)
        p99.add_metric(labels, q99)
        answered.add_metric(labels, n)
        loss.add_metric(labels, lost)
    yield from (p50, p99, answered, loss)
    yield GaugeMetricFamily(
        "railfabric_latency_outlier_links",
        "Cables the latency probes point at (railctl latency lists them, ranked)",
        value=snap.latency_outlier_count,
    )
    rank = GaugeMetricFamily(
        "railfabric_latency_outlier_rank",
        f"Rank of an outlier cable (1: the most likely), the first {MAX_OUTLIER_SERIES} only; "
        "reason: link_latency, link_loss (its own link probes) or paths (bad ToR pairs' "
        "probes crossed it)",
        labels=["link", "reason"],
    )
    slow = GaugeMetricFamily(
        "railfabric_latency_outlier_p50_seconds",
        "Median RTT of an outlier cable's own link probes over the window (0: none)",
        labels=["link"],
    )
    pairs = GaugeMetricFamily(
        "railfabric_latency_outlier_bad_pairs",
        "Bad ToR pairs whose mesh probes crossed an outlier cable",
        labels=["link"],
    )
    for i, (link, reason, q50, bad) in enumerate(snap.latency_outliers, start=1):
        rank.add_metric([link, reason], i)
        slow.add_metric([link], q50)
        pairs.add_metric([link], bad)
    yield from (rank, slow, pairs)


class Metrics:
    def __init__(self, *, insecure: bool = False) -> None:
        self.registry = metrics.registry(insecure=insecure)
        self.convergence = Histogram(
            "railfabric_convergence_seconds",
            "Link event to the last Applied it caused",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        # Every (kind, severity) seen since start-up, so a cleared kind reads 0.
        self._alarm_kinds: set[tuple[str, str]] = set()

    def watch(self, loop: asyncio.AbstractEventLoop, take: Callable[[], Snapshot]) -> None:
        """Scrapes take a snapshot on `loop` (the caller's thread is prometheus_client's)."""

        def with_cleared_alarms() -> Snapshot:  # on the loop, so no lock
            snap = take()
            self._alarm_kinds.update(snap.alarms)
            snap.alarms.update({k: 0 for k in self._alarm_kinds if k not in snap.alarms})
            return snap

        self.registry.register(metrics.Scraped(loop, with_cleared_alarms, render))

    def event(self, event: admin_pb2.Event) -> None:
        if event.type == admin_pb2.EVENT_KIND_CONVERGED:
            self.convergence.observe(event.convergence.event_to_applied_ns / 1e9)

    def serve(self, address: str, tls: TlsFiles | None = None) -> metrics.MetricsServer:
        """Serve on `address`; railfabric.metrics.MetricsError says why it cannot."""
        return metrics.serve(self.registry, address, tls)
