"""The Planner the daemon runs on: the controller core (intent, routing, QoS, export, path)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from controller import export
from controller.core.cabling import ServerLldp
from controller.core.latency import LatencyParams
from controller.core.planner import Isolation, PlannedLink
from controller.core.roce import RoceParams
from controller.fabric import Fabric, Role
from controller.intent import load_fabric
from controller.path import Flow, PathError, predict_path, predict_probe
from controller.routing import FabricRouting, LinkEvent, _Topo
from railfabric import ecmp
from railfabric.v1 import admin_pb2, state_pb2

_ROLE = {
    Role.TOR: admin_pb2.SWITCH_ROLE_TOR,
    Role.SPINE: admin_pb2.SWITCH_ROLE_SPINE,
    Role.CORE: admin_pb2.SWITCH_ROLE_CORE,
}


def _opt(value: int | None) -> int:
    return -1 if value is None else value


class CorePlanner:
    def __init__(
        self, fabric: Fabric, unusable: Collection[str] = (), *, like: CorePlanner | None = None
    ) -> None:
        """`unusable`: link keys routing starts without (computed from scratch so). `like`: a
        planner of the same intent, whose links, switches and compiled fabric are shared."""
        self.fabric = fabric
        # Computed when first needed: a cold start wants it with every link out
        # (set_all_unusable), and computing it twice costs seconds on a 100k-GPU fabric.
        self._routing: FabricRouting | None = None
        self._topo: _Topo | None = None
        self._unusable = frozenset(unusable)
        self.last_compute_ns = 0
        self._links: tuple[PlannedLink, ...]
        self._by_key: dict[str, PlannedLink]
        self._switches: tuple[admin_pb2.SwitchInfo, ...]
        if like is not None:
            if like.fabric is not fabric:
                raise ValueError("a planner shares its links only with one of the same intent")
            # Immutable, and derived from the intent alone: a rebuild's planner made its own
            # until the next, 44.6 MiB on ref-100k (135,168 links twice).
            self._topo = like._topo
            self._links, self._by_key, self._switches = like._links, like._by_key, like._switches
            return
        self._links = tuple(
            PlannedLink(
                link.key,
                (link.a, link.a_port),
                (link.b, link.b_port),
                link.speed_mbps,
                link.length_m,
            )
            for link in fabric.links
        )
        self._by_key = {link.key: link for link in self._links}
        self._switches = tuple(
            admin_pb2.SwitchInfo(
                name=sw.name,
                role=_ROLE[sw.role],
                rail=_opt(sw.rail),
                pod=_opt(sw.pod),
                block=_opt(sw.block),
                prefix=str(sw.prefix) if sw.prefix else "",
            )
            for sw in fabric.switches
        )

    @property
    def routing(self) -> FabricRouting:
        if self._routing is None:
            self._routing = self._from_scratch(self._unusable)
        return self._routing

    def _from_scratch(self, unusable: Collection[str]) -> FabricRouting:
        down = [LinkEvent(*link.a, False) for link in self._links if link.key in unusable]
        routing = FabricRouting(self.fabric, down=down, topo=self._topo)
        # The compiled fabric is immutable; export keeps what it derived from it (each
        # switch's ports, neighbours and QoS, serialized) for as long as it lives.
        self._topo = routing.topo
        return routing

    @property
    def fabric_name(self) -> str:
        return self.fabric.name

    def switches(self) -> Sequence[admin_pb2.SwitchInfo]:
        return self._switches

    def links(self) -> Sequence[PlannedLink]:
        return self._links

    def host_nic_count(self) -> int:
        return len(self.fabric.nics)

    @property
    def server_lldp(self) -> ServerLldp:
        lldp = self.fabric.lldp
        return ServerLldp(lldp.expect_servers, lldp.server_ttl_s * 1_000_000_000)

    @property
    def roce(self) -> RoceParams:
        r = self.fabric.roce
        return RoceParams(
            nak_alarm_per_s=r.nak_alarm_per_s,
            cnp_alarm_per_s=r.cnp_alarm_per_s,
            cnp_alarm_ns=r.cnp_alarm_s * 1_000_000_000,
            window_ns=r.window_s * 1_000_000_000,
            sample_interval_us=r.nak_sample_interval_us,
            qp_hashed=self.fabric.ecmp_hash is ecmp.HashFields.FIVE_TUPLE_QP,
        )

    @property
    def latency(self) -> LatencyParams:
        lat = self.fabric.latency
        return LatencyParams(
            probing=lat.interval_ms > 0,
            window_ns=lat.window_s * 1_000_000_000,
            baseline_ns=lat.baseline_s * 1_000_000_000,
            outlier_margin_ns=lat.outlier_margin_us * 1_000,
            loss_outlier=lat.loss_outlier,
            min_samples=lat.min_samples,
        )

    def state_parts(self, switch: str) -> tuple[state_pb2.DesiredState, bytes]:
        return export.state_parts(self.routing, switch)

    def route_counts(self, switch: str) -> Mapping[int, int]:
        return self.routing.routes_per_group(switch)

    def set_links_usable(
        self, changes: Sequence[tuple[str, bool]], *, deltas: bool = True
    ) -> Mapping[str, state_pb2.StateDelta]:
        by_key = self._by_key
        events = [LinkEvent(*by_key[key].a, usable) for key, usable in changes]
        t0 = time.perf_counter_ns()
        changed = self.routing.apply(events)
        self.last_compute_ns = time.perf_counter_ns() - t0
        if not deltas:
            return {}
        return {
            name: export.state_delta(self.routing, delta, 0, with_digest=False)
            for name, delta in changed.items()
        }

    def isolation(self, unusable: Collection[str]) -> Isolation:
        routing = self.routing
        topo = routing.topo
        out = [self._by_key[key] for key in unusable]
        before = routing.tor_reach()
        after = routing.tor_reach(LinkEvent(link.a[0], link.a[1], False) for link in out)
        nics = [[k for k in topo.host_nics[x] if routing.nic_live[k]] for x in topo.dest_switch]
        tor_pairs = nic_pairs = 0
        example: tuple[int, int] | None = None
        for i, (now, then) in enumerate(zip(before, after, strict=True)):
            lost = (now & ~then) >> (i + 1)  # each unordered pair once
            j = i
            while lost:
                step = (lost & -lost).bit_length()
                j += step
                lost >>= step
                tor_pairs += 1
                nic_pairs += len(nics[i]) * len(nics[j])
                if example is None:
                    example = (i, j)
        if example is None:
            return Isolation()
        names = tuple(topo.names[topo.dest_switch[d]] for d in example)
        nic_names = tuple(
            self.fabric.nics[nics[d][0]].full_name if nics[d] else "" for d in example
        )
        return Isolation(tor_pairs, nic_pairs, (names[0], names[1]), (nic_names[0], nic_names[1]))

    def set_all_unusable(self) -> None:
        # From scratch, not as 135k incremental events (19 s on ref-100k). Deterministic, so
        # a routing log replayed on it numbers groups as the agents hold them.
        self._routing = self._from_scratch(self._by_key)

    def fresh(self) -> CorePlanner:
        # Same intent: the compiled fabric, and what export derived from it, carry over (on
        # ref-100k, building every switch's ports, neighbours and QoS again cost seconds).
        return CorePlanner(self.fabric, like=self)

    def probe_path(self, src_tor: str, port: int, dst_tor: str) -> Sequence[str] | None:
        if port == 0:  # the uplinks merged: no one path
            return None
        try:
            probe = predict_probe(self.routing, src_tor, port, dst_tor)
        except PathError:
            return None
        return probe.link_keys(self.routing)

    def matrix_destinations(self) -> Sequence[str]:
        return export.matrix_destinations(self.routing)

    def roce_hops(
        self, src_ip: int, dst_ip: int, sport: int, dst_qp: int | None
    ) -> Sequence[tuple[str, int]] | None:
        try:
            flow = Flow(src_ip, dst_ip, 17, sport, ecmp.ROCEV2_UDP_PORT, dst_qp=dst_qp)
            path = predict_path(self.routing, flow)
        except (PathError, ValueError):
            return None  # not a NIC of the fabric (a sample from outside it), or no flow
        if path.delivered_to is None or not path.hops:
            return None
        return tuple((h.switch, h.egress_port) for h in path.hops)

    def predict_path(self, request: admin_pb2.PredictPathRequest) -> admin_pb2.PredictPathResponse:
        try:
            flow = Flow(
                src_ip=int(ipaddress.IPv4Address(request.src_ip)),
                dst_ip=int(ipaddress.IPv4Address(request.dst_ip)),
                proto=request.protocol or 17,
                sport=request.sport,
                dport=request.dport or ecmp.ROCEV2_UDP_PORT,
                dst_qp=request.dst_qp or None,
            )
            path = predict_path(self.routing, flow)
        except (ipaddress.AddressValueError, PathError) as err:
            raise ValueError(str(err)) from None
        return path.to_response()


def load_planner(path: Path) -> CorePlanner:
    """Load and validate a fabric intent (IntentError names file, line and field)."""
    return CorePlanner(load_fabric(path))
