"""The traffic matrix, checked against a known pattern: one flow at a fixed rate from a NIC of
the first ToR to a NIC of a ToR in another block and another rail (srv-b1-s1/nic1 ->
srv-b2-s2/nic2 on lab-2rail), nothing else sent. The controller's ToR x ToR matrix
(GetTrafficMatrix, over each ToR's last reports, all taken while the flow ran) must show it in
that cell within MATCH of what arrived on the source ToR's port over the same two reports (its
rx counter: on a busy machine less than the rate asked), and every other cell below STRAY of
it; the rail x rail matrix the same in its cell. The sample: datagrams sent, the window each
source ToR was measured over."""

from __future__ import annotations

import time

import grpc

from controller.fabric import Nic
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget, flow, nics_on
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

NAME = "matrix"
MATCH = 0.05  # the flow's cell, within this share of the rate sent
STRAY = 0.01  # any other cell, below this share of it
RATE_PPS = 500
SIZE = 200  # UDP payload bytes: the frame is 14 + 20 + 8 + SIZE bytes at the ToR
FRAME = 14 + 20 + 8 + SIZE


def _pair(lab: Lab) -> tuple[Nic, Nic]:
    """A NIC of the first ToR, and a NIC on another rail under a ToR of another block."""
    tors = [s for s in lab.fabric.switches if s.prefix is not None]
    src = nics_on(lab, tors[0].name)[0]
    for tor in tors[1:]:
        if tor.rail != tors[0].rail and (tor.pod, tor.block) != (tors[0].pod, tors[0].block):
            return src, nics_on(lab, tor.name)[0]
    raise LabError(f"fabric {lab.fabric.name}: no ToR of another rail and block")


def _matrix(lab: Lab, by: admin_pb2.MatrixBy.ValueType) -> admin_pb2.TrafficMatrixResponse:
    # Each ToR's last two reports: the window its port counters' rates cover too.
    request = admin_pb2.GetTrafficMatrixRequest(by=by, window_ms=0)
    reply: admin_pb2.TrafficMatrixResponse = lab.admin.GetTrafficMatrix(request, timeout=10)
    return reply


