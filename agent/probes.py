"""Latency probes (state.proto Probing): what the agent sends each round, the answers it takes,
and the RTT histograms it reports (control.proto ProbeResults). Pure: the caller passes the
clock and does the packet I/O.

The far switch answers a probe in its data plane (p4/include/control/acl.p4, answer_probe):
no agent handles a request, so a probe costs one packet-out and one packet-in, both the
sender's, and its RTT is the network's and the far pipeline's, with no agent's scheduling in
it. A request that reaches the agent was not for this switch (a mesh probe for another
address, or sent to a group MAC): it is counted as stray.

Each round sends a link probe out of every up port with a switch neighbour whose cable this
end probes (latency.probes_link: one end of each cable; the other answers) and, on a ToR with
a probe address, mesh probes to the next `targets_per_round` targets, each out of every up
uplink: a packet-out leaves the port the agent names, so naming each uplink is what covers
them all. Per target, the uplinks that lost nothing and were not slow (Probing.slow_rtt_us)
are reported as one result with port 0, the others each on its own: at 100k-GPU size one
result per uplink and target is millions a period, nearly all saying "fine". A probe is
resolved once: answered (its RTT in the histogram) or timed out (lost);
an answer after that, or one that matches nothing sent, is counted as stray and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from railfabric import latency
from railfabric.v1 import control_pb2, state_pb2

LINK: Final = control_pb2.PROBE_KIND_LINK
MESH: Final = control_pb2.PROBE_KIND_MESH
# Probes in flight at most; a round that would exceed it sends fewer (counted as skipped).
MAX_PENDING: Final = 16_384
_SEQ_MASK: Final = 0xFFFF_FFFF


@dataclass(frozen=True)
class Planned:
    """One probe a round sends: its kind, the port it leaves on, the ToR it goes to (MESH)."""

    kind: int
    port: int
    target: str = ""
    address: int = 0


@dataclass
class _Pending:
    planned: Planned
    sent_ns: int
    deadline_ns: int


@dataclass
class _Tally:
    sent: int = 0
    received: int = 0
    buckets: dict[int, int] = field(default_factory=dict)
    rtt_sum_ns: int = 0
    rtt_min_ns: int = 0
    rtt_max_ns: int = 0

    def answered(self, rtt_ns: int) -> None:
        self.sent += 1
        self.received += 1
        index = latency.bucket_of(rtt_ns)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        self.rtt_sum_ns += rtt_ns
        self.rtt_min_ns = rtt_ns if self.received == 1 else min(self.rtt_min_ns, rtt_ns)
        self.rtt_max_ns = max(self.rtt_max_ns, rtt_ns)

    def add(self, other: _Tally) -> None:
        """Merge `other` (another uplink's probes to the same target) into this one."""
        if other.received:
            self.rtt_min_ns = (
                other.rtt_min_ns if not self.received else min(self.rtt_min_ns, other.rtt_min_ns)
            )
        self.sent += other.sent
        self.received += other.received
        for index, count in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + count
        self.rtt_sum_ns += other.rtt_sum_ns
        self.rtt_max_ns = max(self.rtt_max_ns, other.rtt_max_ns)


@dataclass
class ProbeStats:
    """Since the agent started (its metrics)."""

    sent: int = 0
    answered: int = 0
    lost: int = 0
    stray: int = 0
    skipped: int = 0


class Prober:
    def __init__(self, port_mac: Callable[[int], int]) -> None:
        self._port_mac = port_mac
        self.probing: state_pb2.Probing | None = None
        # Ports with a switch neighbour whose MAC the state gives -> that MAC (a probe goes
        # to it, and its answer comes from it: the data plane swaps the addresses); ports of
        # servers.
        self._switch_peers: dict[int, int] = {}
        self._servers: frozenset[int] = frozenset()
        # Ports whose cable this end link-probes (the far end answers: probes_link).
        self._link_ports: frozenset[int] = frozenset()
        self._next_target = 0
        self._seq = 0
        self._pending: dict[tuple[int, int, int], _Pending] = {}
        self._tallies: dict[tuple[int, int, str], _Tally] = {}
        self.stats = ProbeStats()

    # -- configuration ------------------------------------------------------------------

    def configure(self, state: state_pb2.DesiredState | None) -> None:
        """Follow the state the controller gave (None: no probes, answers only)."""
        probing = state.probing if state is not None and state.HasField("probing") else None
        if probing != self.probing:
            self._next_target = 0
        self.probing = probing
        self._switch_peers = {}
        link_ports = set()
        servers = set()
        if state is not None:
            for n in state.neighbors:
                if n.kind == state_pb2.PEER_KIND_SWITCH and n.peer_mac:
                    self._switch_peers[n.port] = n.peer_mac
                    if latency.probes_link(state.switch_name, n.port, n.peer_name, n.peer_port):
                        link_ports.add(n.port)
                elif n.kind == state_pb2.PEER_KIND_HOST:
                    servers.add(n.port)
        self._servers = frozenset(servers)
        self._link_ports = frozenset(link_ports)

    @property
    def interval_s(self) -> float | None:
        """Seconds between rounds; None when the agent sends no probes."""
        p = self.probing
        return None if p is None or p.interval_ms == 0 else p.interval_ms / 1000

    # -- sending ------------------------------------------------------------------------

    def plan(self, up: Callable[[int], bool]) -> list[Planned]:
        """The probes of the next round (ports that are not `up` are skipped: a down link is
        not measured, it is down)."""
        p = self.probing
        if p is None:
            return []
        uplinks = [port for port in sorted(self._switch_peers) if up(port)]
        links = [port for port in uplinks if port in self._link_ports] if p.links else []
        planned = [Planned(LINK, port) for port in links]
        if p.address and p.targets and p.targets_per_round:
            for _ in range(min(p.targets_per_round, len(p.targets))):
                target = p.targets[self._next_target % len(p.targets)]
                self._next_target = (self._next_target + 1) % len(p.targets)
                planned.extend(Planned(MESH, u, target.name, target.address) for u in uplinks)
        room = MAX_PENDING - len(self._pending)
        if len(planned) > room:
            self.stats.skipped += len(planned) - max(room, 0)
            planned = planned[: max(room, 0)]
        return planned

    def request(self, planned: Planned, now_ns: int) -> bytes:
        """The frame of `planned`, stamped `now_ns`; it is in flight from now."""
        assert self.probing is not None, "plan() gives nothing without probing"
        self._seq = (self._seq + 1) & _SEQ_MASK
        probe = latency.Probe(latency.OP_REQUEST, planned.kind, planned.port, self._seq, now_ns)
        deadline = now_ns + self.probing.timeout_ms * 1_000_000
        self._pending[(planned.kind, planned.port, self._seq)] = _Pending(planned, now_ns, deadline)
        self.stats.sent += 1
        peer_mac = self._switch_peers[planned.port]
        src_mac = self._port_mac(planned.port)
        if planned.kind == LINK:
            return latency.link_frame(peer_mac, src_mac, probe)
        return latency.mesh_frame(
            peer_mac,
            src_mac,
            self.probing.address,
            planned.address,
            dscp=self.probing.dscp,
            probe=probe,
        )

    # -- receiving ----------------------------------------------------------------------

    def receive(self, frame: bytes, port: int, now_ns: int) -> None:
        """Take a punted probe frame that arrived on `port`: an answer to one of ours is
        resolved. Anything else is stray: a request (the data plane answers those for this
        switch), a probe from a server port (a host cannot forge answers), a mesh answer for
        another address."""
        if port in self._servers:
            self.stats.stray += 1
            return
        link = latency.parse_link(frame)
        if link is not None:
            if link[1].op != latency.OP_REPLY:
                self.stats.stray += 1
                return
            self._resolve(link[1], port, 0, now_ns)
            return
        mesh = latency.parse_mesh(frame)
        if mesh is None:
            return
        address = self.probing.address if self.probing is not None else 0
        if not address or mesh.dst != address or mesh.probe.op != latency.OP_REPLY:
            self.stats.stray += 1
            return
        self._resolve(mesh.probe, None, mesh.src, now_ns)

    def _resolve(self, probe: latency.Probe, port: int | None, src: int, now_ns: int) -> None:
        pending = self._pending.get((probe.kind, probe.port, probe.seq))
        ok = (
            pending is not None
            and pending.sent_ns == probe.sent_ns
            and (port is None or port == pending.planned.port)  # a link answer: same cable
            and (probe.kind == LINK or src == pending.planned.address)
        )
        if not ok or pending is None:
            self.stats.stray += 1
            return
        del self._pending[(probe.kind, probe.port, probe.seq)]
        if now_ns >= pending.deadline_ns:  # lost, whether or not expire() ran yet
            self._tally(pending.planned).sent += 1
            self.stats.lost += 1
            self.stats.stray += 1
            return
        held = max(0, probe.far_tx_ns - probe.far_rx_ns)
        rtt = max(0, now_ns - pending.sent_ns - held)
        self._tally(pending.planned).answered(rtt)
        self.stats.answered += 1

    def _tally(self, planned: Planned) -> _Tally:
        key = (planned.kind, planned.port, planned.target)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        return tally

    def expire(self, now_ns: int) -> None:
        """Count the probes unanswered past their deadline as lost."""
        late = [key for key, p in self._pending.items() if p.deadline_ns <= now_ns]
        for key in late:
            self._tally(self._pending.pop(key).planned).sent += 1
        self.stats.lost += len(late)

    # -- reporting ----------------------------------------------------------------------

    def take(self, report: control_pb2.Counters, now_ns: int) -> None:
        """Add the probes resolved since the last report to `report`, and start again."""
        self.expire(now_ns)
        results = list(self._results())
        if results:
            latency.write_results(report.probe_results, results)
        self._tallies = {}

    def _results(self) -> Iterator[latency.Result]:
        slow_ns = self.probing.slow_rtt_us * 1000 if self.probing is not None else 0
        merged: dict[str, _Tally] = {}
        for (kind, port, target), t in sorted(self._tallies.items()):
            if kind == MESH and slow_ns and t.received == t.sent and t.rtt_max_ns <= slow_ns:
                merged.setdefault(target, _Tally()).add(t)
            else:
                yield _result(kind, port, target, t)
        for target, t in sorted(merged.items()):
            yield _result(MESH, 0, target, t)


def _result(kind: int, port: int, target: str, t: _Tally) -> latency.Result:
    indices = sorted(t.buckets)
    return latency.Result(
        kind, port, target, t.sent, t.received, indices, [t.buckets[i] for i in indices],
        t.rtt_sum_ns, t.rtt_min_ns, t.rtt_max_ns,
    )  # fmt: skip
