"""`railctl matrix [--by tor|rail] [--window 10s]`: the traffic matrix the ToRs count at their
host ports (controller/core/matrix.py), as a grid of Mb/s with the sample each row was
measured over. JSON: the TrafficMatrixResponse (docs/railctl-json.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from controller.cli.admin_commands import RPC_TIMEOUT_S, run_query_with
from controller.cli.output import table
from railfabric.cli import duration_s
from railfabric.v1 import admin_pb2

if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub

BY = {"tor": admin_pb2.MATRIX_BY_TOR, "rail": admin_pb2.MATRIX_BY_RAIL}
# Past this many ToRs a grid is unreadable: the cells are listed instead, largest first.
GRID_MAX = 24


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", choices=sorted(BY), default="tor", help="ToR x ToR or rail x rail")
    p.add_argument(
        "--window",
        type=duration_s,
        default=0.0,
        metavar="DURATION",
        help="rates over about this long (e.g. 10s; the controller keeps each ToR's last "
        "reports, two periods at most); default: each ToR's last report period",
    )


async def _query(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.GetTrafficMatrixRequest(by=BY[a.by], window_ms=int(a.window * 1000))
    return await stub.GetTrafficMatrix(req, timeout=RPC_TIMEOUT_S)


def _mbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.3f}"


def render(r: admin_pb2.TrafficMatrixResponse) -> list[str]:
    """The grid (sources down, destinations across, Mb/s) or, when large, the cells; then
    what each row was measured over."""
    by_rail = r.by == admin_pb2.MATRIX_BY_RAIL
    axis: Sequence[str] = [f"rail {n}" for n in r.rails] if by_rail else list(r.tors)

    def ends(c: admin_pb2.MatrixCell) -> tuple[str, str]:
        return (f"rail {c.src_rail}", f"rail {c.dst_rail}") if by_rail else (c.src, c.dst)

    cells = {ends(c): c.bytes_per_s for c in r.cells}
    out = [
        f"traffic matrix by {'rail' if by_rail else 'ToR'}, Mb/s (source down, destination across)"
    ]
    if len(axis) <= GRID_MAX:
        out += table(
            ["", *axis],
            [[src, *(_mbps(cells.get((src, dst), 0.0)) for dst in axis)] for src in axis],
        )
    else:
        top = sorted(r.cells, key=lambda c: -c.bytes_per_s)
        out += table(
            ["source", "destination", "Mb/s"], [[*ends(c), _mbps(c.bytes_per_s)] for c in top]
        )
    spans = sorted(s.span_ns for s in r.measured)
    if spans:
        out.append(
            f"measured: {len(r.measured)} ToRs, over {spans[0] / 1e9:.1f}-{spans[-1] / 1e9:.1f} s "
            f"({min(s.reports for s in r.measured)}+ reports each)"
        )
    if r.unmeasured:
        out.append(f"not measured yet (fewer than two reports): {', '.join(r.unmeasured)}")
    return out


def _run(args: argparse.Namespace) -> int:
    return run_query_with(_query, lambda reply, _a: render(reply), args)


MATRIX_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "matrix",
        "the traffic matrix counted at the ToRs' host ports, ToR x ToR or rail x rail (Mb/s)",
        _args,
        _run,
    ),
]
