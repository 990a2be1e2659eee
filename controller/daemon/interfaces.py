"""ListInterfaces: each port as observed (the agent's ports and carrier, its last two counter
reports) next to the plan (speed, who is cabled there). Behind `railctl interfaces`,
`counters`, `pfc` and `ecn`.

Observed means what the agent said: a port it never reported is UNKNOWN, whatever the plan.
Rates are the growth between the agent's last two Counters over the time between them (their
own wall_ns); they are absent before the second report, and when a counter went backwards
(the target restarted), until the next one."""

from __future__ import annotations

import difflib

from controller.core import roce
from controller.core.cabling import CablingPlan, lldp_peer, plan_peer
from controller.core.machine import DecisionCore
from controller.core.switches import SwitchView
from railfabric.fabric_counters import roce_cell
from railfabric.v1 import admin_pb2, control_pb2


class UnknownPort(ValueError):
    pass


def interfaces(core: DecisionCore, switch: str, port: int) -> list[admin_pb2.Interface]:
    """The interfaces of `switch` (every switch when empty), only `port` when not 0; by
    switch name, then port. Raises UnknownSwitch, or UnknownPort naming the ports there are."""
    views = [core.view(switch)] if switch else sorted(core.views.values(), key=lambda v: v.name)
    out: list[admin_pb2.Interface] = []
    for v in views:
        ports = switch_ports(v)
        if port:
            if port not in ports:
                raise UnknownPort(f"{v.name} has no port {port}{_closest_port(port, ports)}")
            ports = [port]
        out.extend(_Switch(v, core.cabling.plan).interface(p) for p in ports)
    return out


def switch_ports(v: SwitchView) -> list[int]:
    """The planned ports and any the agent reported beyond them, ascending."""
    return sorted(set(v.ports).union(v.port_carrier))


def _closest_port(port: int, ports: list[int]) -> str:
    if not ports:
        return " (it has no ports)"
    close = difflib.get_close_matches(str(port), [str(p) for p in ports], n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f" (ports: {', '.join(str(p) for p in ports)}){hint}"


class _Switch:
    """One view's facts by port, looked up once per switch."""

    def __init__(self, v: SwitchView, plan: CablingPlan) -> None:
        self.v = v
        self.plan = plan
        heard = v.neighbors
        self.heard = {n.port: n for n in heard.neighbors} if heard is not None else {}
        self.speed = {p.port: p.speed_mbps for p in v.state.ports}
        self.neighbor = {n.port: n for n in v.state.neighbors}
        self.last = {c.port: c for c in v.last_counters.ports} if v.last_counters else {}
        self.prev_counters = prev = v.prev_counters
        self.prev = {c.port: c for c in prev.ports} if prev is not None else {}
        counts = roce.counts_of(v.last_counters) if v.last_counters else {}
        before = roce.counts_of(prev) if prev is not None else {}
        cnp = control_pb2.ROCE_KIND_CNP
        self.last_cnps = roce.port_totals(counts, cnp)
        self.prev_cnps = roce.port_totals(before, cnp)
        self.roce: dict[int, list[control_pb2.RoceCount]] = {}
        for cell in sorted(counts):
            port, tc, kind = roce_cell(cell)
            kind_value = control_pb2.RoceKind.ValueType(kind)
            self.roce.setdefault(port, []).append(
                control_pb2.RoceCount(traffic_class=tc, kind=kind_value, packets=counts[cell])
            )

    def interface(self, port: int) -> admin_pb2.Interface:
        v = self.v
        out = admin_pb2.Interface(switch_name=v.name, port=port)
        carrier = v.port_carrier.get(port)
        if carrier is None:
            out.oper = admin_pb2.OPER_STATE_UNKNOWN
        else:
            out.ifname = v.port_names.get(port, "")
            out.oper = admin_pb2.OPER_STATE_UP if carrier else admin_pb2.OPER_STATE_DOWN
        out.speed_mbps = self.speed.get(port, 0)
        neighbor = self.neighbor.get(port)
        if neighbor is not None:
            out.plan_peer.CopyFrom(plan_peer(neighbor))
        heard = self.heard.get(port)
        if heard is not None:
            out.lldp_peer.CopyFrom(lldp_peer(heard, self.plan))
        last = self.last.get(port)
        if last is None or v.last_counters is None:
            return out
        out.counters.CopyFrom(last)
        out.counters_wall_ns = v.last_counters.wall_ns
        out.roce.extend(self.roce.get(port, ()))
        prev = self.prev.get(port)
        if prev is None or self.prev_counters is None:
            return out
        window_ns = v.last_counters.wall_ns - self.prev_counters.wall_ns
        grew = [
            last.rx_packets - prev.rx_packets,
            last.tx_packets - prev.tx_packets,
            last.rx_bytes - prev.rx_bytes,
            last.tx_bytes - prev.tx_bytes,
        ]
        if window_ns <= 0 or min(grew) < 0:
            return out
        seconds = window_ns / 1e9
        out.rate_window_ns = window_ns
        out.rx_packets_per_s = grew[0] / seconds
        out.tx_packets_per_s = grew[1] / seconds
        out.rx_bits_per_s = grew[2] * 8 / seconds
        out.tx_bits_per_s = grew[3] * 8 / seconds
        cnps = self.last_cnps.get(port, 0) - self.prev_cnps.get(port, 0)
        if cnps >= 0:  # fewer: the target's counters restarted
            out.cnp_per_s = cnps / seconds
        return out
