"""railctl's per-port commands, in the manner of SONiC's `show`: `interfaces`, `counters`,
`tables`, and the fabric-wide `pfc` and `ecn` summaries.

In the tables, "-" is "not yet" (no counter report, or one report: no rates yet) and "n/a" is
"not available on this target" (a drop reason it cannot count, a queue depth it does not
report): never a 0 that was not counted. Counters are cumulative since the target started;
rates are between the agent's last two reports."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from controller.cli.admin_commands import (
    RPC_TIMEOUT_S,
    UINT32_MAX,
    int_in,
    run_query_with,
)
from controller.cli.output import table, to_json, when
from railfabric.v1 import admin_pb2, control_pb2, state_pb2

if TYPE_CHECKING:
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub

# GetTables waits up to 5 s for the agent; leave it the time to say why it gave up.
TABLES_TIMEOUT_S = 8.0
REASONS = [
    (number, control_pb2.DropReason.Name(number).removeprefix("DROP_REASON_").lower())
    for number in control_pb2.DropReason.values()
    if number != control_pb2.DROP_REASON_UNSPECIFIED
]
_STATUS = {
    control_pb2.ENTRY_STATUS_MATCH: "match",
    control_pb2.ENTRY_STATUS_MISSING: "MISSING",
    control_pb2.ENTRY_STATUS_UNEXPECTED: "UNEXPECTED",
    control_pb2.ENTRY_STATUS_DIFFERS: "DIFFERS",
}
_OPER = {
    admin_pb2.OPER_STATE_UP: "up",
    admin_pb2.OPER_STATE_DOWN: "DOWN",
    admin_pb2.OPER_STATE_UNKNOWN: "unknown",
}


# -- cells ---------------------------------------------------------------------------------


def si(value: float) -> str:
    """1234567 -> "1.23M": three significant digits, SI prefixes."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}"
    return f"{value:.3g}" if value != int(value) else str(int(value))


def _speed(mbps: int) -> str:
    if not mbps:
        return "-"
    return f"{mbps // 1000}G" if mbps % 1000 == 0 else f"{mbps}M"


def peer_text(peer: admin_pb2.Peer, present: bool) -> str:
    if not present or peer.kind == state_pb2.PEER_KIND_UNSPECIFIED:
        return "-"
    if peer.kind == state_pb2.PEER_KIND_HOST:
        return f"{peer.name}/{peer.nic}" if peer.nic else peer.name
    return f"{peer.name}:{peer.port}"


def rates(i: admin_pb2.Interface) -> list[str]:
    """rx pps, tx pps, rx b/s, tx b/s; "-" before the second counter report."""
    values = [
        i.rx_packets_per_s if i.HasField("rx_packets_per_s") else None,
        i.tx_packets_per_s if i.HasField("tx_packets_per_s") else None,
        i.rx_bits_per_s if i.HasField("rx_bits_per_s") else None,
        i.tx_bits_per_s if i.HasField("tx_bits_per_s") else None,
    ]
    return ["-" if v is None else si(v) for v in values]


def queue_depth(c: control_pb2.PortCounters) -> tuple[int | None, int | None]:
    """(bytes, packets) queued now; None where the target does not report it."""
    return (
        c.queue_depth_bytes if c.HasField("queue_depth_bytes") else None,
        c.queue_depth_packets if c.HasField("queue_depth_packets") else None,
    )


def queue_watermark(c: control_pb2.PortCounters) -> tuple[int | None, int | None]:
    """(bytes, packets) at the highest since the previous report; None where not reported."""
    return (
        c.queue_watermark_bytes if c.HasField("queue_watermark_bytes") else None,
        c.queue_watermark_packets if c.HasField("queue_watermark_packets") else None,
    )


def _queue(occupancy: tuple[int | None, int | None]) -> str:
    """A queue occupancy in the target's own unit(s): "12.3kB", "7 pkt"; "n/a"."""
    size, packets = occupancy
    parts = []
    if size is not None:
        parts.append(f"{si(size)}B")
    if packets is not None:
        parts.append(f"{packets} pkt")
    return "/".join(parts) or "n/a"


def drop_reasons(c: control_pb2.PortCounters) -> str:
    """The reasons anything was dropped for ("queue_full 10, no_route 2"); "n/a" when the
    target splits drops by no reason at all."""
    if not c.drops_by_reason:
        return "n/a"
    names = dict(REASONS)
    return ", ".join(
        f"{names.get(d.reason, str(d.reason))} {d.packets}" for d in c.drops_by_reason if d.packets
    )


def _dropped_for(c: control_pb2.PortCounters, reason: int) -> int | None:
    """Packets dropped for `reason`, or None when the target does not count it."""
    return next((d.packets for d in c.drops_by_reason if d.reason == reason), None)


