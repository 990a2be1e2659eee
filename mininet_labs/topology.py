"""The lab's network, built from the explicit fabric (controller.fabric.Fabric).

- One namespace per server, one interface per rail NIC (`nic1`, `nic2`...) with the fabric's
  address (/32) and MAC. Each NIC talks through its own rail-ToR: a static neighbour for the
  ToR's gateway address, per-NIC routing tables chosen by source address (policy routing), and
  main-table routes that send each ToR prefix out of the NIC on that ToR's rail.
- Switch ports are veth ends in the root namespace (the switch processes run there).
  Host-to-ToR cables are direct veth pairs.
- Every switch-to-switch cable is two veth pairs meeting in one "wire" namespace, patched
  together there (netlinks.patch). Cutting a cable takes both wire-side ends down: both switch
  ports lose carrier and neither is set administratively down, as when a cable is pulled
  (bmv2 stops forwarding when one of its own ports is set down: docs/bmv2.md).
- A host NIC is a veth, whose TX checksum offload leaves UDP/TCP checksums partial
  (CHECKSUM_PARTIAL: only the pseudo-header sum in the field) for "hardware" that never comes.
  softswitch finishes them; bmv2 forwards them as they are and the receiving kernel drops
  them. For such a target, `build(tx_checksum_offload=False)` turns TX checksum offload off on
  every host NIC (`ethtool -K NIC tx off`), so hosts send finished checksums.
- `FabricTopo` is the same plan as a Mininet `Topo` (nodes and port-numbered links).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from mininet.topo import Topo

from controller.fabric import Fabric, Link, Nic, Role, ipv4_str, mac_str
from mininet_labs.netlinks import LabError, Names, ip, ip_batch, patch, run, sysctl

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


class FabricTopo(Topo):  # type: ignore[misc]  # mininet is untyped
    """The fabric as a Mininet topology: servers are hosts, switches keep their port numbers,
    and each switch-to-switch link notes that it passes through the wire namespace."""

    def build(self, fabric: Fabric) -> None:
        for sw in fabric.switches:
            self.addSwitch(sw.name, role=sw.role.value)
        for host in sorted({n.host for n in fabric.nics}):
            self.addHost(host)
        for nic in fabric.nics:
            self.addLink(nic.host, nic.switch, port2=nic.port, intfName1=nic.name)
        for link in fabric.links:
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, wire=True)


class LabTopology:
    def __init__(self, fabric: Fabric, names: Names) -> None:
        self.fabric = fabric
        self.names = names
        self.ordinal = {sw.name: i + 1 for i, sw in enumerate(fabric.switches)}
        self.topo = FabricTopo(fabric)
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
        self.namespaces: list[str] = []
        self.root_links: list[str] = []

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

    # -- build / tear down ---------------------------------------------------------------

    def _add_ns(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("link", "set", "lo", "up", netns=name)
        # No IPv6 chatter (router solicitations, DAD) on lab links; no reverse-path filter,
        # since a NIC may receive traffic for its own address from any rail.
        sysctl(
            {
                "net.ipv6.conf.all.disable_ipv6": "1",
                "net.ipv6.conf.default.disable_ipv6": "1",
                "net.ipv4.conf.all.rp_filter": "0",
                "net.ipv4.conf.default.rp_filter": "0",
            },
            name,
        )

    def build(self, tx_checksum_offload: bool = True) -> None:
        """Create everything; `tx_checksum_offload=False`: hosts compute their own L4
        checksums (for a target that does not finish partial ones)."""
        if not tx_checksum_offload and shutil.which("ethtool") is None:
            raise LabError(
                "ethtool is not on PATH: the lab needs it to turn TX checksum offload off on "
                "the host NICs, since this target forwards partial checksums as they are "
                "(install ethtool; scripts/setup.sh does)"
            )
        for host in self.hosts:
            self._add_ns(self.names.host_ns(host))
        wire = self.names.wire_ns
        self._add_ns(wire)
        root_lines = []
        for hp in self.host_ports:
            root_lines.append(
                f"link add name {hp.switch_if} type veth peer name {hp.ifname} netns {hp.netns}"
            )
            self.root_links.append(hp.switch_if)
        for c in self.cables.values():
            for end, wire_end in ((c.a_if, c.wire_a), (c.b_if, c.wire_b)):
                root_lines.append(
                    f"link add name {end} type veth peer name {wire_end} netns {wire}"
                )
                self.root_links.append(end)
        ip_batch(root_lines)
        sysctl({f"net.ipv6.conf.{name}.disable_ipv6": "1" for name in self.root_links})
        ip_batch([f"link set {name} up" for name in self.root_links])
        wire_lines = []
        for c in self.cables.values():
            wire_lines += [f"link set {c.wire_a} up", f"link set {c.wire_b} up"]
        ip_batch(wire_lines, wire)
        for c in self.cables.values():
            patch(wire, c.wire_a, c.wire_b)
        tor_prefixes = [
            (sw.rail, sw.prefix) for sw in self.fabric.switches if sw.role is Role.TOR and sw.prefix
        ]
        by_host: dict[str, list[str]] = {}
        for hp in self.host_ports:
            gw, dev, table = ipv4_str(hp.gateway), hp.ifname, TABLE_BASE + hp.nic.rail
            lines = by_host.setdefault(hp.netns, [])
            lines += [
                f"link set {dev} address {mac_str(hp.nic.mac)}",
                f"addr add {ipv4_str(hp.nic.ipv4)}/32 dev {dev}",
                f"link set {dev} up",
                f"neigh replace {gw} lladdr {mac_str(hp.gateway_mac)} dev {dev} nud permanent",
                f"rule add from {ipv4_str(hp.nic.ipv4)}/32 table {table} pref {table}",
            ]
            for rail, prefix in tor_prefixes:
                lines.append(f"route add {prefix} via {gw} dev {dev} onlink table {table}")
                if rail == hp.nic.rail:
                    lines.append(f"route add {prefix} via {gw} dev {dev} onlink")
        for ns, lines in by_host.items():
            ip_batch(lines, ns)
        if not tx_checksum_offload:
            for hp in self.host_ports:
                self.disable_tx_checksum_offload(hp)

    def disable_tx_checksum_offload(self, hp: HostPort) -> None:
        """`ethtool -K NIC tx off` in the host's namespace: the kernel then computes every
        UDP/TCP checksum in software before the frame leaves."""
        run(["ip", "netns", "exec", hp.netns, "ethtool", "-K", hp.ifname, "tx", "off"])

    def teardown(self) -> None:
        """Delete every namespace (and the veths in it) and root veth this lab made."""
        for ns in reversed(self.namespaces):
            ip("netns", "del", ns, check=False)
        self.namespaces.clear()
        for name in self.root_links:
            ip("link", "del", name, check=False)
        self.root_links.clear()

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
