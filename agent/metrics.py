"""Prometheus metrics of the agent (`--metrics HOST:PORT`): the per-port counters of its last
counter read, target health, the controller session, local-repair latency; process_* and
railfabric_build_info (railfabric.metrics).

Every series carries `switch`; per-port ones also `port` and `peer`, the far end the
controller's state names for the port ("spine-1:3" for a switch port, "srv-b1-s1/nic1" for a
host NIC, "" when it names none). A scrape renders a `Snapshot` taken on the event loop; the
counters are those of the last read (every --counters-interval), whose time is
railfabric_agent_counters_timestamp_seconds. The local-repair histogram is observed on the loop
as each repair is committed, so it counts every repair once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.probes import ProbeStats
from agent.writer import RepairRecord
from railfabric import metrics
from railfabric.fabric_counters import roce_cell
from railfabric.tls import TlsFiles
from railfabric.v1 import control_pb2, state_pb2

if TYPE_CHECKING:
    from agent.main import Agent

PORT_LABELS = ["switch", "port", "peer"]
# PortCounters field -> (counter name without _total, help).
PORT_COUNTERS = {
    "rx_packets": ("railfabric_port_rx_packets", "Frames received on the port"),
    "rx_bytes": ("railfabric_port_rx_bytes", "Bytes received on the port"),
    "tx_packets": ("railfabric_port_tx_packets", "Frames sent on the port"),
    "tx_bytes": ("railfabric_port_tx_bytes", "Bytes sent on the port"),
    "drops": (
        "railfabric_port_drops",
        "Frames dropped, every reason (pipeline drops on the ingress port, traffic-manager "
        "drops on the egress port)",
    ),
    "ecn_marks": ("railfabric_port_ecn_marks", "Frames marked CE leaving the port"),
    "pfc_pause_tx": ("railfabric_port_pfc_pause_tx", "PFC PAUSE frames sent on the port"),
    "pfc_pause_rx": ("railfabric_port_pfc_pause_rx", "PFC PAUSE frames received on the port"),
    "pfc_watchdog_storms": (
        "railfabric_port_pfc_watchdog_storms",
        "PFC storms the watchdog declared on the port's queues",
    ),
}
QueueField = Literal[
    "queue_depth_bytes", "queue_watermark_bytes", "queue_depth_packets", "queue_watermark_packets"
]
# Optional PortCounters field -> (gauge name, help); exported only where the target reports it.
QUEUE_GAUGES: dict[QueueField, tuple[str, str]] = {
    "queue_depth_bytes": (
        "railfabric_port_queue_depth_bytes",
        "Egress queue occupancy over the port's traffic classes at the last read",
    ),
    "queue_watermark_bytes": (
        "railfabric_port_queue_watermark_bytes",
        "Highest egress queue occupancy between the previous counter read and the last",
    ),
    "queue_depth_packets": (
        "railfabric_port_queue_depth_packets",
        "Frames queued for the port over its traffic classes at the last read",
    ),
    "queue_watermark_packets": (
        "railfabric_port_queue_watermark_packets",
        "Most frames queued for the port between the previous counter read and the last",
    ),
}
# Seconds: a local repair is one Write, well under a millisecond to a few hundred.
REPAIR_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def peer_label(neighbor: state_pb2.Neighbor) -> str:
    if neighbor.kind == state_pb2.PEER_KIND_SWITCH:
        return f"{neighbor.peer_name}:{neighbor.peer_port}"
    return neighbor.peer_name


def roce_kind_label(kind: int) -> str:
    """railfabric.v1.RoceKind value -> 'nak_psn_sequence' (the enum name, lower case)."""
    return control_pb2.RoceKind.Name(kind).removeprefix("ROCE_KIND_").lower()  # type: ignore[arg-type]


def drop_reason_label(reason: int) -> str:
    """DROP_REASON_QUEUE_FULL -> "queue_full" (a number this build does not know: as is)."""
    try:
        name = control_pb2.DropReason.Name(reason)  # type: ignore[arg-type]
    except ValueError:
        return str(reason)
    return name.removeprefix("DROP_REASON_").lower()


@dataclass(frozen=True)
class Snapshot:
    switch: str
    counters: control_pb2.Counters | None
    peers: dict[int, str]
    health: control_pb2.TargetHealth
    applied_generation: int
    connected: bool
    connections: int
    dropped: int
    nak_samples: int
    nak_samples_dropped: int
    probes: ProbeStats


def snapshot(agent: Agent) -> Snapshot:
    """Copy what metrics show; called on the event loop."""
    counters = None
    if agent.last_counters is not None:
        counters = control_pb2.Counters()
        counters.CopyFrom(agent.last_counters)
    health = control_pb2.TargetHealth()
    health.CopyFrom(agent.health)
    held = agent.writer.held
    return Snapshot(
        switch=agent.switch,
        counters=counters,
        peers={} if held is None else {n.port: peer_label(n) for n in held.neighbors},
        health=health,
        applied_generation=agent.writer.applied_generation,
        connected=agent.session.connected.is_set(),
        connections=agent.session.connections,
        dropped=agent.session.dropped,
        nak_samples=agent.nak_samples.received,
        nak_samples_dropped=agent.nak_samples.dropped_total,
        probes=dataclasses.replace(agent.prober.stats),
    )


def render(snap: Snapshot) -> Iterator[Metric]:
    switch = [snap.switch]
    yield from _ports(snap)
    health = snap.health
    for name, help_text, value in (
        (
            "railfabric_agent_target_reachable",
            "1 when the P4Runtime stream is up",
            health.reachable,
        ),
        ("railfabric_agent_target_primary", "1 when this agent's writes are taken", health.primary),
        (
            "railfabric_agent_target_read_back_timestamp_seconds",
            "Unix time of the last read-back of the target that succeeded (0: never)",
            health.last_read_back_wall_ns / 1e9,
        ),
        (
            "railfabric_agent_applied_generation",
            "Generation of the controller's state the agent applied (0: none)",
            snap.applied_generation,
        ),
        (
            "railfabric_agent_controller_connected",
            "1 while the session with the controller is open",
            snap.connected,
        ),
    ):
        gauge = GaugeMetricFamily(name, help_text, labels=["switch"])
        gauge.add_metric(switch, float(value))
        yield gauge
    differences = GaugeMetricFamily(
        "railfabric_agent_target_read_back_differences",
        "Entries the last read-back found differing from what the agent installed, by kind",
        labels=["switch", "kind"],
    )
    for kind in ("missing", "unexpected", "modified"):
        differences.add_metric([snap.switch, kind], getattr(health, kind))
    yield differences
    for name, help_text, count in (
        (
            "railfabric_agent_controller_connections",
            "Sessions opened with the controller",
            snap.connections,
        ),
        (
            "railfabric_agent_controller_dropped_messages",
            "Messages for the controller dropped because the session's outbox was full",
            snap.dropped,
        ),
        (
            "railfabric_agent_nak_samples",
            "RoCEv2 NAKs the target sampled to the agent (fabric.p4 nak_sampling)",
            snap.nak_samples,
        ),
        (
            "railfabric_agent_nak_samples_dropped",
            "Sampled NAKs not reported: more than a counter report carries (256)",
            snap.nak_samples_dropped,
        ),
    ):
        counter = CounterMetricFamily(name, help_text, labels=["switch"])
        counter.add_metric(switch, count)
        yield counter
    probes = CounterMetricFamily(
        "railfabric_agent_probes",
        "Latency probes by outcome: sent, answered, lost (timed out), skipped (too many in "
        "flight), stray (an answer matching nothing sent, a probe from a server port, or a "
        "request not for this switch; the data plane answers the others' probes)",
        labels=["switch", "outcome"],
    )
    for outcome in ("sent", "answered", "lost", "skipped", "stray"):
        probes.add_metric([snap.switch, outcome], getattr(snap.probes, outcome))
    yield probes


def _ports(snap: Snapshot) -> Iterator[Metric]:
    counters = {
        field: CounterMetricFamily(name, help_text, labels=PORT_LABELS)
        for field, (name, help_text) in PORT_COUNTERS.items()
    }
    by_reason = CounterMetricFamily(
        "railfabric_port_drops_by_reason",
        "Frames dropped, by reason; a reason the target cannot count is absent (so the sum "
        "can be below railfabric_port_drops_total)",
        labels=[*PORT_LABELS, "reason"],
    )
    roce = CounterMetricFamily(
        "railfabric_port_roce_packets",
        "RoCEv2 packets arrived, by traffic class and kind (data, ack, nak_psn_sequence, "
        "nak_rnr, nak_other, cnp); a class and kind not listed counted nothing",
        labels=[*PORT_LABELS, "traffic_class", "kind"],
    )
    gauges = {
        queue_field: GaugeMetricFamily(name, help_text, labels=PORT_LABELS)
        for queue_field, (name, help_text) in QUEUE_GAUGES.items()
    }
    read_at = GaugeMetricFamily(
        "railfabric_agent_counters_timestamp_seconds",
        "Unix time of the counter read the port metrics show",
        labels=["switch"],
    )
    if snap.counters is not None:
        read_at.add_metric([snap.switch], snap.counters.wall_ns / 1e9)
        for port in snap.counters.ports:
            labels = [snap.switch, str(port.port), snap.peers.get(port.port, "")]
            for field, counter in counters.items():
                counter.add_metric(labels, getattr(port, field))
            for drop in port.drops_by_reason:
                by_reason.add_metric([*labels, drop_reason_label(drop.reason)], drop.packets)
            for queue_field, gauge in gauges.items():
                if port.HasField(queue_field):
                    gauge.add_metric(labels, getattr(port, queue_field))
        c = snap.counters
        for cell, packets in zip(c.roce_cells, c.roce_packets, strict=True):
            port_number, tc, kind = roce_cell(cell)
            labels = [snap.switch, str(port_number), snap.peers.get(port_number, "")]
            roce.add_metric([*labels, str(tc), roce_kind_label(kind)], packets)
    yield read_at
    yield from counters.values()
    yield by_reason
    yield roce
    yield from gauges.values()


class AgentMetrics:
    def __init__(self, switch: str, *, insecure: bool = False) -> None:
        self.registry = metrics.registry(insecure=insecure)
        self._repairs = Histogram(
            "railfabric_agent_local_repair_seconds",
            "Carrier loss seen to the local repair's Write committed (monotonic clock)",
            labelnames=["switch"],
            buckets=REPAIR_BUCKETS,
            registry=self.registry,
        ).labels(switch)

    def repaired(self, record: RepairRecord) -> None:
        """The writer committed a local repair (on the loop, once per repair)."""
        self._repairs.observe(record.latency_ns / 1e9)

    def watch(self, loop: asyncio.AbstractEventLoop, agent: Agent) -> None:
        """Scrapes snapshot `agent` on `loop` (the caller's thread is prometheus_client's)."""
        self.registry.register(metrics.Scraped(loop, lambda: snapshot(agent), render))

    def serve(self, address: str, tls: TlsFiles | None = None) -> metrics.MetricsServer:
        """Serve on `address`; railfabric.metrics.MetricsError says why it cannot."""
        return metrics.serve(self.registry, address, tls)