# -- interfaces and counters ----------------------------------------------------------------


async def _q_interfaces(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.ListInterfacesRequest(switch_name=a.switch or "", port=a.port or 0)
    return await stub.ListInterfaces(req, timeout=RPC_TIMEOUT_S)


def render_interfaces(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> list[str]:
    rows = []
    for i in r.interfaces:
        c = i.counters
        has = i.HasField("counters")
        rows.append(
            [
                i.switch_name,
                i.port,
                i.ifname or "-",
                _OPER.get(i.oper, "unknown"),
                _speed(i.speed_mbps),
                peer_text(i.plan_peer, i.HasField("plan_peer")),
                peer_text(i.lldp_peer, i.HasField("lldp_peer")),
                *rates(i),
                *(
                    [
                        c.drops,
                        c.ecn_marks,
                        c.pfc_pause_tx,
                        c.pfc_pause_rx,
                        c.pfc_watchdog_storms,
                        _queue(queue_depth(c)),
                        _queue(queue_watermark(c)),
                        drop_reasons(c) if c.drops else "",
                    ]
                    if has
                    else ["-"] * 7 + [""]
                ),
            ]
        )
    header = [
        "switch", "port", "ifname", "oper", "speed", "plan peer", "lldp peer",
        "rx pps", "tx pps", "rx b/s", "tx b/s", "drops", "ecn", "pause tx", "pause rx",
        "storms", "queue", "queue max", "drop reasons",
    ]  # fmt: skip
    return table(header, rows)


def _counters_head(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> str:
    reported = [i for i in r.interfaces if i.HasField("counters")]
    if not reported:
        return f"{a.switch}: no counter report yet"
    head = f"{a.switch}: counters reported {when(reported[0].counters_wall_ns)}"
    window = reported[0].rate_window_ns
    return head + (f", rates over {window / 1e9:.2f} s" if window else ", no rates yet")


def render_counters(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> list[str]:
    rows, reasons = [], []
    for i in r.interfaces:
        if not i.HasField("counters"):
            rows.append([i.port, *["-"] * 15])
            reasons.append([i.port, *["-"] * len(REASONS)])
            continue
        c = i.counters
        rows.append(
            [
                i.port,
                c.rx_packets,
                c.rx_bytes,
                c.tx_packets,
                c.tx_bytes,
                *rates(i),
                c.drops,
                c.ecn_marks,
                c.pfc_pause_tx,
                c.pfc_pause_rx,
                c.pfc_watchdog_storms,
                _queue(queue_depth(c)),
                _queue(queue_watermark(c)),
            ]
        )
        counted = {d.reason: d.packets for d in c.drops_by_reason}
        reasons.append([i.port, *(counted.get(n, "n/a") for n, _ in REASONS)])
    header = [
        "port", "rx packets", "rx bytes", "tx packets", "tx bytes", "rx pps", "tx pps",
        "rx b/s", "tx b/s", "drops", "ecn marks", "pause tx", "pause rx", "storms", "queue",
        "queue max",
    ]  # fmt: skip
    out = [_counters_head(r, a), *table(header, rows), ""]
    if all(cell in ("n/a", "-") for row in reasons for cell in row[1:]):
        return [*out, "drops by reason: not available on this target"]
    return [*out, "drops by reason", *table(["port", *(name for _, name in REASONS)], reasons)]


# -- tables ---------------------------------------------------------------------------------


async def _q_tables(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.GetTablesRequest(switch_name=a.switch)
    return await stub.GetTables(req, timeout=TABLES_TIMEOUT_S)


def _differs(e: control_pb2.InstalledEntry) -> bool:
    return e.status != control_pb2.ENTRY_STATUS_MATCH


def render_tables(r: control_pb2.TablesReport, a: argparse.Namespace) -> list[str]:
    if r.error:
        return [f"{r.switch_name}: {r.error} ({when(r.read_wall_ns)})"]
    counts = {status: 0 for status in _STATUS}
    for e in r.entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    head = (
        f"{r.switch_name}: read back {when(r.read_wall_ns)}: {len(r.entries)} entries, "
        f"{counts[control_pb2.ENTRY_STATUS_MATCH]} match, "
        f"{counts[control_pb2.ENTRY_STATUS_MISSING]} missing, "
        f"{counts[control_pb2.ENTRY_STATUS_UNEXPECTED]} unexpected, "
        f"{counts[control_pb2.ENTRY_STATUS_DIFFERS]} differ"
    )
    shown = [e for e in r.entries if _differs(e) or not a.diff_only]
    if not shown:
        return [head]
    return [
        head,
        *table(
            ["table", "key", "status", "installed", "wanted"],
            [
                [e.table, e.key, _STATUS.get(e.status, "?"), e.action or "-", e.wanted]
                for e in shown
            ],
        ),
    ]


def _tables_json(r: control_pb2.TablesReport, a: argparse.Namespace) -> Any:
    data = to_json(r)
    if a.diff_only:
        data["entries"] = [to_json(e) for e in r.entries if _differs(e)]
    return data


def _tables_exit(r: control_pb2.TablesReport) -> int:
    if r.error:
        return 1
    return 3 if any(_differs(e) for e in r.entries) else 0


# -- fabric summaries ------------------------------------------------------------------------


async def _q_all_interfaces(stub: Stub, a: argparse.Namespace) -> Message:
    return await stub.ListInterfaces(admin_pb2.ListInterfacesRequest(), timeout=RPC_TIMEOUT_S)


def _reporting(r: admin_pb2.ListInterfacesResponse) -> list[admin_pb2.Interface]:
    return [i for i in r.interfaces if i.HasField("counters")]


def _top(
    interfaces: Iterable[admin_pb2.Interface],
    score: Callable[[control_pb2.PortCounters], tuple[int, ...]],
    n: int,
) -> list[admin_pb2.Interface]:
    """The `n` interfaces with the highest nonzero score, highest first (ties: by name)."""
    scored = [i for i in interfaces if any(score(i.counters))]
    scored.sort(key=lambda i: (tuple(-s for s in score(i.counters)), i.switch_name, i.port))
    return scored[:n]


def _pause_score(c: control_pb2.PortCounters) -> tuple[int, ...]:
    return (c.pfc_pause_tx + c.pfc_pause_rx, c.pfc_watchdog_storms)


def _peer_json(i: admin_pb2.Interface) -> Any:
    return to_json(i.plan_peer) if i.HasField("plan_peer") else None


def pfc_summary(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> dict[str, Any]:
    ports = _reporting(r)
    return {
        "ports_reporting": len(ports),
        "totals": {
            "pfc_pause_tx": sum(i.counters.pfc_pause_tx for i in ports),
            "pfc_pause_rx": sum(i.counters.pfc_pause_rx for i in ports),
            "pfc_watchdog_storms": sum(i.counters.pfc_watchdog_storms for i in ports),
        },
        "top": [
            {
                "switch_name": i.switch_name,
                "port": i.port,
                "plan_peer": _peer_json(i),
                "pfc_pause_tx": i.counters.pfc_pause_tx,
                "pfc_pause_rx": i.counters.pfc_pause_rx,
                "pfc_watchdog_storms": i.counters.pfc_watchdog_storms,
                "pfc_watchdog_drops": _dropped_for(
                    i.counters, control_pb2.DROP_REASON_PFC_WATCHDOG
                ),
                "headroom_full_drops": _dropped_for(
                    i.counters, control_pb2.DROP_REASON_HEADROOM_FULL
                ),
                "counters_wall_ns": i.counters_wall_ns,
            }
            for i in _top(ports, _pause_score, a.top)
        ],
    }


def _count(value: int | None) -> object:
    return "n/a" if value is None else value


def render_pfc(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> list[str]:
    s = pfc_summary(r, a)
    t = s["totals"]
    head = (
        f"PFC over {s['ports_reporting']} reporting ports (counted since each target started): "
        f"{t['pfc_pause_tx']} pauses sent, {t['pfc_pause_rx']} received, "
        f"{t['pfc_watchdog_storms']} watchdog storms"
    )
    if not s["top"]:
        return [head, "no port has sent or received a pause"]
    peers = {(i.switch_name, i.port): i for i in r.interfaces}
    rows = [
        [
            p["switch_name"],
            p["port"],
            peer_text(peers[p["switch_name"], p["port"]].plan_peer, p["plan_peer"] is not None),
            p["pfc_pause_tx"],
            p["pfc_pause_rx"],
            p["pfc_watchdog_storms"],
            _count(p["pfc_watchdog_drops"]),
            _count(p["headroom_full_drops"]),
            when(p["counters_wall_ns"]),
        ]
        for p in s["top"]
    ]
    header = [
        "switch", "port", "plan peer", "pause tx", "pause rx", "storms", "watchdog drops",
        "headroom drops", "reported",
    ]  # fmt: skip
    return [head, f"top {a.top} by pauses sent + received:", *table(header, rows)]


def _cnp_rate(i: admin_pb2.Interface) -> float | None:
    return i.cnp_per_s if i.HasField("cnp_per_s") else None


def ecn_summary(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> dict[str, Any]:
    """Marks counted since each target started; CNPs/s arriving on each port between its
    switch's last two reports (RoCE counts): the top ports by marks, then by CNPs/s."""
    ports = _reporting(r)
    ranked = [i for i in ports if i.counters.ecn_marks or (_cnp_rate(i) or 0.0) > 0]
    ranked.sort(
        key=lambda i: (-i.counters.ecn_marks, -(_cnp_rate(i) or 0.0), i.switch_name, i.port)
    )
    return {
        "ports_reporting": len(ports),
        "totals": {
            "ecn_marks": sum(i.counters.ecn_marks for i in ports),
            "tx_packets": sum(i.counters.tx_packets for i in ports),
            "cnp_per_s": sum(_cnp_rate(i) or 0.0 for i in ports),
        },
        "top": [
            {
                "switch_name": i.switch_name,
                "port": i.port,
                "plan_peer": _peer_json(i),
                "ecn_marks": i.counters.ecn_marks,
                "tx_packets": i.counters.tx_packets,
                "cnp_per_s": _cnp_rate(i),
                "queue_watermark_bytes": queue_watermark(i.counters)[0],
                "queue_watermark_packets": queue_watermark(i.counters)[1],
                "counters_wall_ns": i.counters_wall_ns,
            }
            for i in ranked[: a.top]
        ],
    }


def render_ecn(r: admin_pb2.ListInterfacesResponse, a: argparse.Namespace) -> list[str]:
    s = ecn_summary(r, a)
    t = s["totals"]
    head = (
        f"ECN over {s['ports_reporting']} reporting ports (counted since each target started): "
        f"{t['ecn_marks']} packets marked of {t['tx_packets']} sent; "
        f"{t['cnp_per_s']:.1f} CNPs/s arriving (last report period)"
    )
    if not s["top"]:
        return [head, "no port has marked a packet or received a CNP"]
    by_port = {(i.switch_name, i.port): i for i in r.interfaces}
    rows = []
    for p in s["top"]:
        i = by_port[p["switch_name"], p["port"]]
        sent = p["tx_packets"]
        cnps = p["cnp_per_s"]
        rows.append(
            [
                p["switch_name"],
                p["port"],
                peer_text(i.plan_peer, p["plan_peer"] is not None),
                p["ecn_marks"],
                sent,
                f"{100 * p['ecn_marks'] / sent:.2f}%" if sent else "-",
                "-" if cnps is None else f"{cnps:.1f}",
                _queue(queue_watermark(i.counters)),
                when(p["counters_wall_ns"]),
            ]
        )
    header = ["switch", "port", "plan peer", "marks", "tx packets", "marked", "CNP/s",
              "queue max", "reported"]  # fmt: skip
    return [head, f"top {a.top} by packets marked, then CNPs/s:", *table(header, rows)]


# -- arguments and registration --------------------------------------------------------------


def _interfaces_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("switch", nargs="?", help="only this switch (all when omitted)")
    p.add_argument("--port", type=int_in(1, UINT32_MAX), help="only this port (needs SWITCH)")


def _counters_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("switch", help="switch name")
    p.add_argument("--port", type=int_in(1, UINT32_MAX), help="only this port")


def _tables_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("switch", help="switch name")
    p.add_argument(
        "--diff-only", action="store_true", help="only entries that differ from what is wanted"
    )


def _top_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int_in(1, UINT32_MAX), default=10, help="show the N top ports")


def _interfaces(args: argparse.Namespace) -> int:
    if args.port and not args.switch:
        print("railctl interfaces: --port needs a SWITCH", file=sys.stderr)
        return 2
    return run_query_with(_q_interfaces, render_interfaces, args)


PORT_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "interfaces",
        "per port: state, speed, peers, rates, drops, ECN, PFC, queues",
        _interfaces_args,
        _interfaces,
    ),
    (
        "counters",
        "a switch's port counters, drops by reason",
        _counters_args,
        lambda args: run_query_with(_q_interfaces, render_counters, args),
    ),
    (
        "tables",
        "what the switch's target holds, read back now, against what its agent wants "
        "(exit 3 when they differ)",
        _tables_args,
        lambda args: run_query_with(
            _q_tables, render_tables, args, json_of=_tables_json, exit_code=_tables_exit
        ),
    ),
    (
        "pfc",
        "PFC pauses and watchdog storms across the fabric, top ports first",
        _top_args,
        lambda args: run_query_with(_q_all_interfaces, render_pfc, args, json_of=pfc_summary),
    ),
    (
        "ecn",
        "ECN marks across the fabric, top ports first",
        _top_args,
        lambda args: run_query_with(_q_all_interfaces, render_ecn, args, json_of=ecn_summary),
    ),
]
