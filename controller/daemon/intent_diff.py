"""What an intent would change against the running one (`railctl diff`, `DiffIntent`, and the
reload guard `--reload-max-withdraw`).

Switches and links are compared by name and key; routes per switch as egress port sets (what
the switch does, whatever its group ids), the running side from the desired states the core
holds, the new side computed from scratch over the same links routing avoids today (unusable
or drained): what a reload would serve. A route the new intent lacks is withdrawn (every route
of a switch it drops included), one it has and the running intent does not is added, one whose
ports differ is changed.

`running` is taken on the event loop (each desired state serialized: the core applies deltas
to its states in place, so a thread must not read them while the loop goes on); `diff` runs
off it (asyncio.to_thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.core.machine import DecisionCore
from controller.daemon.core_planner import CorePlanner
from controller.routing import FabricRouting, LinkEvent
from railfabric.v1 import admin_pb2, state_pb2

Prefix = tuple[int, int]  # (address, length)
Routes = dict[Prefix, tuple[int, ...]]  # prefix -> egress ports, ascending


@dataclass(frozen=True)
class Running:
    """The running intent, as a diff needs it."""

    fabric_name: str
    # Each switch's desired state, serialized (a copy the loop's deltas do not reach).
    states: Mapping[str, bytes]
    links: frozenset[str]
    # Links routing avoids now: unusable as observed, or drained.
    unroutable: frozenset[str]
    routes_installed: int


def running(core: DecisionCore) -> Running:
    """On the event loop: what the core holds now, each state serialized (in C, ~140 us for a
    ref-100k ToR's; a message copy takes three times that)."""
    return Running(
        fabric_name=core.planner.fabric_name,
        states={name: v.state.SerializeToString() for name, v in core.views.items()},
        links=frozenset(link.key for link in core.links()),
        unroutable=frozenset(core.unroutable_links()),
        routes_installed=sum(len(v.state.routes) for v in core.views.values()),
    )


def state_routes(state: state_pb2.DesiredState) -> Routes:
    groups = {g.id: tuple(sorted(nh.port for nh in g.next_hops)) for g in state.groups}
    return {(r.prefix.address, r.prefix.length): groups.get(r.group_id, ()) for r in state.routes}


def planned_routes(planner: CorePlanner, unroutable: frozenset[str]) -> dict[str, Routes]:
    """Every switch's routes under the new intent, with today's unroutable links out."""
    down = [
        LinkEvent(link.a[0], link.a[1], up=False)
        for link in planner.links()
        if link.key in unroutable
    ]
    routing = FabricRouting(planner.fabric, down=down)
    out: dict[str, Routes] = {}
    for info in planner.switches():
        x = routing.switch_index(info.name)
        ports = routing.group_ports[x]
        out[info.name] = {
            (address, length): tuple(sorted(ports[gid]))
            for address, length, gid in routing.route_triples(info.name)
        }
    return out


def _change(prefix: Prefix, old: tuple[int, ...], new: tuple[int, ...]) -> admin_pb2.RouteChange:
    return admin_pb2.RouteChange(
        prefix=state_pb2.Ipv4Prefix(address=prefix[0], length=prefix[1]),
        old_ports=old,
        new_ports=new,
    )


def diff(run: Running, planner: CorePlanner) -> admin_pb2.DiffIntentResponse:
    """Off the event loop: `planner` (the new intent, loaded as a reload loads it) against
    `run`."""
    new_links = {link.key for link in planner.links()}
    new_routes = planned_routes(planner, run.unroutable)
    reply = admin_pb2.DiffIntentResponse(
        fabric_name=planner.fabric_name,
        switches_added=sorted(set(new_routes) - set(run.states)),
        switches_removed=sorted(set(run.states) - set(new_routes)),
        links_added=sorted(new_links - run.links),
        links_removed=sorted(run.links - new_links),
        routes_installed=run.routes_installed,
    )
    for name in sorted(set(new_routes) | set(run.states)):
        data = run.states.get(name)
        old = state_routes(state_pb2.DesiredState.FromString(data)) if data is not None else {}
        new = new_routes.get(name, {})
        if old == new:
            continue
        sw = admin_pb2.SwitchDiff(switch_name=name)
        for prefix in sorted(new.keys() - old.keys()):
            sw.added.append(_change(prefix, (), new[prefix]))
        for prefix in sorted(old.keys() - new.keys()):
            sw.removed.append(_change(prefix, old[prefix], ()))
        for prefix in sorted(old.keys() & new.keys()):
            if old[prefix] != new[prefix]:
                sw.changed.append(_change(prefix, old[prefix], new[prefix]))
        reply.routes_added += len(sw.added)
        reply.routes_withdrawn += len(sw.removed)
        reply.routes_changed += len(sw.changed)
        reply.switches.append(sw)
    return reply


def withdraw_share(reply: admin_pb2.DiffIntentResponse) -> float:
    """The share of the installed routes the change withdraws (0 when none is installed)."""
    if not reply.routes_installed:
        return 0.0
    return reply.routes_withdrawn / reply.routes_installed
