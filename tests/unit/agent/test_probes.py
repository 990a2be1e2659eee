"""agent/probes.py: rounds, answers, timeouts and the reported histograms. The far end is the
softswitch's model of fabric.p4's answer_probe (the data plane answers requests)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from agent.probes import LINK, MAX_PENDING, MESH, Planned, Prober
from railfabric import latency
from railfabric.latency import Result, read_results
from railfabric.v1 import control_pb2, state_pb2
from softswitch.pipeline import ETH_HLEN, IPV4_MIN_LEN, answer_probe

pytestmark = pytest.mark.unit

MS = 1_000_000
A_ADDR, B_ADDR, C_ADDR = 0x0A000101, 0x0A000201, 0x0A000301
UPLINKS = (3, 4)
HOST_PORT = 1


def state(
    address: int, *, per_round: int = 1, targets: int = 2, uplinks: tuple[int, ...] = UPLINKS
) -> state_pb2.DesiredState:
    s = state_pb2.DesiredState(switch_name="tor-a")
    for port in uplinks:
        s.neighbors.add(port=port, kind=state_pb2.PEER_KIND_SWITCH, peer_mac=0x0200000000F0 + port)
    s.neighbors.add(port=HOST_PORT, kind=state_pb2.PEER_KIND_HOST)
    s.probing.interval_ms = 1000
    s.probing.links = True
    s.probing.address = address
    s.probing.targets_per_round = per_round
    s.probing.timeout_ms = 500
    s.probing.dscp = 26
    for name, addr in (("tor-b", B_ADDR), ("tor-c", C_ADDR))[:targets]:
        s.probing.targets.add(name=name, address=addr)
    return s


def prober(
    address: int = A_ADDR, *, per_round: int = 1, uplinks: tuple[int, ...] = UPLINKS
) -> Prober:
    p = Prober(lambda port: 0x020000000A00 + port)
    p.configure(state(address, per_round=per_round, uplinks=uplinks))
    return p


def answered(frame: bytes, address: int = 0) -> bytes | None:
    """The far switch's data plane: its answer to `frame` (it answers mesh probes to its probe
    `address`), None when it passes the frame to its agent."""
    ipv4 = frame[12:14] == latency.ETH_TYPE_IPV4.to_bytes(2, "big")
    answer = answer_probe(frame, ETH_HLEN + IPV4_MIN_LEN if ipv4 else 0, address)
    return None if answer is None else bytes(answer)


def report(p: Prober, now: int) -> dict[tuple[int, int, str], Result]:
    msg = control_pb2.Counters()
    p.take(msg, now)
    return {(r.kind, r.port, r.target): r for r in read_results(msg.probe_results)}


def test_of_a_cable_s_two_ends_one_sends_its_link_probes() -> None:
    """Both ends would measure the same round trip: the end whose (name, port) sorts first
    probes, the other only answers (and still probes the mesh)."""

    def end(me: str, port: int, peer: str, peer_port: int) -> Prober:
        s = state_pb2.DesiredState(switch_name=me)
        s.neighbors.add(
            port=port,
            kind=state_pb2.PEER_KIND_SWITCH,
            peer_name=peer,
            peer_port=peer_port,
            peer_mac=0x0200000000F0,
        )
        s.neighbors.add(port=7, kind=state_pb2.PEER_KIND_SWITCH, peer_name="zz")  # no MAC
        s.probing.interval_ms, s.probing.links = 1000, True
        p = Prober(lambda port: 0x020000000A00 + port)
        p.configure(s)
        return p

    cables = [("spine-p1-1", 1, "tor-r1-b1", 3), ("tor-a", 4, "tor-a", 2), ("x", 2, "x", 9)]
    for a, pa, b, pb in cables:
        links = [
            [x.port for x in end(*ends).plan(lambda port: True) if x.kind == LINK]
            for ends in ((a, pa, b, pb), (b, pb, a, pa))
        ]
        assert sorted(map(len, links)) == [0, 1], (a, pa, b, pb, links)
    # The spine end of tor-r1-b1:3 -- spine-p1-1:1 probes it; port 7's neighbour has no MAC to
    # address the probe to (and its answer would come from that address): not probed.
    assert [x.port for x in end("spine-p1-1", 1, "tor-r1-b1", 3).plan(lambda port: True)] == [1]


def test_a_round_probes_every_up_link_and_the_next_targets_on_every_up_uplink() -> None:
    p = prober(per_round=1)
    first = p.plan(lambda port: True)
    assert first == [
        Planned(LINK, 3),
        Planned(LINK, 4),
        Planned(MESH, 3, "tor-b", B_ADDR),
        Planned(MESH, 4, "tor-b", B_ADDR),
    ]
    second = p.plan(lambda port: port != 4)  # port 4 down: not measured
    assert second == [Planned(LINK, 3), Planned(MESH, 3, "tor-c", C_ADDR)]
    assert p.plan(lambda port: True)[-1].target == "tor-b"  # rotated round
    spine = prober(address=0)
    assert {x.kind for x in spine.plan(lambda port: True)} == {LINK}


def test_an_answered_link_probe_reports_its_rtt_less_the_far_end_hold_time() -> None:
    a = prober()
    planned = Planned(LINK, 3)
    frame = a.request(planned, now_ns=1_000 * MS)
    # The far end held it 2 ms: answer built by hand with those stamps.
    parsed = latency.parse_link(frame)
    assert parsed is not None
    reply = latency.link_frame(0, 0, parsed[1].reply(50 * MS, 52 * MS))
    a.receive(reply, 3, 1_007 * MS)
    r = report(a, 1_008 * MS)[(LINK, 3, "")]
    assert (r.sent, r.received) == (1, 1)
    assert r.rtt_min_ns == r.rtt_max_ns == r.rtt_sum_ns == 5 * MS
    assert list(r.bucket_index) == [latency.bucket_of(5 * MS)] and list(r.bucket_count) == [1]
    # Answered by the far data plane: to the port's MAC, from the neighbour's, the same cable
    # back (it stamps no hold time: the RTT is all of it).
    frame = a.request(planned, now_ns=2_000 * MS)
    echo = answered(frame)
    assert echo is not None
    assert latency.parse_link(echo) == (0x0200000000F3, latency.Probe(
        latency.OP_REPLY, LINK, 3, a._seq, 2_000 * MS
    ))  # fmt: skip
    assert echo[:6] == (0x020000000A03).to_bytes(6, "big")
    a.receive(echo, 4, 2_002 * MS)  # on another port: not this probe's cable
    assert a.stats.stray == 1
    a.receive(echo, 3, 2_003 * MS)
    assert report(a, 2_004 * MS)[(LINK, 3, "")].rtt_max_ns == 3 * MS
    # A request reaching the agent was not for this switch (its data plane answers its own).
    a.receive(a.request(planned, now_ns=2_005 * MS), 3, 2_006 * MS)
    assert (a.stats.stray, a.stats.answered) == (2, 2)


def test_a_mesh_probe_is_answered_by_the_target_only_and_back_to_where_it_came_from() -> None:
    a = prober()
    frame = a.request(Planned(MESH, 4, "tor-b", B_ADDR), now_ns=10 * MS)
    assert answered(frame, C_ADDR) is None  # not its address: to its agent, a stray there
    echo = answered(frame, B_ADDR)
    assert echo is not None
    mesh = latency.parse_mesh(echo)
    assert mesh is not None
    assert (mesh.src, mesh.dst, mesh.dscp) == (B_ADDR, A_ADDR, 26)
    # Back out of the port it came in on, from the MAC it was sent to (a's uplink 4's peer),
    # to the MAC it came from (a's port 4): the spine routes it to a.
    assert mesh.eth_src == 0x0200000000F4 and echo[:6] == (0x020000000A04).to_bytes(6, "big")
    # A forged answer (another source address) is stray, as is one from a server port; the
    # real one resolves the probe.
    forged = latency.mesh_frame(0, 0, C_ADDR, A_ADDR, dscp=0, probe=mesh.probe)
    a.receive(forged, 3, 12 * MS)
    a.receive(echo, HOST_PORT, 12 * MS)
    assert a.stats.stray == 2
    a.receive(echo, 3, 12 * MS)
    r = report(a, 13 * MS)[(MESH, 4, "tor-b")]
    assert (r.sent, r.received, r.rtt_max_ns) == (1, 1, 2 * MS)


def test_an_unanswered_probe_is_lost_once_and_a_late_answer_is_stray() -> None:
    a = prober()
    frame = a.request(Planned(LINK, 3), now_ns=0)
    echo = answered(frame)
    assert echo is not None
    assert report(a, 499 * MS) == {}  # not yet due
    r = report(a, 500 * MS)[(LINK, 3, "")]
    assert (r.sent, r.received, list(r.bucket_index)) == (1, 0, [])
    a.receive(echo, 3, 501 * MS)
    assert (a.stats.lost, a.stats.stray, report(a, 600 * MS)) == (1, 1, {})


def test_in_flight_probes_are_bounded() -> None:
    a = prober()
    for _ in range(MAX_PENDING):
        a.request(Planned(LINK, 3), now_ns=0)
    assert a.plan(lambda port: True) == []
    assert a.stats.skipped == 4


def test_healthy_uplinks_to_a_target_are_merged_and_a_slow_or_lossy_one_stands_alone() -> None:
    a = prober(uplinks=(3, 4, 5, 6))
    assert a.probing is not None
    a.probing.slow_rtt_us = 3_000
    a.probing.targets.add(name="tor-d", address=C_ADDR + 1)

    def probe(port: int, target: str, rtt_ms: int | None) -> None:
        sent = 0
        address = B_ADDR if target == "tor-b" else C_ADDR + 1
        frame = a.request(Planned(MESH, port, target, address), now_ns=sent)
        if rtt_ms is None:
            return
        mesh = latency.parse_mesh(frame)
        assert mesh is not None
        reply = latency.mesh_frame(0, 0, address, A_ADDR, dscp=26, probe=mesh.probe.reply(0, 0))
        a.receive(reply, port, sent + rtt_ms * MS)

    probe(3, "tor-b", 1)
    probe(4, "tor-b", 2)
    probe(3, "tor-d", 1)
    probe(4, "tor-d", 5)  # slow: above 3 ms
    probe(5, "tor-d", None)  # lost
    probe(6, "tor-d", 2)
    got = report(a, 600 * MS)
    assert set(got) == {
        (MESH, 0, "tor-b"),
        (MESH, 0, "tor-d"),
        (MESH, 4, "tor-d"),
        (MESH, 5, "tor-d"),
    }
    both = got[(MESH, 0, "tor-b")]
    assert (both.sent, both.received, both.rtt_min_ns, both.rtt_max_ns) == (2, 2, MS, 2 * MS)
    assert both.rtt_sum_ns == 3 * MS
    rest = got[(MESH, 0, "tor-d")]
    assert (rest.sent, rest.received, rest.rtt_min_ns, rest.rtt_max_ns) == (2, 2, MS, 2 * MS)
    assert got[(MESH, 4, "tor-d")].rtt_max_ns == 5 * MS
    assert (got[(MESH, 5, "tor-d")].sent, got[(MESH, 5, "tor-d")].received) == (1, 0)
    # Link probes are never merged: each is its cable's measurement.
    echo = answered(a.request(Planned(LINK, 3), now_ns=0))
    assert echo is not None
    a.receive(echo, 3, MS)
    assert set(report(a, 2 * MS)) == {(LINK, 3, "")}


@settings(max_examples=80)
@given(
    st.integers(min_value=0, max_value=4_000),
    st.lists(
        st.tuples(
            st.integers(min_value=3, max_value=6),  # not HOST_PORT: probes from there are refused
            st.sampled_from(["tor-b", "tor-c"]),
            st.none() | st.integers(min_value=0, max_value=6_000),
        ),
        max_size=25,
    ),
)
def test_merging_loses_nothing_and_merges_only_healthy_uplinks(
    slow_us: int, probes: list[tuple[int, str, int | None]]
) -> None:
    """Against a from-scratch tally per (uplink, target): per target, the results add up to
    every probe (sent, received, RTT buckets, sum, min, max); a port-0 result holds exactly the
    uplinks with no loss and no RTT above the threshold; the others stand alone."""
    a = prober(uplinks=(3, 4, 5, 6))
    assert a.probing is not None
    a.probing.slow_rtt_us = slow_us
    scratch: dict[tuple[int, str], list[int | None]] = {}
    for port, target, rtt_us in probes:
        address = B_ADDR if target == "tor-b" else C_ADDR
        frame = a.request(Planned(MESH, port, target, address), now_ns=0)
        scratch.setdefault((port, target), []).append(rtt_us)
        if rtt_us is None:
            continue
        mesh = latency.parse_mesh(frame)
        assert mesh is not None
        reply = latency.mesh_frame(0, 0, address, A_ADDR, dscp=26, probe=mesh.probe.reply(0, 0))
        a.receive(reply, port, rtt_us * 1000)
    got = report(a, 600 * MS)

    def healthy(rtts: list[int | None]) -> bool:
        return bool(slow_us) and all(r is not None and r * 1000 <= slow_us * 1000 for r in rtts)

    for target in ("tor-b", "tor-c"):
        mine = {p: r for (p, t), r in scratch.items() if t == target}
        merged = [p for p, r in mine.items() if healthy(r)]
        alone = sorted(p for p in mine if p not in merged)
        assert sorted(p for (_k, p, t) in got if t == target and p) == alone
        assert ((MESH, 0, target) in got) == bool(merged)
        results = [r for (_k, _p, t), r in got.items() if t == target]
        rtts = [x for r in mine.values() for x in r if x is not None]
        assert sum(r.sent for r in results) == sum(len(r) for r in mine.values())
        assert sum(r.received for r in results) == len(rtts)
        assert sorted(
            i
            for r in results
            for i, n in zip(r.bucket_index, r.bucket_count, strict=True)
            for _ in range(n)
        ) == sorted(latency.bucket_of(x * 1000) for x in rtts)
        assert sum(r.rtt_sum_ns for r in results) == sum(rtts) * 1000
        if merged:
            m = got[(MESH, 0, target)]
            ok = [x for p in merged for x in mine[p] if x is not None]
            assert (m.rtt_min_ns, m.rtt_max_ns) == (min(ok) * 1000, max(ok) * 1000)


@dataclass
class Fate:
    planned: Planned
    rtt: int | None  # None: lost


class ProberMachine(RuleBasedStateMachine):
    """Random rounds, answers (in any order, some late, some twice), forged answers, time
    passing and reports, against a log of every probe's fate: the reports together count each
    probe once, as answered with its RTT or as lost, and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.a = prober(per_round=2)
        self.now = 0
        # (frame, port sent on, sent at) of probes in flight, as the far ends answer them.
        self.flying: list[tuple[Planned, bytes, int]] = []
        self.echoes: list[tuple[Planned, bytes, int]] = []
        self.fates: list[Fate] = []
        self.reported: dict[tuple[int, int, str], list[int]] = {}
        self.lost: dict[tuple[int, int, str], int] = {}

    @rule()
    def round(self) -> None:
        for planned in self.a.plan(lambda port: True):
            frame = self.a.request(planned, self.now)
            self.flying.append((planned, frame, self.now))

    @precondition(lambda self: self.flying)
    @rule(i=st.integers(min_value=0))
    def far_end_answers(self, i: int) -> None:
        planned, frame, sent = self.flying.pop(i % len(self.flying))
        echo = answered(frame, planned.address)
        assert echo is not None
        self.echoes.append((planned, echo, sent))

    @precondition(lambda self: self.echoes)
    @rule(i=st.integers(min_value=0), again=st.booleans())
    def answer_arrives(self, i: int, again: bool) -> None:
        planned, echo, sent = self.echoes[i % len(self.echoes)]
        if not again:
            self.echoes.pop(i % len(self.echoes))
        timely = self.now < sent + 500 * MS and not any(f.planned is planned for f in self.fates)
        self.a.receive(echo, planned.port, self.now)
        if timely:
            self.fates.append(Fate(planned, self.now - sent))

    @rule(forged=st.integers(min_value=0, max_value=2**32 - 1))
    def forged_answer(self, forged: int) -> None:
        probe = latency.Probe(latency.OP_REPLY, LINK, 3, forged, forged)
        self.a.receive(latency.link_frame(0, 0, probe), 3, self.now)

    @rule(ms=st.integers(min_value=1, max_value=700))
    def time_passes(self, ms: int) -> None:
        self.now += ms * MS

    @rule()
    def report(self) -> None:
        """Reports come at random steps, so late answers often arrive before the report that
        would expire their probe."""
        msg = control_pb2.Counters()
        self.a.take(msg, self.now)
        for r in read_results(msg.probe_results):
            key = (r.kind, r.port, r.target)
            self.lost[key] = self.lost.get(key, 0) + r.sent - r.received
            counts = self.reported.setdefault(key, [])
            counts.extend(
                i for i, n in zip(r.bucket_index, r.bucket_count, strict=True) for _ in range(n)
            )
        self.reports_are_the_fates()

    def reports_are_the_fates(self) -> None:
        answered: dict[tuple[int, int, str], list[int]] = {}
        for f in self.fates:
            key = (f.planned.kind, f.planned.port, f.planned.target)
            answered.setdefault(key, []).append(latency.bucket_of(f.rtt or 0))
        assert {k: sorted(v) for k, v in self.reported.items() if v} == {
            k: sorted(v) for k, v in answered.items()
        }
        sent = self.a.stats.sent
        assert self.a.stats.answered == len(self.fates)
        assert sum(self.lost.values()) == self.a.stats.lost
        assert sent == len(self.fates) + self.a.stats.lost + len(self.a._pending)


ProberMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, suppress_health_check=[HealthCheck.too_slow]
)
test_prober_model = ProberMachine.TestCase
