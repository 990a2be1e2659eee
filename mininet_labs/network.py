"""The lab as a Mininet network (`mininet.net.Mininet`), built from LabTopology's plan.

- Servers are `RailHost`s: Mininet hosts with one interface per rail NIC, whose shell runs in
  a named namespace (`ip netns`), so Mininet's own commands (`srv-b1-s1 ping ...`, `pingall`)
  and the lab's tools (`ip netns exec`, `ip -n`) reach the same network stack. Addresses,
  the static neighbour of each NIC's ToR, per-source policy routing and offloads are set in
  `config`, as Mininet configures a host; then the server's lldpd starts (mininet_labs/
  lldpd.py; a lab process like the switches', stopped in `terminate`).
- Switches are `P4Switch`es in the root namespace, in the manner of p4lang's tutorials: the
  switch owns its interfaces and runs a P4Runtime target and its railfabric agent, started in
  `start` and stopped in `stop` (`SoftSwitch` runs softswitch, `Bmv2Switch` bmv2). No Open
  vSwitch anywhere.
- Every switch-to-switch cable is two Mininet links meeting in the `WireNode` (one namespace
  for all cables), patched together there, so a cut takes both wire ends down: both switch
  ports lose carrier, neither is set administratively down, and PAUSE frames pass
  (LabTopology.cut; docs/bmv2.md says why bmv2 needs it).
- The controller is a `RailController`, a Mininet controller node that runs
  railfabric-controller.

Every shell Mininet starts dies with the lab process (setpriv --pdeathsig), and every
namespace carries the lab's tag, so `python -m mininet_labs clean` and the reaper find what
a killed lab left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mininet.net import Mininet
from mininet.node import Controller, Host, Switch
from mininet.topo import Topo

from controller.fabric import ipv4_str, mac_str
from mininet_labs.netlinks import ip, ip_batch, patch, run, sysctl
from mininet_labs.processes import DIE_WITH_PARENT
from mininet_labs.topology import HostPort, LabTopology, nic_lines, nic_rule

if TYPE_CHECKING:
    from mininet_labs.lab import Lab

WIRE = "wire"  # the wire node's Mininet name
# Link ends stay down until IPv6 is off on them (no router solicitations into the fabric);
# RailHost.config brings the NICs up, build_network the rest.
DOWN: dict[str, Any] = {"params1": {"up": False}, "params2": {"up": False}}


class _LabShell:
    """Mixed into Mininet node classes: the node's shell dies with the lab process (so a lab
    killed with SIGKILL leaves no shell behind) and, when `netns` is set, runs in that named
    namespace."""

    netns: str | None = None
    shell: Any

    def _popen(self, cmd: Sequence[str], **params: Any) -> Any:
        if self.shell is None:  # the node's own shell, started by Node.__init__
            inside = ["ip", "netns", "exec", self.netns] if self.netns else []
            cmd = [*DIE_WITH_PARENT, *inside, *cmd]
        return super()._popen(cmd, **params)  # type: ignore[misc]


class _NamedNamespace(_LabShell):
    """A node in the named namespace `netns`, created before its shell starts and deleted
    after it ends."""

    netns: str

    def _make_namespace(self) -> None:
        ip("netns", "add", self.netns)
        ip("link", "set", "lo", "up", netns=self.netns)
        # No IPv6 chatter (router solicitations, DAD) on lab links; no reverse-path filter,
        # since a NIC may receive traffic for its own address from any rail.
        sysctl(
            {
                "net.ipv6.conf.all.disable_ipv6": "1",
                "net.ipv6.conf.default.disable_ipv6": "1",
                "net.ipv4.conf.all.rp_filter": "0",
                "net.ipv4.conf.default.rp_filter": "0",
            },
            self.netns,
        )

    def _delete_namespace(self) -> None:
        ip("netns", "del", self.netns, check=False)


class RailHost(_NamedNamespace, Host):  # type: ignore[misc]  # mininet is untyped
    """A server: one interface per rail NIC, each talking through its own rail-ToR."""

    def __init__(
        self, name: str, *, netns: str, ports: Sequence[HostPort], lab: Lab, **params: Any
    ):
        self.netns = netns
        self.host_ports = list(ports)
        self.lab = lab
        self.tx_checksum_offload = bool(params.pop("tx_checksum_offload", True))
        self.tor_prefixes: list[tuple[int | None, str]] = params.pop("tor_prefixes", [])
        self._make_namespace()
        # inNamespace=False: the shell is in `netns` already (see _popen), not a new one.
        params.pop("inNamespace", None)
        super().__init__(name, inNamespace=False, **params)

    def config(self, **_params: Any) -> dict[str, Any]:
        """Addresses, the ToR gateway as a static neighbour, policy routing: the NIC a datagram
        leaves by is the one its source address belongs to; each ToR prefix is reached out of
        the NIC on that ToR's rail. Mininet's own ip/mac parameters are not used."""
        lines = []
        for hp in self.host_ports:
            lines += [*nic_lines(hp, self.tor_prefixes), nic_rule(hp)]
        ip_batch(lines, self.netns)
        if not self.tx_checksum_offload:
            for hp in self.host_ports:
                disable_tx_checksum_offload(hp)
        # LLDP, as the server's own lldpd speaks it (mininet_labs/lldpd.py).
        self.lab.start_lldpd(self.name)
        return {}

    def IP(self, intf: Any = None) -> str:
        """The first NIC's address (Mininet's pingall and CLI substitute it for the name)."""
        if intf is None and self.host_ports:
            return ipv4_str(self.host_ports[0].nic.ipv4)
        return str(super().IP(intf))

    def terminate(self) -> None:
        self.lab.stop_lldpd(self.name)
        super().terminate()
        self._delete_namespace()


def disable_tx_checksum_offload(hp: HostPort) -> None:
    """`ethtool -K NIC tx off` in the host's namespace: the kernel then computes every
    UDP/TCP checksum in software before the frame leaves."""
    run(["ip", "netns", "exec", hp.netns, "ethtool", "-K", hp.ifname, "tx", "off"])


class WireNode(_NamedNamespace, Switch):  # type: ignore[misc]
    """The namespace the switch-to-switch cables pass through (two veths per cable, patched
    together). A Mininet switch so that Mininet links can reach it; it forwards nothing."""

    def __init__(self, name: str, *, netns: str, **params: Any) -> None:
        self.netns = netns
        self._make_namespace()
        params.pop("inNamespace", None)
        super().__init__(name, inNamespace=False, dpid="1" * 16, **params)

    def start(self, controllers: Any) -> None:
        pass

    def stop(self, deleteIntfs: bool = True) -> None:
        super().stop(deleteIntfs=False)  # the namespace takes its interfaces along

    def terminate(self) -> None:
        super().terminate()
        self._delete_namespace()


class P4Switch(_LabShell, Switch):  # type: ignore[misc]
    """A fabric switch: a P4Runtime target and its agent, started and stopped with the switch.
    The processes are the lab's (Lab.start_target, Lab.start_agent): one log and one
    teardown path for every process of a run."""

    kind = ""

    def __init__(self, name: str, *, lab: Lab, **params: Any) -> None:
        self.lab = lab
        dpid = f"{lab.topology.ordinal[name]:016x}"
        params.pop("inNamespace", None)
        super().__init__(name, inNamespace=False, dpid=dpid, **params)

    def start(self, controllers: Any) -> None:
        self.lab.start_target(self.name)

    @classmethod
    def batchStartup(cls, switches: Sequence[P4Switch]) -> Sequence[P4Switch]:
        """Once every target of this class listens, start their agents."""
        for sw in switches:
            sw.lab.start_agent(sw.name)
        return switches

    def stop(self, deleteIntfs: bool = True) -> None:
        self.lab.stop_switch(self.name)
        super().stop(deleteIntfs=deleteIntfs)

    @classmethod
    def batchShutdown(cls, switches: Sequence[P4Switch]) -> Sequence[P4Switch]:
        """Mininet's teardown: every agent of this class at once, then every target, then
        each switch's interfaces (one at a time, each agent took ~0.5 s to stop)."""
        if switches:
            switches[0].lab.stop_switches([sw.name for sw in switches])
        for sw in switches:
            super(P4Switch, sw).stop(deleteIntfs=True)
        return switches


