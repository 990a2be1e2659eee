"""Path prediction: the exact hop-by-hop path of a flow, with the data plane's hash and member
choice (railfabric.ecmp: crc32 over the packed 5-tuple, the RoCEv2 destination QP folded into
the source port when the fabric's `ecmp.hash` says so, hash % live members, members in
creation order). Agents create members in ascending port order, so that is the default
creation order; `creation_order` overrides it where a target's groups were built otherwise
(e.g. the bmv2 test vectors, whose members were created as ports 4, 2, 5, 3).

Mesh probes (agent/probes.py) are flows too: IPv4 protocol 253 between two ToRs' probe
addresses, with no L4 header, so the selector hashes ports 0 (p4/include/parser.p4 extracts
ports from UDP and TCP only; softswitch does the same). `predict_probe` follows one: sent by the
source ToR's agent out of a named uplink (a packet-out, no table sees it), routed by ECMP from
the switch at the far end of that cable, punted to the destination ToR's agent (its ACL takes
protocol 253 before routing); the answer leaves the destination ToR out of the port the probe
came in on, and is routed back the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller.export import probe_address
from controller.fabric import CPU_PORT, ipv4_str
from controller.routing import FabricRouting, Group
from railfabric import ecmp, latency
from railfabric.v1 import admin_pb2

# (switch name, group) -> the group's member ports in the order the target created them.
CreationOrder = Callable[[str, Group], Sequence[int]]

MAX_HOPS = 16


class PathError(ValueError):
    """The flow cannot be predicted (unknown source, bad field)."""


@dataclass(frozen=True)
class Flow:
    src_ip: int
    dst_ip: int
    proto: int
    sport: int
    dport: int
    # RoCEv2 destination QP: hashed when the fabric's ecmp.hash is five_tuple_qp.
    dst_qp: int | None = None

    def __post_init__(self) -> None:
        for name, value, high in (
            ("protocol", self.proto, 255),
            ("source port", self.sport, 65535),
            ("destination port", self.dport, 65535),
            ("destination QP", self.dst_qp or 0, ecmp.QP_MAX),
        ):
            if not 0 <= value <= high:
                raise PathError(f"{name} {value} is outside 0..{high}")

    def hash(self, fields: ecmp.HashFields) -> int:
        """The selector's hash of this flow on a fabric hashing `fields`."""
        sport = ecmp.hashed_sport(fields, self.proto, self.sport, self.dport, self.dst_qp)
        return ecmp.flow_hash(self.src_ip, self.dst_ip, self.proto, sport, self.dport)


@dataclass(frozen=True)
class Hop:
    switch: str
    ingress_port: int
    egress_port: int
    group_id: int
    live_members: int
    member_index: int
    hash: int


@dataclass(frozen=True)
class Path:
    flow: Flow
    hash: int
    # The source NIC's full name; a probe's source ToR.
    source: str
    hops: tuple[Hop, ...]
    # Full NIC name when the flow arrives (a probe: the ToR whose agent takes it), else None
    # and `error` says where it stops.
    delivered_to: str | None
    error: str = ""

    def to_response(self) -> admin_pb2.PredictPathResponse:
        """The admin API's answer for this path: what the controller serves and what offline
        `railctl path` prints, so both have one shape."""
        return admin_pb2.PredictPathResponse(
            hops=[
                admin_pb2.PathHop(
                    switch_name=h.switch,
                    ingress_port=h.ingress_port,
                    egress_port=h.egress_port,
                    group_id=h.group_id,
                    live_members=h.live_members,
                    member_index=h.member_index,
                    hash=h.hash,
                )
                for h in self.hops
            ],
            delivered_to=self.delivered_to or "",
            error=self.error,
        )


def choose_next_hop(
    members_in_creation_order: Sequence[int], live: Callable[[int], bool], flow_hash: int
) -> tuple[int, int, int]:
    """(egress port, index among live members, number of live members)."""
    active = [port for port in members_in_creation_order if live(port)]
    index = flow_hash % len(active) if active else 0
    port = ecmp.choose_member(flow_hash, active)
    return port, index, len(active)


def predict_path(
    routing: FabricRouting, flow: Flow, creation_order: CreationOrder | None = None
) -> Path:
    """Follow the flow from its source NIC through the computed routes."""
    topo = routing.topo
    k = topo.nic_by_ip.get(flow.src_ip)
    if k is None:
        raise PathError(f"source {ipv4_str(flow.src_ip)} is not a NIC of the fabric")
    source = routing.topo.fabric.nics[k].full_name
    h = flow.hash(topo.fabric.ecmp_hash)
    if not routing.nic_live[k]:
        return Path(flow, h, source, (), None, f"{source} has no live link to its ToR")
    hops: list[Hop] = []
    delivered, error = _follow(
        routing,
        flow,
        h,
        topo.nic_switch[k],
        topo.nic_port[k],
        hops=hops,
        creation_order=creation_order,
    )
    return Path(flow, h, source, tuple(hops), delivered, error)


