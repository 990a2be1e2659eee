"""Computed state -> the controller/agent API (railfabric.v1 state.proto).

`desired_state` is one switch's full snapshot (ports, neighbours, groups, routes, QoS) with
its digest; `state_delta` turns a routing `SwitchDelta` into the `StateDelta` an agent
applies. QoS objects depend only on the cabling plan, so link events never change them.
"""

from __future__ import annotations

import hashlib

from controller import qos
from controller.fabric import Prefix
from controller.routing import FabricRouting, Group, Route, SwitchDelta
from railfabric.digest import state_digest
from railfabric.v1 import state_pb2


def _prefix(p: Prefix) -> state_pb2.Ipv4Prefix:
    return state_pb2.Ipv4Prefix(address=p.address, length=p.length)


def group_message(group: Group) -> state_pb2.NextHopGroup:
    return state_pb2.NextHopGroup(
        id=group.id,
        next_hops=[
            state_pb2.NextHop(port=nh.port, dmac=nh.dmac, weight=nh.weight)
            for nh in group.next_hops
        ],
        truncated=False,  # oversize sets are split, never cut (routing.split_notices)
    )


def route_message(route: Route) -> state_pb2.Route:
    return state_pb2.Route(prefix=_prefix(route.prefix), group_id=route.group_id)


def _qos_params(routing: FabricRouting) -> qos.QosParams:
    return qos.resolve(routing.topo.fabric.qos)


def desired_state(
    routing: FabricRouting,
    switch: str,
    generation: int = 0,
    qos_params: qos.QosParams | None = None,
) -> state_pb2.DesiredState:
    """The full desired state of `switch`, digest filled in (railfabric.digest)."""
    x = routing.switch_index(switch)
    topo = routing.topo
    fabric = topo.fabric
    params = qos_params or _qos_params(routing)
    state = state_pb2.DesiredState(switch_name=switch, generation=generation)
    mac_base = topo.mac_base[x]
    for port in topo.ports(x):
        speed, length = topo.port_cable(x, port)
        state.ports.append(
            state_pb2.PortConfig(
                port=port, mac=mac_base | port, speed_mbps=speed, cable_length_m=length
            )
        )
        owner = topo.owner(x, port)
        assert owner is not None
        is_nic, ident = owner
        if is_nic:
            nic = fabric.nics[ident]
            state.neighbors.append(
                state_pb2.Neighbor(
                    port=port,
                    kind=state_pb2.PEER_KIND_HOST,
                    peer_name=nic.full_name,
                    peer_port=0,
                    peer_mac=nic.mac,
                    peer_ipv4=nic.ipv4,
                )
            )
        else:
            a, a_port, b, b_port = topo.link_ends[ident]
            peer, peer_port = (b, b_port) if a == x else (a, a_port)
            state.neighbors.append(
                state_pb2.Neighbor(
                    port=port,
                    kind=state_pb2.PEER_KIND_SWITCH,
                    peer_name=topo.names[peer],
                    peer_port=peer_port,
                    peer_mac=topo.mac_base[peer] | peer_port,
                )
            )
        ecn = qos.ecn_thresholds(speed, params)
        for tc in qos.ECN_CLASSES:
            state.ecn.append(
                state_pb2.EcnThreshold(
                    port=port,
                    traffic_class=int(tc),
                    kmin_bytes=ecn.kmin_bytes,
                    kmax_bytes=ecn.kmax_bytes,
                    pmax_ppm=ecn.pmax_ppm,
                )
            )
        pfc = qos.pfc_thresholds(speed, length, params)
        state.pfc.append(
            state_pb2.PfcSetting(
                port=port,
                priority=qos.LOSSLESS_PRIORITY,
                xoff_bytes=pfc.xoff_bytes,
                xon_bytes=pfc.xon_bytes,
                headroom_bytes=pfc.headroom_bytes,
            )
        )
    state.groups.extend(group_message(g) for g in routing.groups(switch))
    state.routes.extend(route_message(r) for r in routing.routes(switch))
    state.dscp_map.extend(
        state_pb2.DscpMapping(dscp=d, traffic_class=int(tc)) for d, tc in qos.dscp_map()
    )
    state.pfc_watchdog.detect_ns = params.pfc_watchdog_detect_ns
    state.pfc_watchdog.restore_ns = params.pfc_watchdog_restore_ns
    state.digest = _digest_of_canonical(state)
    return state


def _digest_of_canonical(state: state_pb2.DesiredState) -> str:
    """railfabric.digest.state_digest for a state whose repeated fields are already in the
    canonical order (as desired_state builds them), without its sorting copy: the digest of
    a 100k-GPU ToR's state costs a tenth. Tests check both agree."""
    generation = state.generation
    state.generation = 0
    state.digest = ""
    data = state.SerializeToString(deterministic=True)
    state.generation = generation
    return hashlib.sha256(data).hexdigest()


def state_delta(
    routing: FabricRouting,
    delta: SwitchDelta,
    from_generation: int,
    with_digest: bool = True,
) -> state_pb2.StateDelta:
    """The API form of a routing delta, from `from_generation` to the next. Call it after
    `routing.apply(...)` returned `delta`, so the digest is that of the new full state."""
    msg = state_pb2.StateDelta(
        switch_name=delta.switch,
        from_generation=from_generation,
        to_generation=from_generation + 1,
        upsert_groups=[group_message(g) for g in delta.upsert_groups],
        upsert_routes=[route_message(r) for r in delta.upsert_routes],
        delete_routes=[_prefix(p) for p in delta.delete_routes],
        delete_groups=list(delta.delete_groups),
    )
    if with_digest:
        msg.digest = desired_state(routing, delta.switch).digest
    return msg


def apply_delta(
    state: state_pb2.DesiredState, delta: state_pb2.StateDelta
) -> state_pb2.DesiredState:
    """What an agent holding `state` has after applying `delta` (the proto's apply order).
    Used by tests and by the daemon to keep its view of a switch without recomputing."""
    if delta.from_generation != state.generation:
        raise ValueError(
            f"{delta.switch_name}: delta from generation {delta.from_generation} does not "
            f"apply to generation {state.generation}"
        )
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    groups = {g.id: g for g in out.groups}
    for g in delta.upsert_groups:
        groups[g.id] = g
    routes = {(r.prefix.address, r.prefix.length): r for r in out.routes}
    for r in delta.upsert_routes:
        routes[(r.prefix.address, r.prefix.length)] = r
    for p in delta.delete_routes:
        routes.pop((p.address, p.length), None)
    for gid in delta.delete_groups:
        groups.pop(gid, None)
    del out.groups[:]
    out.groups.extend(groups[k] for k in sorted(groups))
    del out.routes[:]
    out.routes.extend(routes[k] for k in sorted(routes))
    out.generation = delta.to_generation
    out.digest = state_digest(out)
    return out
