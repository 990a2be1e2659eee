"""Prometheus metrics of the controller: sessions, generations, convergence, links, alarms,
the store.

prometheus_client serves scrapes from its own thread, and the core's state belongs to the
event loop. So a scrape never reads the live state: it asks the loop for a `Snapshot` (built
on the loop between two inputs, so it is consistent) and renders that. The convergence
histogram is observed on the loop as each converged event is emitted.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.core.links import LinkState
from controller.core.machine import DecisionCore
from railfabric.v1 import admin_pb2

SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Snapshot:
    sessions: int
    # switch -> (desired generation, applied generation, converged)
    switches: dict[str, tuple[int, int, bool]]
    links_by_state: dict[str, int]
    alarms_by_kind: dict[tuple[str, str], int]
    store_available: bool
    refused: dict[str, int]


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
        alarms_by_kind=dict(Counter((a.kind, a.severity) for a in core.alarms.active.values())),
        store_available=store_available,
        refused=dict(core.refused),
    )


class _Live(Collector):
    def __init__(self, take: Callable[[], Snapshot]) -> None:
        self.take = take

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.take()
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
            "railfabric_alarms", "Active alarms", value=sum(snap.alarms_by_kind.values())
        )
        by_kind = GaugeMetricFamily(
            "railfabric_alarms_by_kind",
            "Active alarms by kind and severity",
            labels=["kind", "severity"],
        )
        for (kind, severity), n in sorted(snap.alarms_by_kind.items()):
            by_kind.add_metric([kind, severity], n)
        yield by_kind
        yield GaugeMetricFamily(
            "railfabric_store_available",
            "1 when the controller's store takes writes",
            value=1.0 if snap.store_available else 0.0,
        )
        refused = GaugeMetricFamily(
            "railfabric_inputs_refused",
            "Agent messages the controller refused, by reason",
            labels=["reason"],
        )
        for reason, n in sorted(snap.refused.items()):
            refused.add_metric([reason], n)
        yield refused


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.convergence = Histogram(
            "railfabric_convergence_seconds",
            "Link event to the last Applied it caused",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )

    def watch(self, loop: asyncio.AbstractEventLoop, take: Callable[[], Snapshot]) -> None:
        """Scrapes take a snapshot on `loop` (the caller's thread is prometheus_client's)."""

        async def on_loop() -> Snapshot:
            return take()

        def from_thread() -> Snapshot:
            return asyncio.run_coroutine_threadsafe(on_loop(), loop).result(SCRAPE_TIMEOUT_S)

        self.registry.register(_Live(from_thread))

    def event(self, event: admin_pb2.Event) -> None:
        if event.type == admin_pb2.EVENT_KIND_CONVERGED:
            self.convergence.observe(event.convergence.event_to_applied_ns / 1e9)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
