"""`railctl latency [--by tor|rail|link] [--window 10s] [--switch SW] [--rail N]`: the latency
heat map from the agents' probes (controller/core/latency.py): p50 RTT per ToR pair or rail
pair as a shaded grid, or per cable, then the cables the outliers point at. Exit 3 when there
is an outlier. JSON: the LatencyResponse, every page (docs/railctl-json.md)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from google.protobuf.message import Message

from controller.cli.admin_commands import PAGE_SIZE, every_page, run_query_with
from controller.cli.output import table
from railfabric.cli import duration_s
from railfabric.v1 import admin_pb2

if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub

BY: Final = {
    "tor": admin_pb2.LATENCY_BY_TOR,
    "rail": admin_pb2.LATENCY_BY_RAIL,
    "link": admin_pb2.LATENCY_BY_LINK,
}
# Past this many ToRs a grid is unreadable: the slowest cells are listed instead.
GRID_MAX: Final = 24
# Cells listed when they are not a grid (the rest: --json).
LIST_MAX: Final = 40
# The shades of a grid cell, lowest p50 to highest (log scale between the two).
SHADES: Final = " ░▒▓█"
REASONS: Final = {
    admin_pb2.LATENCY_REASON_LINK_LATENCY: "link latency",
    admin_pb2.LATENCY_REASON_LINK_LOSS: "link loss",
    admin_pb2.LATENCY_REASON_PATHS: "bad pairs' paths",
}


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=list(BY), default="rail", help="ToR pairs, rail pairs or cables")
    p.add_argument(
        "--window",
        type=duration_s,
        default=0.0,
        metavar="DURATION",
        help="over the last DURATION (e.g. 10s; at most the intent's latency.window_s); "
        "default: the intent's window",
    )
    p.add_argument("--switch", default="", help="only the cells about this switch (tor, link)")
    p.add_argument("--rail", type=int, default=None, help="only the cells about this rail")


async def _query(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.GetLatencyRequest(
        by=BY[a.by],
        window_ms=round(a.window * 1000),
        switch_name=a.switch,
        page_size=PAGE_SIZE,
    )
    if a.rail is not None:
        req.rail = a.rail
    return await every_page(stub.GetLatency, req)


def us(ns: int) -> str:
    """ns as microseconds, or "-" for none."""
    return f"{ns / 1000:.1f}" if ns else "-"


def _loss(c: admin_pb2.LatencyCell | admin_pb2.LatencyOutlier) -> str:
    return f"{(c.sent - c.received) / c.sent:.1%}" if c.sent else "-"


def shade(ns: int, low: int, high: int) -> str:
    """The shade of `ns` on a log scale from `low` to `high`."""
    if not ns or high <= low:
        return SHADES[0] if not ns else SHADES[1]
    frac = math.log(ns / low) / math.log(high / low)
    return SHADES[1 + min(len(SHADES) - 2, int(frac * (len(SHADES) - 1)))]


def _grid(r: admin_pb2.LatencyResponse, by_rail: bool) -> list[str]:
    def ends(c: admin_pb2.LatencyCell) -> tuple[str, str]:
        return (f"rail {c.src_rail}", f"rail {c.dst_rail}") if by_rail else (c.src, c.dst)

    cells = {ends(c): c for c in r.cells}
    if by_rail:
        axis: Sequence[str] = [f"rail {n}" for n in r.rails]
    else:
        axis = sorted({e for c in r.cells for e in ends(c)})
    p50s = [c.p50_ns for c in r.cells if c.p50_ns]
    low, high = (min(p50s), max(p50s)) if p50s else (0, 0)

    def show(src: str, dst: str) -> str:
        c = cells.get((src, dst))
        if c is None:
            return "."
        mark = "!" if c.outlier else ""
        return f"{shade(c.p50_ns, low, high)} {us(c.p50_ns)}{mark}"

    out = table(["", *axis], [[src, *(show(src, dst) for dst in axis)] for src in axis])
    if p50s:
        steps = len(SHADES) - 1
        bounds = [round(low * (high / low) ** (i / steps)) for i in range(1, steps + 1)]
        scale = "  ".join(f"{SHADES[i + 1]} <= {us(b)}" for i, b in enumerate(bounds))
        out.append(f"shade (p50 us): {scale}; ! outlier; . no probes")
    return out


def render(r: admin_pb2.LatencyResponse) -> list[str]:
    """The grid of p50 RTTs (µs, source down, destination across), or the cells, slowest
    first; what the window held; the outliers, ranked."""
    by_rail, by_link = r.by == admin_pb2.LATENCY_BY_RAIL, r.by == admin_pb2.LATENCY_BY_LINK
    what = "rail pair" if by_rail else "cable" if by_link else "ToR pair"
    out = [f"latency by {what}, p50 RTT in us (source down, destination across)"]
    axis = len(r.rails) if by_rail else len({e for c in r.cells for e in (c.src, c.dst)})
    if not by_link and axis <= GRID_MAX:
        out += _grid(r, by_rail)
    else:
        out[0] = f"latency by {what}, slowest p50 first (at most {LIST_MAX}; --json for all)"
        top = sorted(r.cells, key=lambda c: (not c.outlier, -c.p50_ns))[:LIST_MAX]
        name = (lambda c: c.link) if by_link else (lambda c: f"{c.src} -> {c.dst}")
        out += table(
            [what, "p50 us", "p99 us", "baseline p50 us", "loss", "samples", "outlier"],
            [
                [
                    name(c),
                    us(c.p50_ns),
                    us(c.p99_ns),
                    us(c.baseline_p50_ns),
                    _loss(c),
                    c.samples,
                    "yes" if c.outlier else "",
                ]
                for c in top
            ],
        )
    out.append(
        f"window: {r.window_ns / 1e9:.0f} s, {r.reports} reports, {r.results} probe results, "
        f"{r.samples} answered probes; baseline {r.baseline_ns / 1e9:.0f} s before it; "
        f"outlier: p50 > baseline p50 + {us(r.outlier_margin_ns)} us or loss >= "
        f"{r.loss_outlier:.0%}, with >= {r.min_samples} samples"
    )
    if r.outlier_count:
        out.append(f"outliers: {r.outlier_count} cables, most likely first")
        out += table(
            ["cable", "why", "p50 us", "baseline p50 us", "loss", "bad pairs", "e.g."],
            [
                [
                    o.link,
                    REASONS.get(o.reason, str(o.reason)),
                    us(o.p50_ns),
                    us(o.baseline_p50_ns),
                    _loss(o),
                    o.bad_pairs,
                    ", ".join(f"{p.src}->{p.dst}" for p in o.tor_pairs[:2]),
                ]
                for o in r.outliers
            ],
        )
    else:
        out.append("outliers: none")
    return out


def _exit(r: admin_pb2.LatencyResponse) -> int:
    return 3 if r.outlier_count or any(c.outlier for c in r.cells) else 0


def _run(args: argparse.Namespace) -> int:
    return run_query_with(_query, lambda reply, _a: render(reply), args, exit_code=_exit)


LATENCY_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "latency",
        "the latency heat map from the agents' probes, by ToR pair, rail pair or cable, and "
        "the cables the outliers point at (exit 3 when there is one)",
        _args,
        _run,
    ),
]
