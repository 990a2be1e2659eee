"""Cabling check: what LLDP hears on each port against the cabling plan of the intent.

Pure. The plan (`CablingPlan`, from the switches' desired states) says who is on the other end
of every port: a switch port, or a server NIC. `lldp_peer` names who a port hears, as the plan
names it when it can; the cabling check, `railctl lldp` (ListLldp) and `railctl interfaces`
(ListInterfaces) all use it. `CablingCheck.report` takes a switch's latest Neighbors report and
says which alarms to raise and which to clear:

- A port that hears its planned peer is fine; its alarms clear.
- A port that hears someone else is miswired: `miswire:SW:PORT` (critical), naming both sides.
  A server NIC heard in the wrong place is named with where the plan has it: "srv-b1-s1 nic3 is
  cabled to tor-r5-b1 port 1; the plan says tor-r3-b1 port 1" (a NIC in the wrong rail). A NIC
  is heard on one port only, so two NICs swapped make exactly two alarms, one per NIC, each on
  the port where the NIC is; the ports the plan has them on say nothing more.
- A port that hears nothing is not a miswire (the link may be down; the server may not speak
  LLDP). On a switch link an alarm stays until the planned peer is heard (link state has its
  own alarm); on a server port or an unplanned one, the wrong NIC is gone and its alarm clears.
- Servers need not speak LLDP. With the intent's `lldp.expect_servers`, a server port that has
  heard nothing for `lldp.server_ttl_s` raises `lldp_silent:SW:PORT` (warning), unless its NIC
  is heard on another port: that port's miswire alarm already names this one.

Who a port hears: our agents send the switch name (system name) and the port number (port
id); a server's lldpd sends its system name (set per server) and, configured `portidsubtype
ifname`, the NIC's name, or by default the NIC's MAC, which the plan knows too.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field

from railfabric.v1 import admin_pb2, control_pb2, state_pb2

End = tuple[str, int]  # (switch name, port)
Nic = tuple[str, str]  # (server, NIC name)
_Planned = tuple["state_pb2.PeerKind.ValueType", str, int, str]  # kind, name, port, nic

MISWIRE = "miswire"
SILENT = "lldp_silent"
SWITCH, HOST = state_pb2.PEER_KIND_SWITCH, state_pb2.PEER_KIND_HOST


@dataclass(frozen=True)
class ServerLldp:
    """The intent's `lldp` section, as the check uses it."""

    expect: bool = False
    ttl_ns: int = 120 * 1_000_000_000


class CablingPlan:
    """Who the plan puts on the other end of each port, with the lookups `lldp_peer` needs.

    Peers are kept as (kind, name, port, nic) and made messages when asked for: ref-100k's
    372,736 ports as Peer messages were half of this plan's 3 s at every start."""

    def __init__(self, states: Iterable[state_pb2.DesiredState]) -> None:
        self.peers: dict[End, _Planned] = {}
        self.ports: dict[str, list[int]] = {}
        self.nic_end: dict[Nic, End] = {}
        self.nic_by_mac: dict[int, Nic] = {}
        for state in states:
            switch = state.switch_name
            ports = self.ports.setdefault(switch, [])
            for n in state.neighbors:
                end = (switch, n.port)
                peer = self.peers[end] = _peer_of(n)
                ports.append(n.port)
                if peer[0] == HOST:
                    self.nic_end[(peer[1], peer[3])] = end
                    if n.peer_mac:
                        self.nic_by_mac[n.peer_mac] = (peer[1], peer[3])
        self.switches = frozenset(self.ports)
        self.servers = frozenset(server for server, _ in self.nic_end)

    def planned(self, end: End) -> admin_pb2.Peer | None:
        peer = self.peers.get(end)
        if peer is None:
            return None
        kind, name, port, nic = peer
        return admin_pb2.Peer(kind=kind, name=name, port=port, nic=nic)


def _peer_of(neighbor: state_pb2.Neighbor) -> _Planned:
    """A port's planned peer as (kind, name, port, nic): a switch port, or a server NIC
    ("srv/nic3": name srv, nic nic3)."""
    if neighbor.kind == HOST:
        server, _, nic = neighbor.peer_name.rpartition("/")
        return neighbor.kind, sys.intern(server or nic), 0, sys.intern(nic) if server else ""
    return neighbor.kind, sys.intern(neighbor.peer_name), neighbor.peer_port, ""


def plan_peer(neighbor: state_pb2.Neighbor) -> admin_pb2.Peer:
    """The cabling plan's peer of a port: a switch port, or a server NIC ("srv/nic3")."""
    kind, name, port, nic = _peer_of(neighbor)
    return admin_pb2.Peer(kind=kind, name=name, port=port, nic=nic)


