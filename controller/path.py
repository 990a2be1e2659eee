"""Path prediction: the exact hop-by-hop path of a flow, with the data plane's hash and member
choice (railfabric.ecmp: crc32 over the packed 5-tuple, the RoCEv2 destination QP folded into
the source port when the fabric's `ecmp.hash` says so, hash % live members, members in
creation order). Agents create members in ascending port order, so that is the default
creation order; `creation_order` overrides it where a target's groups were built otherwise
(e.g. the bmv2 test vectors, whose members were created as ports 4, 2, 5, 3)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller.fabric import ipv4_str
from controller.routing import FabricRouting, Group
from railfabric import ecmp
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
    source: str
    hops: tuple[Hop, ...]
    # Full NIC name when the flow arrives, else None and `error` says where it stops.
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
    hops: list[Hop] = []
    x, ingress = topo.nic_switch[k], topo.nic_port[k]
    if not routing.nic_live[k]:
        return Path(flow, h, source, (), None, f"{source} has no live link to its ToR")
    for _ in range(MAX_HOPS):
        name = topo.names[x]
        group = routing.lookup(name, flow.dst_ip)
        if group is None:
            # The dropping switch is the last hop, with no egress: where the path ends.
            hops.append(Hop(name, ingress, 0, 0, 0, 0, h))
            error = f"{name} has no route to {ipv4_str(flow.dst_ip)}: dropped"
            return Path(flow, h, source, tuple(hops), None, error)
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
            if nic.ipv4 == flow.dst_ip:
                return Path(flow, h, source, tuple(hops), nic.full_name)
            error = f"{name} sent it to {nic.full_name}, not the destination"
            return Path(flow, h, source, tuple(hops), None, error)
        a, a_port, b, b_port = topo.link_ends[ident]
        x, ingress = (b, b_port) if a == x else (a, a_port)
    return Path(flow, h, source, tuple(hops), None, f"no delivery after {MAX_HOPS} hops (loop?)")
