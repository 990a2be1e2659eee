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
- A server's NICs are swapped (`swap_nics`, the classic rail-fabric mistake) the way a person
  swaps two cables at the server: both go down (their ToR ports lose carrier), the two veths
  trade names, and each is configured again as the NIC it now is (its MAC, address, neighbour
  and routes), so NIC nic1 is now on nic2's ToR port and the reverse; the same call again
  puts them back. Server lldpd follows the renames (it sends one LLDPDU with the old name
  first, then the new one).
- Every switch-to-switch cable is two veth pairs meeting in one "wire" namespace, patched
  together there (netlinks.patch). Cutting a cable takes both wire-side ends down: both switch
  ports lose carrier and neither is set administratively down, as when a cable is pulled
  (bmv2 stops forwarding when one of its own ports is set down: docs/bmv2.md). Cuts and
  restores are netlink requests (one RTM_NEWLINK each, railfabric.rtnl) on a socket the
  lab keeps in the wire namespace: the moment a scenario stamps as the cut is the cut, within
  tens of microseconds. An `ip` process started for each took milliseconds (more on a loaded
  machine), and a pyroute2 request 1.2 ms p50 (0.4 ms idle, nearly all its own Python); the
  failover figures counted both as the agents' detection.
- A host NIC is a veth, whose TX checksum offload leaves UDP/TCP checksums partial
  (CHECKSUM_PARTIAL: only the pseudo-header sum in the field) for "hardware" that never comes.
  softswitch finishes them; bmv2 forwards them as they are and the receiving kernel drops
  them. For such a target the hosts turn TX checksum offload off (network.RailHost).