def lldp_peer(heard: control_pb2.LldpNeighbor, plan: CablingPlan) -> admin_pb2.Peer:
    """Who a port hears, named as the plan names it:

    - a switch port: a numeric port id (what our agents send), from a switch of the plan;
    - a server NIC of the plan: a port id that is its MAC (lldpd's default), or its name with
      the system name (or, without one, the chassis id) naming the server, in full or up to
      its first dot (a host name may be qualified);
    - anyone else: kind unspecified, the name it gives, and its port id as a port number when
      it is one, else as `nic`."""
    name = heard.system_name or heard.chassis_id
    port_id = heard.port_id
    if port_id.isdigit() and len(port_id) <= 10:
        kind = SWITCH if name in plan.switches else state_pb2.PEER_KIND_UNSPECIFIED
        return admin_pb2.Peer(kind=kind, name=name, port=min(int(port_id), 2**32 - 1))
    nic = _nic_by_mac(port_id, plan)
    if nic is None:
        for server in dict.fromkeys((name, name.partition(".")[0])):
            if (server, port_id) in plan.nic_end:
                nic = (server, port_id)
                break
    if nic is not None:
        return admin_pb2.Peer(kind=HOST, name=nic[0], nic=nic[1])
    return admin_pb2.Peer(kind=state_pb2.PEER_KIND_UNSPECIFIED, name=name, nic=port_id)


def _nic_by_mac(port_id: str, plan: CablingPlan) -> Nic | None:
    """The planned NIC whose MAC is `port_id` ('06:00:00:01:00:01', as agents write one)."""
    digits = port_id.replace(":", "")
    if len(port_id) != 17 or len(digits) != 12 or not set(digits) <= _HEX:
        return None
    return plan.nic_by_mac.get(int(digits, 16))


_HEX = frozenset(string.hexdigits)


def describe(peer: admin_pb2.Peer) -> str:
    """'spine-1 port 3', 'srv-b1-s1 nic3', or, for a peer the plan does not know,
    "vm port '06:00:00:01:00:01'"."""
    if peer.kind == HOST:
        return f"{peer.name} {peer.nic}"
    if peer.nic or not peer.port:
        return f"{peer.name} port {peer.nic!r}"
    return f"{peer.name} port {peer.port}"


def lldp_status(
    planned: admin_pb2.Peer | None, seen: admin_pb2.Peer | None
) -> admin_pb2.LldpStatus.ValueType:
    if seen is None:
        return admin_pb2.LLDP_STATUS_SILENT
    if planned is None:
        return admin_pb2.LLDP_STATUS_UNPLANNED
    return admin_pb2.LLDP_STATUS_OK if planned == seen else admin_pb2.LLDP_STATUS_MISWIRED


def miswire_message(
    plan: CablingPlan, end: End, planned: admin_pb2.Peer | None, seen: admin_pb2.Peer
) -> str:
    switch, port = end
    if seen.kind == HOST:
        where = plan.nic_end[(seen.name, seen.nic)]
        return (
            f"{seen.name} {seen.nic} is cabled to {switch} port {port}; the plan says "
            f"{where[0]} port {where[1]}"
        )
    if planned is None:
        return f"{switch} port {port} is not cabled in the plan, sees {describe(seen)}"
    return f"{switch} port {port} expected {describe(planned)}, sees {describe(seen)}"


@dataclass(frozen=True)
class Finding:
    """An alarm to raise on `port` of the reporting switch."""

    alarm_id: str
    severity: str
    kind: str
    port: int
    message: str


@dataclass(frozen=True)
class Cleared:
    alarm_id: str
    port: int
    why: str


@dataclass
class Outcome:
    raised: list[Finding] = field(default_factory=list)
    cleared: list[Cleared] = field(default_factory=list)


def alarm_id(kind: str, end: End) -> str:
    return f"{kind}:{end[0]}:{end[1]}"


