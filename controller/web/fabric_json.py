"""What the web view's JSON endpoints answer, built from the state the admin API reads
(controller/daemon/admin.py: its plan index, `link_infos`, `switch_status`, `alarm_message`,
and `interfaces`), never re-derived. Called on the event loop, between two inputs, so every
answer is one consistent view; each is bounded whatever the fabric's size (docs/operations.md,
"The web view", has the figures at ref-100k size).

Shapes: a link is a flat object (`link_json`); switches, interfaces and alarms are the admin
API's messages as `railctl --json` prints them (controller/cli/output.py `to_json`).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from controller.cli.output import to_json
from controller.core import latency, matrix
from controller.core.cabling import MISWIRE, alarm_id
from controller.core.clock import Now
from controller.core.links import LinkState
from controller.core.machine import DecisionCore
from controller.daemon.admin import AdminService, PlanIndex, alarm_key, alarm_message, switch_status
from controller.daemon.interfaces import interfaces
from controller.daemon.runner import now
from railfabric.v1 import admin_pb2

# The most links one /api/view page holds: 2,000 build in ~30 ms on the loop (bench/web.py
# measures the pages at ref-100k size); a rail and pod of ref-100k is 3 pages.
MAX_VIEW_LINKS = 2_000
# The most alarms an answer lists (the total is always given).
MAX_ALARMS = 200
# A fabric with at most this many links is drawn whole; a larger one by rail and pod.
DRAW_WHOLE_LINKS = 2_000
ROLES = {
    admin_pb2.SWITCH_ROLE_TOR: "tor",
    admin_pb2.SWITCH_ROLE_SPINE: "spine",
    admin_pb2.SWITCH_ROLE_CORE: "core",
}
_STATE_NAME = {
    admin_pb2.LINK_STATE_UP: "up",
    admin_pb2.LINK_STATE_DOWN: "down",
    admin_pb2.LINK_STATE_HOLD_DOWN: "hold_down",
    admin_pb2.LINK_STATE_DAMPED: "damped",
    admin_pb2.LINK_STATE_UNKNOWN: "unknown",
}
# Where telemetry nobody measured goes: the page says so rather than draw numbers: the traffic
# matrix until a ToR reported twice, the latency heat map while its window holds no mesh probe.
NOT_MEASURED: dict[str, Any] = {"status": "not measured yet", "data": None}
# Outlier cables the page lists (and marks on the drawing): the head of the ranking.
WEB_OUTLIERS = 20


def latency_heatmap(core: DecisionCore, at: Now) -> dict[str, Any]:
    """The latency heat map by rail pair over the intent's window (railctl latency --by
    rail), and the head of the outlier ranking."""
    heat, window_ns = core.latency_heat(latency.By.RAIL, at)
    if not heat.cells:
        return NOT_MEASURED
    found = core.latency_outliers(at)
    return {
        "status": "measured",
        "data": {
            "rails": sorted({s.rail for s in core.planner.switches() if s.rail >= 0}),
            "cells": [
                {
                    "src_rail": c.src_rail,
                    "dst_rail": c.dst_rail,
                    "p50_ns": c.judged.window.p50_ns or 0,
                    "p99_ns": c.judged.window.p99_ns or 0,
                    "samples": c.judged.window.samples,
                    "loss": c.judged.window.loss,
                    "baseline_p99_ns": c.judged.baseline_p99_ns or 0,
                    "baseline_p50_ns": c.judged.baseline_p50_ns or 0,
                    "outlier": c.judged.outlier,
                }
                for c in heat.cells
            ],
            "window_s": window_ns / 1e9,
            "reports": heat.reports,
            "outliers": [
                {
                    "link": o.link,
                    "reason": o.reason.value,
                    "p50_ns": (o.judged.window.p50_ns or 0) if o.judged is not None else 0,
                    "bad_pairs": o.bad_pairs,
                }
                for o in found[:WEB_OUTLIERS]
            ],
            "outlier_count": len(found),
        },
    }


def telemetry(core: DecisionCore) -> dict[str, Any]:
    """The traffic matrix by rail (bytes/s over each ToR's last report period, with how many
    ToRs it sums), and the latency heat map by rail pair."""
    rails = matrix.rail_matrix(core, 0)
    traffic: dict[str, Any] = NOT_MEASURED
    if rails.rows:
        spans = [r.span_ns / 1e9 for r in rails.rows.values()]
        traffic = {
            "status": "measured",
            "data": {
                "rails": sorted({s.rail for s in core.planner.switches() if s.rail >= 0}),
                "cells": [
                    {"src_rail": src, "dst_rail": dst, "bytes_per_s": octets}
                    for (src, dst), (_, octets) in sorted(rails.cells.items())
                ],
                "tors_measured": len(rails.rows),
                "tors_unmeasured": len(rails.unmeasured),
                "window_s": [min(spans), max(spans)],
            },
        }
    return {"traffic_matrix": traffic, "latency_heatmap": latency_heatmap(core, now())}


class BadQuery(ValueError):
    """A query parameter the endpoint cannot serve; the message names it."""


def state_name(state: admin_pb2.LinkState.ValueType) -> str:
    return _STATE_NAME.get(state, "unknown")


def miswired(core: DecisionCore, ends: Iterable[tuple[str, int]]) -> bool:
    """Does either end carry an active miswire alarm (LLDP hears someone else there)?"""
    active = core.alarms.active
    return any(alarm_id(MISWIRE, end) in active for end in ends)


def link_json(core: DecisionCore, info: admin_pb2.LinkInfo) -> dict[str, Any]:
    """One link for the page: its ends, its observed state, and why routing avoids it.
    `drained` and `miswired` are apart from `state`, which stays what the agents observe."""
    a, b = info.a, info.b
    return {
        "key": f"{a.switch_name}:{a.port}--{b.switch_name}:{b.port}",
        "a": a.switch_name,
        "a_port": a.port,
        "b": b.switch_name,
        "b_port": b.port,
        "state": state_name(info.state),
        "drained": info.HasField("drain"),
        "miswired": miswired(core, ((a.switch_name, a.port), (b.switch_name, b.port))),
        "reason": info.reason,
        "since_wall_ns": info.since_wall_ns,
        "flaps": info.flaps,
        "speed_mbps": info.speed_mbps,
    }


def switch_json(core: DecisionCore, info: admin_pb2.SwitchInfo) -> dict[str, Any]:
    """One switch for the drawing: where it sits (role, rail, pod, block) and its session."""
    v = core.views.get(info.name)
    return {
        "name": info.name,
        "role": ROLES.get(info.role, "unknown"),
        "rail": info.rail,
        "pod": info.pod,
        "block": info.block,
        "connected": bool(v is not None and v.connected),
        "converged": bool(v is not None and v.converged),
    }


def alarms_json(core: DecisionCore, switch: str = "") -> dict[str, Any]:
    """Active alarms (of `switch` only, when given), most severe then oldest first: at most
    MAX_ALARMS of them, and how many there are."""
    order = {"critical": 0, "warning": 1, "info": 2}
    active = [a for a in core.alarms.active.values() if not switch or a.switch == switch]
    active.sort(key=lambda a: (order.get(a.severity, 1), alarm_key(a)))
    return {
        "total": len(active),
        "alarms": [to_json(alarm_message(a)) for a in active[:MAX_ALARMS]],
    }


class _Groups:
    """The links of each rail and pod, by position in the plan's order (a link is in the rail
    and pod of each of its ends). Built once per plan: ~0.2 s on a 100k-GPU fabric."""

    def __init__(self, ix: PlanIndex) -> None:
        self.keys = [link.key for link in ix.links]
        rails: dict[int, set[int]] = {}
        pods: dict[int, set[int]] = {}
        for s in ix.switches:
            positions = ix.links_of.get(s.name, [])
            if s.rail >= 0:
                rails.setdefault(s.rail, set()).update(positions)
            if s.pod >= 0:
                pods.setdefault(s.pod, set()).update(positions)
        self.rails = {r: itemgetter(*sorted(p)) for r, p in sorted(rails.items()) if p}
        self.pods = {r: itemgetter(*sorted(p)) for r, p in sorted(pods.items()) if p}


_groups: weakref.WeakKeyDictionary[PlanIndex, _Groups] = weakref.WeakKeyDictionary()


def _counts(states: Sequence[LinkState] | LinkState) -> dict[str, int]:
    """Every state's count, 0 included (a single position's getter gives one state). By
    `count`, which compares by identity in C: hashing an enum runs Python code."""
    counted = states if isinstance(states, Sequence) else (states,)
    return {s.value: counted.count(s) for s in LinkState}


def summary(core: DecisionCore, ix: PlanIndex) -> dict[str, Any]:
    """The whole fabric in figures: switches by role, links by state, per rail and per pod
    (a link counts for each rail and pod one of its ends is in), the alarms, and the
    telemetry (the traffic matrix by rail). Its size grows with rails and pods, not links; its
    time with links, in C (Counter, itemgetter) but for one state lookup per link."""
    groups = _groups.get(ix)
    if groups is None:
        groups = _groups[ix] = _Groups(ix)
    states = core.tracker.states(groups.keys)
    roles = Counter(ROLES.get(s.role, "unknown") for s in ix.switches)
    # A miswired cable may well have carrier: count the ports LLDP finds miswired.
    miswired_ports = sum(1 for a in core.alarms.active.values() if a.kind == MISWIRE)
    return {
        "fabric": core.planner.fabric_name,
        "counts": {
            "switches": len(ix.switches),
            "links": len(ix.links),
            "host_nics": core.planner.host_nic_count(),
        },
        "roles": {role: roles.get(role, 0) for role in ("tor", "spine", "core")},
        "links_by_state": {
            **_counts(states),
            "drained": sum(1 for key in core.drains if key in ix.link_pos),
            "miswired_ports": miswired_ports,
        },
        "rails": [
            {"rail": r, "links_by_state": _counts(get(states))} for r, get in groups.rails.items()
        ],
        "pods": [
            {"pod": p, "links_by_state": _counts(get(states))} for p, get in groups.pods.items()
        ],
        "sessions": sum(1 for v in core.views.values() if v.connected),
        "draw_whole": len(ix.links) <= DRAW_WHOLE_LINKS,
        "max_view_links": MAX_VIEW_LINKS,
        "alarms": alarms_json(core),
        "telemetry": telemetry(core),
    }


@dataclass(frozen=True)
class Scope:
    """Which part of the fabric a view draws: every link, or those with an end on a switch
    of `rail` and/or of `pod` (-1: the switches that serve every rail or pod do not match)."""

    rail: int | None = None
    pod: int | None = None


def parse_scope(ix: PlanIndex, rail: str | None, pod: str | None) -> Scope:
    def number(name: str, text: str | None, have: Sequence[int]) -> int | None:
        if text is None or text == "":
            return None
        try:
            value = int(text)
        except ValueError:
            raise BadQuery(f"{name}: {text!r} is not a number") from None
        if value not in have:
            raise BadQuery(f"{name}: {value} is not a {name} of this fabric (its {name}s: "
                           f"{', '.join(map(str, have)) or 'none'})")  # fmt: skip
        return value

    pods = sorted({s.pod for s in ix.switches if s.pod >= 0})
    return Scope(number("rail", rail, ix.rails), number("pod", pod, pods))


def _scope_positions(ix: PlanIndex, scope: Scope) -> Sequence[int]:
    """Positions of the scope's links in the plan's order (the admin API's order)."""
    if scope.rail is None and scope.pod is None:
        return range(len(ix.links))
    found: set[int] = set()
    for s in ix.switches:
        if (scope.rail is None or s.rail == scope.rail) and (
            scope.pod is None or s.pod == scope.pod
        ):
            found.update(ix.links_of[s.name])
    return sorted(found)


def view(
    admin: AdminService, scope: Scope, offset: int, at: Now, limit: int = MAX_VIEW_LINKS
) -> dict[str, Any]:
    """One page of the links of `scope` (at most `limit`, from `offset`), and on the first
    page every switch those links join (at most every switch of the fabric)."""
    if offset < 0:
        raise BadQuery(f"offset: {offset} is negative")
    core, ix = admin.fabric, admin.index()
    positions = _scope_positions(ix, scope)
    page = positions[offset : offset + limit]
    info = admin.link_infos(at)
    links = ix.links
    out: dict[str, Any] = {
        "scope": {"rail": scope.rail, "pod": scope.pod},
        "total_links": len(positions),
        "offset": offset,
        "next_offset": offset + len(page) if offset + len(page) < len(positions) else None,
        "links": [link_json(core, info(links[p], p)) for p in page],
    }
    if offset == 0:
        if scope.rail is None and scope.pod is None:
            shown: Sequence[admin_pb2.SwitchInfo] = ix.switches  # those without links too
        else:
            names = {end for p in positions for end in (links[p].a[0], links[p].b[0])}
            shown = [ix.switches[i] for i in sorted(map(ix.switch_pos.__getitem__, names))]
        out["switches"] = [switch_json(core, info) for info in shown]
    return out


def link_by_key(admin: AdminService, key: str, at: Now) -> dict[str, Any] | None:
    """The link `key` as `view` shows it; None when the plan has no such link (a reload)."""
    ix = admin.index()
    pos = ix.link_pos.get(key)
    if pos is None:
        return None
    info = admin.link_infos(at)(ix.links[pos], pos)
    return link_json(admin.fabric, info)


def switch_page(admin: AdminService, name: str) -> dict[str, Any]:
    """A switch's page: its status as ListSwitches gives it, its interfaces and counters as
    ListInterfaces gives them, its links and its alarms. UnknownSwitch names the closest."""
    core, ix = admin.fabric, admin.index()
    v = core.view(name)  # UnknownSwitch with the closest name
    info = ix.switches[ix.switch_pos[v.name]]
    at_links = admin.link_infos(now())
    return {
        "switch": switch_json(core, info),
        "status": to_json(switch_status(v, info)),
        "interfaces": [to_json(i) for i in interfaces(core, v.name, 0)],
        "links": [link_json(core, at_links(ix.links[p], p)) for p in ix.links_of.get(v.name, [])],
        "alarms": alarms_json(core, v.name),
    }
