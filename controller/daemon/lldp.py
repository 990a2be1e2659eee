"""ListLldp: each port's LLDP neighbour, as its agent last reported it, against the cabling plan
(`railctl lldp`). Peers are named by controller/core/cabling.py's `lldp_peer`, the function the
cabling check and ListInterfaces use, so the status here is the one the alarms are about."""

from __future__ import annotations

from controller.core.cabling import lldp_peer, lldp_status
from controller.core.machine import DecisionCore
from railfabric.v1 import admin_pb2, control_pb2


def lldp_ports(core: DecisionCore, switch: str) -> list[admin_pb2.LldpPort]:
    """The planned ports and the ports that heard someone, of `switch` (every switch when
    empty), by switch name then port. Raises UnknownSwitch."""
    views = [core.view(switch)] if switch else sorted(core.views.values(), key=lambda v: v.name)
    plan = core.cabling.plan
    out: list[admin_pb2.LldpPort] = []
    for v in views:
        heard: dict[int, control_pb2.LldpNeighbor] = (
            {n.port: n for n in v.neighbors.neighbors} if v.neighbors is not None else {}
        )
        for port in sorted(set(plan.ports.get(v.name, ())).union(heard)):
            planned = plan.planned((v.name, port))
            n = heard.get(port)
            seen = lldp_peer(n, plan) if n is not None else None
            row = admin_pb2.LldpPort(
                switch_name=v.name, port=port, status=lldp_status(planned, seen)
            )
            if planned is not None:
                row.planned.CopyFrom(planned)
            if n is not None and seen is not None:
                row.seen.CopyFrom(seen)
                row.chassis_id, row.port_id = n.chassis_id, n.port_id
                row.last_seen_wall_ns, row.ttl_s = n.last_seen_wall_ns, n.ttl_s
            out.append(row)
    return out
