"""The lab's plan, from the explicit fabric (controller.fabric.Fabric): which namespace and
interface every server NIC and switch port is, and every cable's ends. mininet_labs/network.py
builds the Mininet network from it; the cabling changes (cut, restore, miswire) are here.

- One namespace per server, one interface per rail NIC (`nic1`, `nic2`...) with the fabric's
  address (/32) and MAC. Each NIC talks through its own rail-ToR: a static neighbour for the
  ToR's gateway address, per-NIC routing tables chosen by source address (policy routing), and
  main-table routes that send each ToR prefix out of the NIC on that ToR's rail.
- Switch ports are veth ends in the root namespace (the switch processes run there), named
  with the lab's tag so concurrent labs do not collide. Host-to-ToR cables are direct veth
  pairs.
- Every switch-to-switch cable is two veth pairs meeting in one "wire" namespace, patched
  together there (netlinks.patch). Cutting a cable takes both wire-side ends down: both switch
  ports lose carrier and neither is set administratively down, as when a cable is pulled
  (bmv2 stops forwarding when one of its own ports is set down: docs/bmv2.md).
- A host NIC is a veth, whose TX checksum offload leaves UDP/TCP checksums partial
  (CHECKSUM_PARTIAL: only the pseudo-header sum in the field) for "hardware" that never comes.
  softswitch finishes them; bmv2 forwards them as they are and the receiving kernel drops
  them. For such a target the hosts turn TX checksum offload off (network.RailHost).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.fabric import Fabric, Link, Nic
from mininet_labs.netlinks import LabError, Names, ip_batch, patch

TABLE_BASE = 100  # per-NIC routing table = 100 + rail


@dataclass(frozen=True)
class HostPort:
    nic: Nic
    netns: str
    ifname: str  # inside the host namespace
    switch_if: str  # the ToR's port, root namespace
    gateway: int
    gateway_mac: int


@dataclass(frozen=True)
class Cable:
    """A switch-to-switch link as built: switch ports in the root namespace, wire ends in the
    wire namespace, patched a<->b."""

    link: Link
    a_if: str
    b_if: str
    wire_a: str
    wire_b: str


class LabTopology:
    def __init__(self, fabric: Fabric, names: Names) -> None:
        self.fabric = fabric
        self.names = names
        self.ordinal = {sw.name: i + 1 for i, sw in enumerate(fabric.switches)}
        self.hosts = sorted({n.host for n in fabric.nics})
        tors = fabric.switch_by_name
        self.host_ports = [
            HostPort(
                nic,
                names.host_ns(nic.host),
                nic.name,
                self.port_if(nic.switch, nic.port),
                tors[nic.switch].gateway_ipv4,
                tors[nic.switch].port_mac(nic.port),
            )
            for nic in fabric.nics
        ]
        self.cables = {
            link.key: Cable(
                link,
                self.port_if(link.a, link.a_port),
                self.port_if(link.b, link.b_port),
                f"l{k}a",
                f"l{k}b",
            )
            for k, link in enumerate(fabric.links, start=1)
        }

    def port_if(self, switch: str, port: int) -> str:
        return self.names.switch_if(self.ordinal[switch], port)

    def switch_ports(self, switch: str) -> dict[int, str]:
        """port number -> root-namespace interface, for the switch process and its agent."""
        ports = {hp.nic.port: hp.switch_if for hp in self.host_ports if hp.nic.switch == switch}
        for c in self.cables.values():
            if c.link.a == switch:
                ports[c.link.a_port] = c.a_if
            if c.link.b == switch:
                ports[c.link.b_port] = c.b_if
        return dict(sorted(ports.items()))

    def nic(self, full_name: str) -> HostPort:
        for hp in self.host_ports:
            if hp.nic.full_name == full_name:
                return hp
        raise LabError(f"no NIC {full_name!r} in fabric {self.fabric.name}")

    def cable(self, switch: str, port: int) -> Cable:
        for c in self.cables.values():
            if (c.link.a, c.link.a_port) == (switch, port) or (c.link.b, c.link.b_port) == (
                switch,
                port,
            ):
                return c
        raise LabError(f"no switch-to-switch cable on {switch}:{port}")

    # -- cabling changes -----------------------------------------------------------------

    def cut(self, key: str) -> None:
        """Pull the cable: both wire ends down, so both switch ports lose carrier."""
        c = self.cables[key]
        ip_batch([f"link set {c.wire_a} down", f"link set {c.wire_b} down"], self.names.wire_ns)

    def restore(self, key: str) -> None:
        c = self.cables[key]
        ip_batch([f"link set {c.wire_a} up", f"link set {c.wire_b} up"], self.names.wire_ns)

    def swap_far_ends(self, first: str, second: str) -> None:
        """Miswire: the a-end of `first` is patched to the b-end of `second` and vice versa
        (carrier stays up on all four ports; only LLDP can tell)."""
        a, b = self.cables[first], self.cables[second]
        patch(self.names.wire_ns, a.wire_a, b.wire_b)
        patch(self.names.wire_ns, b.wire_a, a.wire_b)

    def repatch(self, keys: Iterable[str]) -> None:
        for key in keys:
            c = self.cables[key]
            patch(self.names.wire_ns, c.wire_a, c.wire_b)