class SoftSwitch(P4Switch):
    """softswitch (this repo's P4Runtime target)."""

    kind = "softswitch"


class Bmv2Switch(P4Switch):
    """bmv2's simple_switch_grpc, as p4lang's tutorials run it in Mininet."""

    kind = "bmv2"


SWITCH_CLASSES: dict[str, type[P4Switch]] = {c.kind: c for c in (SoftSwitch, Bmv2Switch)}


class RailController(_LabShell, Controller):  # type: ignore[misc]
    """railfabric-controller, as a Mininet controller node (root namespace)."""

    def __init__(self, name: str, *, lab: Lab) -> None:
        self.lab = lab
        super().__init__(name, inNamespace=False)

    def checkListening(self) -> None:
        pass  # our port is a free one (Lab.start_controller); Mininet's check needs telnet

    def start(self) -> None:
        self.lab.start_controller()

    def stop(self, *args: Any, **kwargs: Any) -> None:
        self.lab.stop_controller()
        super(Controller, self).stop(*args, **kwargs)  # Node.stop: our process is not a job


class FabricTopo(Topo):  # type: ignore[misc]
    """LabTopology's plan as a Mininet Topo: servers, switches (keeping their port numbers),
    host cables, and each switch-to-switch cable as two links through the wire node."""

    def build(self, plan: LabTopology, lab: Lab, switch_cls: type[P4Switch]) -> None:
        fabric = plan.fabric
        tor_prefixes = plan.tor_prefixes
        completes = lab.target.completes_partial_checksums
        for host in plan.hosts:
            ports = [hp for hp in plan.host_ports if hp.nic.host == host]
            self.addHost(
                host,
                cls=RailHost,
                netns=plan.names.host_ns(host),
                ports=ports,
                tor_prefixes=tor_prefixes,
                tx_checksum_offload=completes,
                lab=lab,
            )
        for sw in fabric.switches:
            self.addSwitch(sw.name, cls=switch_cls, lab=lab)
        self.addSwitch(WIRE, cls=WireNode, netns=plan.names.wire_ns)
        for hp in plan.host_ports:
            nic = hp.nic
            self.addLink(
                nic.host,
                nic.switch,
                port1=nic.rail,
                port2=nic.port,
                intfName1=hp.ifname,
                intfName2=hp.switch_if,
                addr1=mac_str(nic.mac),
                **DOWN,
            )
        for k, c in enumerate(plan.cables.values()):
            link = c.link
            self.addLink(
                link.a, WIRE, port1=link.a_port, port2=2 * k + 1, intfName1=c.a_if,
                intfName2=c.wire_a, **DOWN,
            )  # fmt: skip
            self.addLink(
                WIRE, link.b, port1=2 * k + 2, port2=link.b_port, intfName1=c.wire_b,
                intfName2=c.b_if, **DOWN,
            )  # fmt: skip


def build_network(lab: Lab) -> Mininet:
    """The lab's Mininet network, built (interfaces, addresses, wires patched), not started."""
    plan = lab.topology
    switch_cls = SWITCH_CLASSES[lab.target.kind]
    net = Mininet(
        topo=FabricTopo(plan, lab, switch_cls),
        controller=RailController("controller", lab=lab),
        build=False,
        autoSetMacs=False,
        autoStaticArp=False,
        waitConnected=False,
    )
    try:
        net.build()
        root_links = [c.a_if for c in plan.cables.values()]
        root_links += [c.b_if for c in plan.cables.values()]
        root_links += [hp.switch_if for hp in plan.host_ports]
        sysctl({f"net.ipv6.conf.{name}.disable_ipv6": "1" for name in root_links})
        ip_batch([f"link set {name} up" for name in root_links])
        wire = plan.names.wire_ns
        ends = [e for c in plan.cables.values() for e in (c.wire_a, c.wire_b)]
        ip_batch([f"link set {e} up" for e in ends], wire)
        for c in plan.cables.values():
            patch(wire, c.wire_a, c.wire_b)
    except BaseException:
        net.stop()  # whatever was built: its shells, links and namespaces
        raise
    return net