class CablingCheck:
    """The plan, the servers' LLDP expectation, and what was observed: where each planned NIC
    is heard, since when each server port is silent, and the ports with an alarm that neither
    the plan nor the reports would bring up again (`flagged`).

    A new intent makes a new check that carries the observations over (`carry`); `flagged`
    seeds the ports of the alarms already active (restored from the store, or raised under
    the previous plan), so that every one of them is looked at again."""

    def __init__(
        self,
        plan: CablingPlan,
        servers: ServerLldp,
        flagged: Iterable[End] = (),
        carry: CablingCheck | None = None,
    ) -> None:
        self.plan = plan
        self.servers = servers
        self.flagged: dict[str, set[int]] = {}
        for switch, port in flagged:
            self.flagged.setdefault(switch, set()).add(port)
        self.heard_at: dict[Nic, set[End]] = {}
        self._heard_by: dict[str, dict[int, Nic]] = {}
        self.silent_since: dict[End, int] = {}
        self._last_report: dict[str, int] = {}
        if carry is not None:
            self.heard_at = {k: set(v) for k, v in carry.heard_at.items()}
            self._heard_by = {k: dict(v) for k, v in carry._heard_by.items()}
            self.silent_since = dict(carry.silent_since)
            self._last_report = dict(carry._last_report)
            for switch, ports in carry.flagged.items():
                self.flagged.setdefault(switch, set()).update(ports)

    def report(
        self,
        switch: str,
        neighbors: Sequence[control_pb2.LldpNeighbor],
        mono_ns: int,
        active: Container[str],
    ) -> Outcome:
        """What `switch`'s latest neighbour table means, at `mono_ns`. `active` holds the ids
        of the alarms raised now: only those are cleared."""
        plan = self.plan
        seen = {n.port: lldp_peer(n, plan) for n in neighbors}
        self._index(switch, seen)
        last = self._last_report.get(switch)
        self._last_report[switch] = mono_ns
        if last is not None and mono_ns - last > self.servers.ttl_ns:
            # No report for longer than the TTL (session down): silence was not observed.
            for port in plan.ports.get(switch, ()):
                self.silent_since.pop((switch, port), None)
        out = Outcome()
        flagged = self.flagged.get(switch, set())
        ports = set(plan.ports.get(switch, ())).union(seen, flagged)
        for port in sorted(ports):
            end = (switch, port)
            planned = plan.planned(end)
            peer = seen.get(port)
            raised = self._port(end, planned, peer, mono_ns=mono_ns, active=active, out=out)
            if raised and planned is None:
                flagged.add(port)
            else:
                flagged.discard(port)
        if flagged:
            self.flagged[switch] = flagged
        else:
            self.flagged.pop(switch, None)
        return out

    def _port(
        self,
        end: End,
        planned: admin_pb2.Peer | None,
        peer: admin_pb2.Peer | None,
        *,
        mono_ns: int,
        active: Container[str],
        out: Outcome,
    ) -> bool:
        """Decide one port; True when it has an alarm raised."""
        miswire, silent = alarm_id(MISWIRE, end), alarm_id(SILENT, end)

        def clear(aid: str, why: str) -> None:
            if aid in active:
                out.cleared.append(Cleared(aid, end[1], why))

        if peer is not None:
            self.silent_since.pop(end, None)
            if peer == planned:
                clear(miswire, "cabling matches the plan")
                clear(silent, "LLDP heard from the planned NIC")
                return False
            message = miswire_message(self.plan, end, planned, peer)
            out.raised.append(Finding(miswire, "critical", MISWIRE, end[1], message))
            clear(silent, "LLDP heard on the port (see its miswire alarm)")
            return True
        if planned is not None and planned.kind != HOST:
            return miswire in active  # a switch link: as before, until the peer is heard
        clear(miswire, "the wrong peer is no longer heard on the port")
        if planned is None or not self.servers.expect:
            self.silent_since.pop(end, None)
            clear(silent, "no server LLDP is expected on the port")
            return False
        nic = (planned.name, planned.nic)
        elsewhere = sorted(self.heard_at.get(nic, set()) - {end})
        if elsewhere:
            self.silent_since.pop(end, None)
            clear(
                silent, f"{describe(planned)} is heard on {elsewhere[0][0]} port {elsewhere[0][1]}"
            )
            return False
        since = self.silent_since.setdefault(end, mono_ns)
        if mono_ns - since < self.servers.ttl_ns:
            return silent in active
        ttl_s = self.servers.ttl_ns / 1e9
        message = (
            f"{end[0]} port {end[1]} has heard no LLDP from {describe(planned)}, planned there, "
            f"for {ttl_s:g} s"
        )
        out.raised.append(Finding(silent, "warning", SILENT, end[1], message))
        return True

    def _index(self, switch: str, seen: dict[int, admin_pb2.Peer]) -> None:
        """Where each planned NIC is heard, updated with `switch`'s report."""
        now = {port: (p.name, p.nic) for port, p in seen.items() if p.kind == HOST}
        before = self._heard_by.get(switch, {})
        for port, nic in before.items():
            if now.get(port) != nic:
                ends = self.heard_at.get(nic)
                if ends is not None:
                    ends.discard((switch, port))
                    if not ends:
                        del self.heard_at[nic]
        for port, nic in now.items():
            self.heard_at.setdefault(nic, set()).add((switch, port))
        if now:
            self._heard_by[switch] = now
        else:
            self._heard_by.pop(switch, None)


__all__ = [
    "MISWIRE",
    "SILENT",
    "CablingCheck",
    "CablingPlan",
    "Cleared",
    "Finding",
    "Outcome",
    "ServerLldp",
    "describe",
    "lldp_peer",
    "lldp_status",
    "miswire_message",
    "plan_peer",
]