def _follow(
    routing: FabricRouting,
    flow: Flow,
    h: int,
    x: int,
    ingress: int,
    *,
    hops: list[Hop],
    creation_order: CreationOrder | None,
    punted_at: int | None = None,
) -> tuple[str | None, str]:
    """Route the flow from switch `x` (arrived on `ingress`) hop by hop, appending to `hops`,
    until it reaches its NIC or, for a probe, switch `punted_at` (whose ACL hands it to the
    agent: the last hop, egress the CPU port). (Where it arrived, None; or None, why not.)"""
    topo = routing.topo
    for _ in range(MAX_HOPS - len(hops)):
        name = topo.names[x]
        if x == punted_at:
            hops.append(Hop(name, ingress, CPU_PORT, 0, 0, 0, h))
            return name, ""
        group = routing.lookup(name, flow.dst_ip)
        if group is None:
            # The dropping switch is the last hop, with no egress: where the path ends.
            hops.append(Hop(name, ingress, 0, 0, 0, 0, h))
            return None, f"{name} has no route to {ipv4_str(flow.dst_ip)}: dropped"
        order = list(creation_order(name, group)) if creation_order else list(group.ports)
        members = set(group.ports)
        order = [p for p in order if p in members]
        if group.weights:
            # A target without weights holds `weight` copies of a member, made one after the
            # other: the agents' convention, so the copies sit together in creation order.
            weight = dict(zip(group.ports, group.weights, strict=True))
            order = [p for p in order for _ in range(weight[p])]

        def live(port: int, switch: str = name) -> bool:
            return routing.is_link_live(switch, port)

        port, index, count = choose_next_hop(order, live, h)
        hops.append(Hop(name, ingress, port, group.id, count, index, h))
        owner = topo.owner(x, port)
        assert owner is not None  # groups only hold cabled ports
        is_nic, ident = owner
        if is_nic:
            nic = topo.fabric.nics[ident]
            if nic.ipv4 == flow.dst_ip and punted_at is None:
                return nic.full_name, ""
            return None, f"{name} sent it to {nic.full_name}, not the destination"
        x, ingress = _far_end(routing, x, ident)
    return None, f"no delivery after {MAX_HOPS} hops (loop?)"


def _far_end(routing: FabricRouting, x: int, link: int) -> tuple[int, int]:
    """(switch, port) at the other end of switch-to-switch cable `link` from switch `x`."""
    a, a_port, b, b_port = routing.topo.link_ends[link]
    return (b, b_port) if a == x else (a, a_port)


def link_keys(routing: FabricRouting, path: Path) -> tuple[str, ...]:
    """The switch-to-switch cables `path` crosses, in order (controller.fabric Link.key; the
    planner's PlannedLink.key): the egress of every hop that leaves on one."""
    topo = routing.topo
    keys = []
    for hop in path.hops:
        owner = topo.owner(topo.index[hop.switch], hop.egress_port)
        if owner is not None and not owner[0]:
            keys.append(topo.fabric.links[owner[1]].key)
    return tuple(keys)


@dataclass(frozen=True)
class ProbePath:
    """A mesh probe and its answer (each a Path whose source and destination are ToRs)."""

    request: Path
    reply: Path

    def link_keys(self, routing: FabricRouting) -> tuple[str, ...]:
        """The cables the probe and then its answer cross, each once, in the order first
        crossed (the answer's first cable is the probe's last, reversed)."""
        keys = link_keys(routing, self.request) + link_keys(routing, self.reply)
        return tuple(dict.fromkeys(keys))


def probe_flow(src_address: int, dst_address: int) -> Flow:
    """A mesh probe between two probe addresses: protocol 253, no ports (they hash as 0)."""
    return Flow(src_address, dst_address, latency.PROBE_IP_PROTO, 0, 0)


def predict_probe(
    routing: FabricRouting,
    src_tor: str,
    port: int,
    dst_tor: str,
    creation_order: CreationOrder | None = None,
) -> ProbePath:
    """The path of a mesh probe from `src_tor` sent out of its uplink `port` to `dst_tor`,
    and of the answer. PathError when it cannot be predicted: a name that is not a ToR, a port
    that is not a live uplink, or a probe or answer that the routes would drop."""
    topo = routing.topo
    tors = []
    for name in (src_tor, dst_tor):
        x = topo.index.get(name)
        if x is None or topo.dest_of[x] < 0:
            raise PathError(f"{name!r} is not a ToR of the fabric")
        tors.append(x)
    src, dst = tors
    if src == dst:
        raise PathError(f"{src_tor} does not probe itself")
    owner = topo.owner(src, port)
    if owner is None or owner[0]:
        raise PathError(f"{src_tor}:{port} is not an uplink")
    if not routing.link_live[owner[1]]:
        raise PathError(f"{src_tor}:{port} is down: no probe leaves on it")
    src_address = probe_address(routing, src_tor)
    dst_address = probe_address(routing, dst_tor)
    request = _probe_leg(
        routing,
        probe_flow(src_address, dst_address),
        src,
        port,
        dst,
        creation_order=creation_order,
    )
    # The far switch's data plane answers out of the port the probe came in on (answer_probe):
    # the same cable back.
    arrived_on = request.hops[-1].ingress_port
    reply = _probe_leg(
        routing,
        probe_flow(dst_address, src_address),
        dst,
        arrived_on,
        src,
        creation_order=creation_order,
    )
    return ProbePath(request, reply)


def _probe_leg(
    routing: FabricRouting,
    flow: Flow,
    src: int,
    port: int,
    dst: int,
    *,
    creation_order: CreationOrder | None,
) -> Path:
    """One way of a probe: a packet-out of `src`'s agent on `port` (the first hop, no group),
    then routed to `dst`, whose agent takes it. PathError unless it arrives."""
    topo = routing.topo
    h = flow.hash(topo.fabric.ecmp_hash)
    source = topo.names[src]
    hops = [Hop(source, CPU_PORT, port, 0, 0, 0, h)]
    owner = topo.owner(src, port)
    assert owner is not None and not owner[0]
    x, ingress = _far_end(routing, src, owner[1])
    delivered, error = _follow(
        routing, flow, h, x, ingress, hops=hops, creation_order=creation_order, punted_at=dst
    )
    if delivered is None:
        raise PathError(f"probe {source} -> {topo.names[dst]}: {error}")
    return Path(flow, h, source, tuple(hops), delivered, error)
