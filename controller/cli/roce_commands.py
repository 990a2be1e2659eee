"""`railctl roce [--switch SW]`: RoCEv2 retransmission and congestion (controller/core/roce.py):
per port and traffic class the RoCE packets that arrived per second by kind, the ports and ToR
pairs above the NAK threshold, and the links the sampled NAK-ing flows localise the loss to.
Exit 3 when a link is suspected. JSON: the RoceResponse (docs/railctl-json.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from controller.cli.admin_commands import RPC_TIMEOUT_S, run_query_with
from controller.cli.output import table, when
from railfabric.v1 import admin_pb2

# Hot ports, and hot ToR pairs, a table shows (most NAKs first).
HOT_SHOWN = 20

if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--switch", default="", metavar="SW", help="only this switch's ports (localisation is "
        "fabric-wide either way)"
    )  # fmt: skip


async def _query(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.GetRoceRequest(switch_name=a.switch)
    return await stub.GetRoce(req, timeout=RPC_TIMEOUT_S)


def _rate(x: float) -> str:
    return f"{x:.1f}" if x else "0"


def _link(link: admin_pb2.RoceLink) -> list[object]:
    peer = link.peer or "?"
    pairs = ", ".join(link.tor_pairs[:4]) + (
        f" and {len(link.tor_pairs) - 4} more" if len(link.tor_pairs) > 4 else ""
    )
    return [f"{link.end.switch_name}:{link.end.port}", peer, f"{link.flows}/{link.of_flows}", pairs]


def render(r: admin_pb2.RoceResponse, a: argparse.Namespace) -> list[str]:
    window_s = r.window_ms / 1000
    sampling = "on" if r.sampling else "off (roce.nak_sample_interval_us: 0)"
    out = [
        f"RoCE thresholds: {r.nak_alarm_per_s:g} NAKs/s (PSN sequence + other; RNR never "
        f"alarms), {r.cnp_alarm_per_s:g} CNPs/s; NAK sampling {sampling}"
    ]
    if r.ports:
        out.append("packets/s arriving, between each switch's last two reports:")
        rows = [
            [
                p.switch_name,
                p.port,
                p.traffic_class,
                _rate(p.data_per_s),
                _rate(p.ack_per_s),
                _rate(p.nak_psn_sequence_per_s),
                _rate(p.nak_other_per_s),
                _rate(p.nak_rnr_per_s),
                _rate(p.cnp_per_s),
            ]
            for p in r.ports
        ]
        header = ["switch", "port", "tc", "data", "ack", "nak psn", "nak other", "nak rnr",
                  "cnp"]  # fmt: skip
        out += table(header, rows)
    else:
        out.append("no RoCE traffic measured (fewer than two reports, or none arrived)")
    if r.hot:
        out.append(f"above {r.nak_alarm_per_s:g} NAKs/s in the last {window_s:g} s:")
        shown = [h for h in r.hot if h.switch_name][:HOT_SHOWN]
        shown += [h for h in r.hot if not h.switch_name][:HOT_SHOWN]
        for h in shown:
            what = (
                f"port {h.switch_name}:{h.port}"
                if h.switch_name
                else f"ToR pair {h.requester_tor}->{h.responder_tor}"
            )
            now = "now" if h.hot_now else "earlier"
            out.append(f"  {what}: {h.naks_per_s:.1f} NAKs/s ({now})")
        if len(shown) < len(r.hot):
            out.append(f"  and {len(r.hot) - len(shown)} more (--json lists them)")
    out.append(
        f"NAK samples: {r.samples} in the {window_s:g} s window, {r.samples_dropped} not kept "
        f"by agents, {r.samples_overflowed} past the controller's room"
    )
    if r.suspects:
        assessed = f" (assessed {when(r.assessed_wall_ns)})" if r.assessed_wall_ns else ""
        out.append(
            f"suspect links, crossed by the most of the {r.flows} NAK-ing flows sampled{assessed}:"
        )
        out += table(["transmits", "toward", "flows", "ToR pairs"], [_link(s) for s in r.suspects])
    elif r.flows:
        out.append(f"not localised: the {r.flows} NAK-ing flows sampled share no link")
    if r.unplaced:
        out.append(f"{r.unplaced} sampled NAKs could not be placed on a path")
    return out


def _exit(r: admin_pb2.RoceResponse) -> int:
    return 3 if r.suspects else 0


ROCE_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "roce",
        "RoCE NAK, ACK, data and CNP rates per port and where NAK-ing flows localise the loss "
        "(exit 3 when a link is suspected)",
        _args,
        lambda args: run_query_with(_query, render, args, exit_code=_exit),
    ),
]
