"""Per-switch and per-NIC views of an explicit fabric, for the agents and the labs: every
port with its peer, MACs, speed and cable length; every NIC with its address, MAC, gateway."""

from __future__ import annotations

from dataclasses import dataclass

from controller.fabric import Fabric, Role


@dataclass(frozen=True, slots=True)
class PortView:
    port: int
    mac: int
    speed_mbps: int
    length_m: float
    # True when a host NIC is cabled here, False for a switch.
    peer_is_host: bool
    # Peer switch name or full NIC name ("srv-b1-s2/nic1").
    peer_name: str
    # Peer port number (0 for hosts).
    peer_port: int
    peer_mac: int
    # Peer IPv4 (hosts only; 0 otherwise).
    peer_ipv4: int
    # "up" when this port faces a higher tier, "down" toward a lower tier or a host.
    direction: str


@dataclass(frozen=True, slots=True)
class NicView:
    name: str  # "srv-b1-s2/nic1"
    host: str
    nic: str
    rail: int
    ipv4: int
    prefix_length: int
    mac: int
    gateway_ipv4: int
    switch: str
    switch_port: int
    switch_port_mac: int
    speed_mbps: int
    length_m: float


def switch_ports(fabric: Fabric) -> dict[str, tuple[PortView, ...]]:
    """For every switch (even one with no ports), its cabled ports in ascending order."""
    by = fabric.switch_by_name
    out: dict[str, list[PortView]] = {s.name: [] for s in fabric.switches}
    for ln in fabric.links:
        a, b = by[ln.a], by[ln.b]
        out[ln.a].append(
            PortView(
                ln.a_port,
                a.port_mac(ln.a_port),
                ln.speed_mbps,
                ln.length_m,
                False,
                ln.b,
                ln.b_port,
                b.port_mac(ln.b_port),
                0,
                "up",
            )
        )
        out[ln.b].append(
            PortView(
                ln.b_port,
                b.port_mac(ln.b_port),
                ln.speed_mbps,
                ln.length_m,
                False,
                ln.a,
                ln.a_port,
                a.port_mac(ln.a_port),
                0,
                "down",
            )
        )
    for nic in fabric.nics:
        sw = by[nic.switch]
        out[nic.switch].append(
            PortView(
                nic.port,
                sw.port_mac(nic.port),
                nic.speed_mbps,
                nic.length_m,
                True,
                nic.full_name,
                0,
                nic.mac,
                nic.ipv4,
                "down",
            )
        )
    return {name: tuple(sorted(ports, key=lambda p: p.port)) for name, ports in out.items()}


def host_nics(fabric: Fabric) -> tuple[NicView, ...]:
    by = fabric.switch_by_name
    views = []
    for nic in fabric.nics:
        tor = by[nic.switch]
        assert tor.role is Role.TOR and tor.prefix is not None
        views.append(
            NicView(
                nic.full_name,
                nic.host,
                nic.name,
                nic.rail,
                nic.ipv4,
                tor.prefix.length,
                nic.mac,
                tor.gateway_ipv4,
                tor.name,
                nic.port,
                tor.port_mac(nic.port),
                nic.speed_mbps,
                nic.length_m,
            )
        )
    return tuple(views)
