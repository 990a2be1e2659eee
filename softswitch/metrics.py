"""Prometheus metrics of the softswitch (`--metrics HOST:PORT`): the pipeline's drops by reason
and P4 counters, the traffic manager's counters and queues, frames the kernel lost; process_*
and railfabric_build_info (railfabric.metrics).

The data plane, the traffic manager and the P4Runtime server all run on the one asyncio loop,
so a scrape renders a `Snapshot` taken on it between two callbacks (railfabric.metrics). The
traffic manager's counts are cumulative since start; the pipeline's (its drops by reason and
its P4 counters) start again with each new pipeline, and a P4 counter also when a P4Runtime
client writes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from railfabric import metrics
from softswitch.dataplane import DataPlane
from softswitch.egress import TmEgress
from softswitch.schema import CounterUnit
from softswitch.switch import Switch
from softswitch.tm import PortCounters

# The traffic manager's drop counts by the reason the agent reports for them
# (control.proto DropReason, lower case, without the prefix).
TM_DROPS = {
    "queue_full": ("tail_drops", "tail_drop_bytes"),
    "headroom_full": ("headroom_drops", "headroom_drop_bytes"),
    "pfc_watchdog": ("storm_drops", None),
}
# PortCounters field -> (counter name without _total, help), labelled by port.
TM_COUNTERS = {
    "tx_packets": ("railfabric_softswitch_tm_tx_packets", "Frames the traffic manager sent"),
    "tx_bytes": ("railfabric_softswitch_tm_tx_bytes", "Bytes the traffic manager sent"),
    "ecn_marks": ("railfabric_softswitch_tm_ecn_marks", "Frames marked CE at enqueue"),
    "pause_tx": ("railfabric_softswitch_tm_pfc_pause_tx", "PFC PAUSE frames sent (and resumes)"),
    "pause_rx": ("railfabric_softswitch_tm_pfc_pause_rx", "Valid PFC PAUSE frames received"),
    "pause_rx_malformed": (
        "railfabric_softswitch_tm_pfc_pause_rx_malformed",
        "MAC control frames received that are not a valid PFC PAUSE",
    ),
    "storms": (
        "railfabric_softswitch_tm_pfc_watchdog_storms",
        "PFC storms the watchdog declared on the port's queues",
    ),
}
# PortCounters per-class field -> (gauge name, help, the class label).
TM_CLASS_GAUGES = {
    "queue_bytes": ("railfabric_softswitch_tm_queue_bytes", "Bytes queued", "tc"),
    "queue_packets": ("railfabric_softswitch_tm_queue_packets", "Frames queued", "tc"),
    "ingress_bytes": (
        "railfabric_softswitch_tm_pfc_ingress_bytes",
        "Bytes queued anywhere that came in on the port with the priority (PFC occupancy)",
        "priority",
    ),
    "paused": ("railfabric_softswitch_tm_paused", "1 while a received PAUSE holds the queue", "tc"),
    "stormed": (
        "railfabric_softswitch_tm_stormed",
        "1 while the PFC watchdog declares the queue stormed",
        "tc",
    ),
}


@dataclass(frozen=True)
class P4Count:
    counter: str
    port: int
    packets: int | None  # None: the counter does not count them
    octets: int | None


@dataclass(frozen=True)
class Snapshot:
    pipeline_loaded: bool
    commits: int
    rx_frames: int
    internal_errors: int
    pipeline_drops: dict[str, int]
    p4_counts: list[P4Count]
    carrier: dict[int, bool]
    tm: dict[int, PortCounters]
    # port -> (frames lost on a full receive queue, sends the kernel refused)
    kernel: dict[int, tuple[int, int]]


def snapshot(switch: Switch, dataplane: DataPlane, egress: TmEgress) -> Snapshot:
    """Copy what metrics show; called on the event loop."""
    # As a P4 counter read does: fold the TM's counts in, read the kernel's (and log them).
    egress.sync_counters()
    pipeline = switch.pipeline
    p4_counts: list[P4Count] = []
    if pipeline is not None:
        indexes = sorted({*switch.ports, switch.cpu_port})
        for info in pipeline.schema.counters.values():
            packets, octets = pipeline.counters[info.id]
            for i in indexes:
                if i < info.size:
                    p4_counts.append(
                        P4Count(
                            info.name,
                            i,
                            None if info.unit is CounterUnit.BYTES else packets[i],
                            None if info.unit is CounterUnit.PACKETS else octets[i],
                        )
                    )
    return Snapshot(
        pipeline_loaded=pipeline is not None,
        commits=switch.commits,
        rx_frames=dataplane.rx_frames,
        internal_errors=dataplane.internal_errors,
        pipeline_drops={} if pipeline is None else {r.value: n for r, n in pipeline.drops.items()},
        p4_counts=p4_counts,
        carrier=dict(switch.carrier),
        tm=egress.tm.counters(),
        kernel={n: (p.rx_dropped, p.tx_errors) for n, p in dataplane.ports.items()},
    )


def render(snap: Snapshot) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "railfabric_softswitch_pipeline_loaded",
        "1 once a pipeline config is committed",
        value=1.0 if snap.pipeline_loaded else 0.0,
    )
    for name, help_text, count in (
        (
            "railfabric_softswitch_pipeline_commits",
            "Pipeline configs committed with new, empty tables",
            snap.commits,
        ),
        ("railfabric_softswitch_rx_frames", "Frames read from the ports", snap.rx_frames),
        (
            "railfabric_softswitch_internal_errors",
            "Frames dropped by an error inside the switch model",
            snap.internal_errors,
        ),
    ):
        yield CounterMetricFamily(name, help_text, value=count)
    drops = CounterMetricFamily(
        "railfabric_softswitch_pipeline_drops",
        "Frames the pipeline dropped, by reason (since the pipeline was committed)",
        labels=["reason"],
    )
    for reason, n in sorted(snap.pipeline_drops.items()):
        drops.add_metric([reason], n)
    yield drops
    yield from _p4_counters(snap)
    carrier = GaugeMetricFamily(
        "railfabric_softswitch_port_carrier", "1 while the port has carrier", labels=["port"]
    )
    for port, up in sorted(snap.carrier.items()):
        carrier.add_metric([str(port)], 1.0 if up else 0.0)
    yield carrier
    yield from _tm(snap)
    kernel = CounterMetricFamily(
        "railfabric_softswitch_kernel_drops",
        "Frames the kernel lost on the port: rx on a full receive queue, tx sends it refused",
        labels=["port", "direction"],
    )
    for port, (rx, tx) in sorted(snap.kernel.items()):
        kernel.add_metric([str(port), "rx"], rx)
        kernel.add_metric([str(port), "tx"], tx)
    yield kernel


def _p4_counters(snap: Snapshot) -> Iterator[Metric]:
    packets = CounterMetricFamily(
        "railfabric_softswitch_p4_packets",
        "The pipeline's P4 counters, packets, by counter and port (index)",
        labels=["counter", "port"],
    )
    octets = CounterMetricFamily(
        "railfabric_softswitch_p4_bytes",
        "The pipeline's P4 counters, bytes, by counter and port (index)",
        labels=["counter", "port"],
    )
    for c in snap.p4_counts:
        if c.packets is not None:
            packets.add_metric([c.counter, str(c.port)], c.packets)
        if c.octets is not None:
            octets.add_metric([c.counter, str(c.port)], c.octets)
    yield packets
    yield octets


def _tm(snap: Snapshot) -> Iterator[Metric]:
    counters = {
        field: CounterMetricFamily(name, help_text, labels=["port"])
        for field, (name, help_text) in TM_COUNTERS.items()
    }
    drops = CounterMetricFamily(
        "railfabric_softswitch_tm_drops",
        "Frames the traffic manager dropped, by reason (headroom_full on the ingress port, "
        "the others on the egress port)",
        labels=["port", "reason"],
    )
    dropped_bytes = CounterMetricFamily(
        "railfabric_softswitch_tm_dropped_bytes",
        "Bytes the traffic manager dropped, by reason (pfc_watchdog drops are not measured)",
        labels=["port", "reason"],
    )
    gauges = {
        field: GaugeMetricFamily(name, help_text, labels=["port", label])
        for field, (name, help_text, label) in TM_CLASS_GAUGES.items()
    }
    for port, c in sorted(snap.tm.items()):
        number = str(port)
        for field, counter in counters.items():
            counter.add_metric([number], getattr(c, field))
        for reason, (frames_field, bytes_field) in TM_DROPS.items():
            drops.add_metric([number, reason], getattr(c, frames_field))
            if bytes_field is not None:
                dropped_bytes.add_metric([number, reason], getattr(c, bytes_field))
        for field, gauge in gauges.items():
            for tc, value in enumerate(getattr(c, field)):
                gauge.add_metric([number, str(tc)], float(value))
    yield from counters.values()
    yield drops
    yield dropped_bytes
    yield from gauges.values()


def collector(
    loop: asyncio.AbstractEventLoop, switch: Switch, dataplane: DataPlane, egress: TmEgress
) -> metrics.Scraped[Snapshot]:
    """The softswitch's own metrics, snapshotted on `loop` at each scrape."""
    return metrics.Scraped(loop, lambda: snapshot(switch, dataplane, egress), render)
