"""The latency heat map as the admin API, Prometheus and the web view show it: the core's
cells and outlier records (controller/core/latency.py) as admin.proto messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from controller.core import latency
from railfabric.v1 import admin_pb2

BY: Final = {
    admin_pb2.LATENCY_BY_TOR: latency.By.TOR,
    admin_pb2.LATENCY_BY_RAIL: latency.By.RAIL,
    admin_pb2.LATENCY_BY_LINK: latency.By.LINK,
}
REASON: Final = {
    latency.Reason.LINK_LATENCY: admin_pb2.LATENCY_REASON_LINK_LATENCY,
    latency.Reason.LINK_LOSS: admin_pb2.LATENCY_REASON_LINK_LOSS,
    latency.Reason.PATHS: admin_pb2.LATENCY_REASON_PATHS,
}
# Outlier records in one answer (the first page's): the ranking's head is what is acted on.
MAX_OUTLIERS: Final = 100


def cell_message(c: latency.Cell) -> admin_pb2.LatencyCell:
    j = c.judged
    w = j.window
    return admin_pb2.LatencyCell(
        src=c.src,
        dst=c.dst,
        src_rail=c.src_rail,
        dst_rail=c.dst_rail,
        link=c.link,
        src_port=c.src_port,
        dst_port=c.dst_port,
        sent=w.sent,
        received=w.received,
        samples=w.samples,
        p50_ns=w.p50_ns or 0,
        p99_ns=w.p99_ns or 0,
        baseline_p99_ns=j.baseline_p99_ns or 0,
        baseline_p50_ns=j.baseline_p50_ns or 0,
        baseline_samples=j.baseline_samples,
        outlier=j.outlier,
    )


def outlier_message(o: latency.LinkOutlier) -> admin_pb2.LatencyOutlier:
    msg = admin_pb2.LatencyOutlier(
        link=o.link,
        a_switch=o.a[0],
        a_port=o.a[1],
        b_switch=o.b[0],
        b_port=o.b[1],
        reason=REASON[o.reason],
        bad_pairs=o.bad_pairs,
        tor_pairs=[admin_pb2.LatencyPair(src=s, dst=d) for s, d in o.tor_pairs],
        rail_pairs=[admin_pb2.LatencyRailPair(src=s, dst=d) for s, d in o.rail_pairs],
    )
    if o.judged is not None:
        w = o.judged.window
        msg.sent, msg.received, msg.samples = w.sent, w.received, w.samples
        msg.p50_ns, msg.p99_ns = w.p50_ns or 0, w.p99_ns or 0
        msg.baseline_p99_ns = o.judged.baseline_p99_ns or 0
        msg.baseline_p50_ns = o.judged.baseline_p50_ns or 0
        msg.baseline_samples = o.judged.baseline_samples
    return msg


def outlier_messages(found: Sequence[latency.LinkOutlier]) -> list[admin_pb2.LatencyOutlier]:
    return [outlier_message(o) for o in found[:MAX_OUTLIERS]]