"""

from __future__ import annotations

import errno
import itertools
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.fabric import Fabric, Link, Nic, Role, ipv4_str, mac_str
from mininet_labs.netlinks import LabError, Names, ip_batch, patch, unpatch
from railfabric import rtnl

TABLE_BASE = 100  # per-NIC routing table = 100 + rail
# The kernel acks a link request as soon as it made the change; a lost ack is a lab fault.
WIRE_ACK_TIMEOUT_S = 5.0
SWAP_NAME = "rflswap"  # a NIC's name while two trade theirs (namespaces are per server)


@dataclass(frozen=True)
class HostPort:
    nic: Nic
    netns: str
    ifname: str  # inside the host namespace
    switch_if: str  # the ToR's port, root namespace
    gateway: int
    gateway_mac: int


def nic_lines(hp: HostPort, tor_prefixes: Sequence[tuple[int | None, str]]) -> list[str]:
    """`ip -batch` lines that make interface `hp.ifname` of the server's namespace NIC `hp`:
    its MAC and /32 address, up, the ToR gateway as a static neighbour, and its routes (each
    ToR prefix through this NIC in the NIC's table; in the main table, the prefixes of its
    own rail). Idempotent; the per-source rule is set once (`nic_rule`)."""
    gw, dev, table = ipv4_str(hp.gateway), hp.ifname, TABLE_BASE + hp.nic.rail
    lines = [
        f"link set {dev} address {mac_str(hp.nic.mac)}",
        f"addr replace {ipv4_str(hp.nic.ipv4)}/32 dev {dev}",
        f"link set {dev} up",
        f"neigh replace {gw} lladdr {mac_str(hp.gateway_mac)} dev {dev} nud permanent",
    ]
    for rail, prefix in tor_prefixes:
        lines.append(f"route replace {prefix} via {gw} dev {dev} onlink table {table}")
        if rail == hp.nic.rail:
            lines.append(f"route replace {prefix} via {gw} dev {dev} onlink")
    return lines


def nic_rule(hp: HostPort) -> str:
    """Policy routing: what leaves from the NIC's address uses the NIC's table."""
    table = TABLE_BASE + hp.nic.rail
    return f"rule add from {ipv4_str(hp.nic.ipv4)}/32 table {table} pref {table}"


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
        # The wire namespace's netlink socket (opened once the lab is built, or by the first
        # cut or restore; closed by `close`) and its interfaces' indexes.
        self._wire: socket.socket | None = None
        self._wire_seq = itertools.count(1)
        self._wire_index: dict[str, int] = {}

    @property
    def tor_prefixes(self) -> list[tuple[int | None, str]]:
        """(rail, prefix) of every ToR, for the servers' routes."""
        return [
            (sw.rail, str(sw.prefix))
            for sw in self.fabric.switches
            if sw.role is Role.TOR and sw.prefix is not None
        ]

    def root_interfaces(self) -> list[str]:
        """Every interface the lab makes in the root namespace: the switch ports."""
        names = [hp.switch_if for hp in self.host_ports]
        return names + [i for c in self.cables.values() for i in (c.a_if, c.b_if)]

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
        self._set_wire((c.wire_a, c.wire_b), up=False)

    def restore(self, key: str) -> None:
        c = self.cables[key]
        self._set_wire((c.wire_a, c.wire_b), up=True)

    def open_wire(self) -> socket.socket:
        """The wire namespace's netlink socket, opened if it is not (the lab opens it once the
        namespace is there, so no cut counts the opening)."""
        if self._wire is None:
            self._wire = rtnl.route_socket(self.names.wire_ns)
            self._wire.settimeout(WIRE_ACK_TIMEOUT_S)
            self._look_up_wire()  # every wire end now, so that no cut waits for a lookup
        return self._wire

    def _look_up_wire(self) -> None:
        self._wire_index = {link.ifname: link.index for link in rtnl.dump_links(self.names.wire_ns)}

    def close(self) -> None:
        """Close the wire namespace's socket (the lab's teardown); a later cut opens it again."""
        if self._wire is not None:
            self._wire.close()
            self._wire = None
            self._wire_index.clear()

    def _set_wire(self, ifnames: Sequence[str], *, up: bool) -> None:
        ns = self.names.wire_ns
        wire = self.open_wire()
        state = "up" if up else "down"
        for name in ifnames:
            for attempt in (1, 2):
                if name not in self._wire_index:
                    self._look_up_wire()
                index = self._wire_index.get(name)
                if index is None:
                    raise LabError(f"link set {name} {state}: no {name} in netns {ns}")
                try:
                    rtnl.set_link_up(wire, index, up, next(self._wire_seq))
                    break
                except OSError as err:
                    self._wire_index.pop(name, None)
                    if err.errno == errno.ENODEV and attempt == 1:
                        continue  # made again since it was looked up: look it up again
                    raise LabError(f"link set {name} {state} in netns {ns}: {err}") from err

    def swap_far_ends(self, first: str, second: str) -> None:
        """Miswire: the a-end of `first` is patched to the b-end of `second` and vice versa
        (carrier stays up on all four ports; only LLDP can tell)."""
        a, b = self.cables[first], self.cables[second]
        patch(self.names.wire_ns, a.wire_a, b.wire_b)
        patch(self.names.wire_ns, b.wire_a, a.wire_b)

    def swap_nics(self, host: str, first: str, second: str) -> None:
        """Swap the cables of two NICs of `host` (see the module's text); again to undo."""
        ports = {hp.nic.name: hp for hp in self.host_ports if hp.nic.host == host}
        if not ports:
            raise LabError(f"no server {host!r} in fabric {self.fabric.name}")
        for name in (first, second):
            if name not in ports:
                raise LabError(f"{host} has no NIC {name!r} (it has {', '.join(sorted(ports))})")
        if first == second:
            raise LabError(f"{host} {first}: two different NICs are swapped")
        a, b = ports[first], ports[second]
        lines = [f"link set {a.ifname} down", f"link set {b.ifname} down"]
        lines += [f"addr flush dev {a.ifname}", f"addr flush dev {b.ifname}"]
        lines += [
            f"link set {a.ifname} name {SWAP_NAME}",
            f"link set {b.ifname} name {a.ifname}",
            f"link set {SWAP_NAME} name {b.ifname}",
        ]
        prefixes = self.tor_prefixes
        ip_batch(lines + nic_lines(a, prefixes) + nic_lines(b, prefixes), a.netns)

    def unpatch(self, key: str) -> Cable:
        """Leave cable `key` unpatched in the wire namespace (for a delay line to carry it)."""
        c = self.cables[key]
        unpatch(self.names.wire_ns, c.wire_a, c.wire_b)
        return c

    def repatch(self, keys: Iterable[str]) -> None:
        for key in keys:
            c = self.cables[key]
            patch(self.names.wire_ns, c.wire_a, c.wire_b)