def run(lab: Lab, budget: Budget) -> Result:
    src, dst = _pair(lab)
    tor_of = {n.full_name: n.switch for n in lab.fabric.nics}
    rail_of = {s.name: s.rail for s in lab.fabric.switches if s.rail is not None}
    src_tor, dst_tor = tor_of[src.full_name], tor_of[dst.full_name]
    tors = [s.name for s in lab.fabric.switches if s.prefix is not None]
    sender = lab.start_sender(
        src.host, "matrix-send", [flow(0, src, dst, 40000)], rate_pps=RATE_PPS, duration_s=3600,
        size=SIZE,
    )  # fmt: skip
    started_ns = time.time_ns()

    port = src.port  # the source ToR's port the flow arrives on

    def inside() -> tuple[admin_pb2.TrafficMatrixResponse, float] | None:
        """The matrix once every ToR's window lies inside the flow (after its first second),
        with what the source ToR's port received over the very same two reports (bytes/s):
        the rate that arrived, whatever the sender managed on a busy machine."""
        try:
            reply = _matrix(lab, admin_pb2.MATRIX_BY_TOR)
            ifaces = lab.admin.ListInterfaces(
                admin_pb2.ListInterfacesRequest(switch_name=src_tor, port=port), timeout=10
            ).interfaces
        except grpc.RpcError:
            return None
        after = started_ns + 1_000_000_000
        ok = {s.tor for s in reply.measured if s.end_wall_ns - s.span_ns >= after}
        mine = next((s for s in reply.measured if s.tor == src_tor), None)
        if not ifaces or mine is None or not ifaces[0].HasField("rx_bits_per_s"):
            return None
        iface = ifaces[0]
        same = (iface.counters_wall_ns, iface.rate_window_ns) == (mine.end_wall_ns, mine.span_ns)
        return (reply, iface.rx_bits_per_s / 8) if ok >= set(tors) and same else None

    try:
        by_tor, arrived = wait_for("every ToR measured while the flow ran", inside, timeout_s=30)
        by_rail = _matrix(lab, admin_pb2.MATRIX_BY_RAIL)
    finally:
        summary = lab.stop_sender(sender)
    sent_by_flow = summary.get("sent")
    sent = int(sent_by_flow.get("0", 0)) if isinstance(sent_by_flow, dict) else 0

    nominal = RATE_PPS * FRAME
    # What arrived on the port (the flow, and the server's LLDP: a frame a second).
    want = arrived
    grid = {(c.src, c.dst): c.bytes_per_s for c in by_tor.cells}
    cells = dict(grid)
    got = cells.pop((src_tor, dst_tor), 0.0)
    # The cell's error against what arrived; NaN with nothing arrived (a failure said below).
    error = got / want - 1 if want > 0 else float("nan")
    stray_src, stray_dst, stray = max(
        ((s, d, b) for (s, d), b in cells.items()), key=lambda x: x[2], default=("", "", 0.0)
    )
    rails = {(c.src_rail, c.dst_rail): c.bytes_per_s for c in by_rail.cells}
    rail_cell = (rail_of[src_tor], rail_of[dst_tor])
    got_rail = rails.pop(rail_cell, 0.0)
    stray_rail = max(rails.values(), default=0.0)
    spans = [s.span_ns / 1e9 for s in by_tor.measured]

    problems = []
    if sent <= 0 or want < 0.5 * nominal:
        problems.append(f"the flow sent {sent} datagrams, {want:.0f} B/s arrived: no sample")
    if abs(got - want) > MATCH * want:
        problems.append(
            f"{src_tor} -> {dst_tor}: {got * 8 / 1e6:.3f} Mb/s, arrived {want * 8 / 1e6:.3f} Mb/s "
            f"(off by more than {MATCH:.0%})"
        )
    if stray >= STRAY * want:
        problems.append(f"{stray_src} -> {stray_dst}: {stray:.0f} B/s, >= {STRAY:.0%} of the flow")
    if abs(got_rail - want) > MATCH * want or stray_rail >= STRAY * want:
        problems.append(
            f"rail {rail_cell[0]} -> rail {rail_cell[1]}: {got_rail:.0f} B/s, other rail cells "
            f"up to {stray_rail:.0f} B/s (flow {want:.0f} B/s)"
        )
    reason = (
        f"{src.full_name} -> {dst.full_name} at {RATE_PPS} pps "
        f"({want * 8 / 1e6:.3f} Mb/s arrived): "
        f"cell {src_tor} -> {dst_tor} {got * 8 / 1e6:.3f} Mb/s ({error:+.1%}), largest "
        f"other cell {stray:.0f} B/s; {len(spans)} ToRs measured over "
        f"{min(spans, default=0):.1f}-{max(spans, default=0):.1f} s; {sent:,} datagrams sent"
    )
    if problems:
        reason += "; " + "; ".join(problems)
    table = Table(
        ("Mb/s: source \\ destination", *tors),
        tuple((s, *(f"{grid.get((s, d), 0.0) * 8 / 1e6:.3f}" for d in tors)) for s in tors),
    )
    metrics: dict[str, float | int | str] = {
        "rate_pps": RATE_PPS,
        "frame_bytes": FRAME,
        "sent": sent,
        "nominal_bytes_per_s": nominal,
        "expected_bytes_per_s": round(want, 1),
        "cell_bytes_per_s": round(got, 1),
        "cell_error_pct": round(error * 100, 2),
        "largest_other_cell_bytes_per_s": round(stray, 1),
        "rail_cell_bytes_per_s": round(got_rail, 1),
        "largest_other_rail_cell_bytes_per_s": round(stray_rail, 1),
        "tors_measured": len(by_tor.measured),
        "window_s_min": round(min(spans, default=0.0), 3),
        "window_s_max": round(max(spans, default=0.0), 3),
    }
    return Result(NAME, not problems, reason, metrics, (table,))
