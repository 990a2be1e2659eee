"""Prometheus metrics of the controller: sessions, generations, convergence, links, alarms.

Gauges are read from the live state at scrape time (a collector), so nothing has to remember
to update them; the convergence histogram is observed as each event converges. The HTTP
endpoint runs in prometheus_client's own thread, so the collector copies what it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from controller.daemon.fabric_state import ConvergenceResult, FabricState
    from controller.daemon.service import Sessions


class _Live(Collector):
    def __init__(self, fabric: FabricState, sessions: Sessions) -> None:
        self.fabric, self.sessions = fabric, sessions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        views = list(self.fabric.views.values())
        yield GaugeMetricFamily(
            "railfabric_agent_sessions",
            "Connected agent sessions",
            value=len(list(self.sessions.by_switch)),
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
        for v in views:
            desired.add_metric([v.name, "desired"], v.state.generation)
            desired.add_metric([v.name, "applied"], v.applied_generation)
            converged.add_metric([v.name], 1.0 if v.converged else 0.0)
        yield desired
        yield converged
        links = GaugeMetricFamily("railfabric_links", "Links by state", labels=["state"])
        tracker = self.fabric.tracker
        states = Counter(tracker.state(link.key).value for link in self.fabric.planner.links())
        for state, n in sorted(states.items()):
            links.add_metric([state], n)
        yield links
        yield GaugeMetricFamily(
            "railfabric_alarms", "Active alarms", value=len(self.fabric.alarm_ids)
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.convergence = Histogram(
            "railfabric_convergence_seconds",
            "Link event to the last Applied it caused",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )

    def watch(self, fabric: FabricState, sessions: Sessions) -> None:
        self.registry.register(_Live(fabric, sessions))

    def converged(self, result: ConvergenceResult) -> None:
        self.convergence.observe(result.event_to_applied_ms / 1e3)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
