"""`railctl lldp [SWITCH]`: what LLDP hears on each port against the cabling plan (ListLldp),
servers included, one line per port: the planned peer, the peer heard (named as the plan names
it: a switch port `spine-1:3`, a server NIC `srv-b1-s1/nic3`), the status, and the ids as they
were received. Exit status 3 when a port is miswired or hears a peer the plan does not have
there; a silent port is not an error (a server need not speak LLDP)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from controller.cli.admin_commands import RPC_TIMEOUT_S, run_query_with
from controller.cli.output import table, when
from controller.cli.port_commands import peer_text
from railfabric.v1 import admin_pb2, state_pb2

if TYPE_CHECKING:
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub

_STATUS = {
    admin_pb2.LLDP_STATUS_OK: "ok",
    admin_pb2.LLDP_STATUS_MISWIRED: "MISWIRED",
    admin_pb2.LLDP_STATUS_SILENT: "silent",
    admin_pb2.LLDP_STATUS_UNPLANNED: "UNPLANNED",
}
_PROBLEMS = (admin_pb2.LLDP_STATUS_MISWIRED, admin_pb2.LLDP_STATUS_UNPLANNED)


async def _q_lldp(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.ListLldpRequest(switch_name=a.switch or "")
    return await stub.ListLldp(req, timeout=RPC_TIMEOUT_S)


def _seen(p: admin_pb2.LldpPort) -> str:
    if not p.HasField("seen"):
        return "-"
    if p.seen.kind == state_pb2.PEER_KIND_UNSPECIFIED:
        return f"{p.seen.name} (not in the plan)"
    return peer_text(p.seen, True)


def render_lldp(r: admin_pb2.ListLldpResponse, a: argparse.Namespace) -> list[str]:
    counts = dict.fromkeys(_STATUS.values(), 0)
    for p in r.ports:
        counts[_STATUS.get(p.status, "?")] = counts.get(_STATUS.get(p.status, "?"), 0) + 1
    head = f"{len(r.ports)} ports: " + ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    rows = [
        [
            p.switch_name,
            p.port,
            _STATUS.get(p.status, "?"),
            peer_text(p.planned, p.HasField("planned")),
            _seen(p),
            p.chassis_id or "-",
            p.port_id or "-",
            f"{p.ttl_s} s" if p.HasField("seen") else "-",
            when(p.last_seen_wall_ns),
        ]
        for p in r.ports
    ]
    header = [
        "switch", "port", "status", "planned", "heard", "chassis id", "port id", "ttl",
        "last heard",
    ]  # fmt: skip
    return [head, *table(header, rows)]


def _exit(r: admin_pb2.ListLldpResponse) -> int:
    return 3 if any(p.status in _PROBLEMS for p in r.ports) else 0


def _lldp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("switch", nargs="?", help="only this switch (all when omitted)")


LLDP_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "lldp",
        "LLDP neighbours of every port, servers included, against the cabling plan "
        "(exit 3 when a port is miswired)",
        _lldp_args,
        lambda args: run_query_with(_q_lldp, render_lldp, args, exit_code=_exit),
    ),
]
