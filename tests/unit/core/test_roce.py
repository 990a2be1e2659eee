"""controller/core/roce.py through the decision core: RoCE rates per port and kind from
cumulative counts, NAK samples placed on their flows' predicted paths, `roce_retransmission`
on the link the NAK-ing flows share (at its transmitting end), not localised where nothing was
sampled, held through a window (no flapping), RNR NAKs and clean traffic never alarming, and
`roce_congestion` after a sustained CNP rate."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TypeAlias

import pytest

from controller.cli import roce_commands
from controller.core import roce
from controller.core.records import AlarmRecord
from controller.core.roce import Placed, RoceSwitch, Sample, localise
from railfabric.fabric_counters import roce_index
from railfabric.v1 import admin_pb2, control_pb2
from tests.unit.core.harness import LAB, Harness, S

pytestmark = pytest.mark.unit

K = control_pb2.RoceKind
Kind: TypeAlias = control_pb2.RoceKind.ValueType
TC = 3  # the lossless class RoCE data travels in
IP = {
    "b1s1n1": "10.0.0.2",  # tor-r1-b1 port 1
    "b1s1n2": "10.0.0.10",  # tor-r2-b1 port 1
    "b2s1n1": "10.0.0.18",  # tor-r1-b2 port 1
    "b2s2n1": "10.0.0.19",  # tor-r1-b2 port 2
    "b2s1n2": "10.0.0.26",  # tor-r2-b2 port 1
}


def ip(name: str) -> int:
    return int(ipaddress.IPv4Address(IP[name]))


def counters(
    wall_ns: int,
    ports: Mapping[int, Mapping[Kind, int]],
    samples: list[control_pb2.NakSample] = (),  # type: ignore[assignment]
    dropped: int = 0,
) -> control_pb2.Counters:
    """A report: port -> kind -> cumulative packets (class 3), and sampled NAKs."""
    msg = control_pb2.Counters(wall_ns=wall_ns, nak_samples=samples, nak_samples_dropped=dropped)
    for port, kinds in sorted(ports.items()):
        msg.ports.add(port=port)
        for kind, packets in sorted(kinds.items()):
            msg.roce_cells.append(roce_index(port, TC, kind))
            msg.roce_packets.append(packets)
    return msg


def nak(
    port: int, requester: str, responder: str, sport: int, kind: Kind = K.ROCE_KIND_NAK_PSN_SEQUENCE
) -> control_pb2.NakSample:
    """The NAK `responder` sends back to `requester` for the data flow requester -> responder,
    as the responder's ToR samples it on host port `port`."""
    return control_pb2.NakSample(
        port=port,
        src_ipv4=ip(responder),
        dst_ipv4=ip(requester),
        udp_sport=sport,
        dst_qp=0x11,
        psn=7,
        kind=kind,
        syndrome=0x60,
    )


def via(h: Harness, requester: str, responder: str, spine: str) -> int:
    """A source port whose data flow requester -> responder crosses `spine` (found with the
    path prediction the core itself uses)."""
    for sport in range(49152, 49152 + 512):
        reply = h.core.predict_path(
            admin_pb2.PredictPathRequest(
                src_ip=IP[requester], dst_ip=IP[responder], protocol=17, sport=sport, dport=4791
            )
        )
        if any(hop.switch_name == spine for hop in reply.hops):
            return sport
    raise AssertionError(f"no flow {requester} -> {responder} crosses {spine}")


def feed(h: Harness, name: str, msg: control_pb2.Counters) -> None:
    h.run(h.core.counters(name, msg, h.now))


def roce_alarms(h: Harness) -> dict[str, AlarmRecord]:
    return {i: a for i, a in h.core.alarms.active.items() if a.kind.startswith(("roce_",))}


@pytest.fixture
def lab() -> Harness:
    h = Harness()
    h.connect_all()
    return h


def test_counts_are_read_by_cell_and_arrays_that_differ_count_nothing(lab: Harness) -> None:
    cnp = K.ROCE_KIND_CNP
    msg = counters(0, {1: {cnp: 5}, 3: {cnp: 7, K.ROCE_KIND_DATA: 9}})
    assert roce.counts_of(msg) == {
        roce_index(1, TC, cnp): 5,
        roce_index(3, TC, K.ROCE_KIND_DATA): 9,
        roce_index(3, TC, cnp): 7,
    }
    assert roce.port_totals(roce.counts_of(msg), cnp) == {1: 5, 3: 7}
    twice = control_pb2.Counters(roce_cells=[roce_index(1, TC, cnp)] * 2, roce_packets=[2, 3])
    assert roce.counts_of(twice) == {roce_index(1, TC, cnp): 5}  # a cell listed twice: summed
    bad = control_pb2.Counters(wall_ns=lab.now.wall_ns, roce_cells=[1, 2], roce_packets=[3])
    assert roce.counts_of(bad) == {}
    lab.run(lab.core.counters("tor-r1-b1", bad, lab.now))
    assert lab.warnings[-1] == (
        "counters from tor-r1-b1: Counters.roce_cells has 2 cells and roce_packets 1: the RoCE "
        "counts of this report are ignored"
    )


def test_rates_per_port_and_kind_between_the_last_two_reports() -> None:
    cnp, psn = K.ROCE_KIND_CNP, K.ROCE_KIND_NAK_PSN_SEQUENCE
    sw = RoceSwitch()
    sw.record_counts(counters(0, {1: {cnp: 1_000, K.ROCE_KIND_DATA: 7}}))
    assert sw.rates == {} and sw.span_ns == 0  # one report: no rate yet
    sw.record_counts(counters(2 * S, {1: {cnp: 3_000, psn: 40, K.ROCE_KIND_DATA: 9}}))
    # Data and ACKs are not kept (answers compute them from the reports).
    assert sw.rates_by_key() == {(1, TC, cnp): 1_000.0, (1, TC, psn): 20.0}
    assert sw.span_ns == 2 * S
    assert sw.port_rate(roce.NETWORK_NAKS) == {1: 20.0}
    # A count that went down: the target restarted, no rate until the next report.
    sw.record_counts(counters(4 * S, {1: {cnp: 10}}))
    assert sw.rates == {}
    sw.record_counts(counters(5 * S, {1: {cnp: 510}}))
    assert sw.rates_by_key() == {(1, TC, cnp): 500.0}
    # A report no newer than the last measures nothing.
    sw.record_counts(counters(5 * S, {1: {cnp: 910}}))
    assert sw.rates == {}
    # Every kind, between two reports, for answers.
    got = roce.report_rates(
        counters(0, {1: {K.ROCE_KIND_DATA: 100}}),
        counters(2 * S, {1: {K.ROCE_KIND_DATA: 300, K.ROCE_KIND_ACK: 10}, 2: {cnp: 4}}),
    )
    assert got == roce.ReportRates(
        {(1, TC, K.ROCE_KIND_DATA): 100.0, (1, TC, K.ROCE_KIND_ACK): 5.0, (2, TC, cnp): 2.0},
        2 * S,
        2 * S,
    )
    restarted = roce.report_rates(
        counters(0, {1: {K.ROCE_KIND_DATA: 100}}), counters(2 * S, {1: {K.ROCE_KIND_DATA: 3}})
    )
    assert restarted == roce.ReportRates({}, 0, 2 * S)


def test_a_naks_flow_is_its_reverse() -> None:
    s = nak(1, "b1s1n1", "b2s1n1", 50_000)
    assert roce.flow_of(s) == (ip("b1s1n1"), ip("b2s1n1"), 50_000)


def test_localise_scores_links_by_distinct_flows() -> None:
    pair = ("a", "b")

    def sample(
        flow: int, *links: tuple[str, int], kind: int = K.ROCE_KIND_NAK_PSN_SEQUENCE
    ) -> Sample:
        return Sample(0, "b", 1, kind, (flow, 9, 1), Placed(pair, links))

    x, y, z = ("s1", 1), ("s2", 2), ("s3", 3)
    # The same flow sampled three times counts once; RNR NAKs accuse nothing.
    found = localise(
        [
            sample(1, x, y),
            sample(1, x, y),
            sample(1, x, y),
            sample(2, x, z),
            sample(3, y, z, kind=K.ROCE_KIND_NAK_RNR),
        ]
    )
    assert found.link_flows == {x: 2, y: 1, z: 1} and found.flows == 2
    assert [s.end for s in found.suspects] == [x] and found.suspects[0].flows == 2
    # Flows sharing nothing accuse nothing; one flow accuses its whole path.
    assert localise([sample(1, x), sample(2, y)]).suspects == ()
    assert [s.end for s in localise([sample(1, x, y)]).suspects] == [x, y]


def test_naks_on_flows_sharing_one_link_raise_the_alarm_at_its_transmitting_end(
    lab: Harness,
) -> None:
    h = lab
    spine = "spine-p1-1"
    # Three requesters on three ToRs, two responders on tor-r1-b2: the flows share only
    # spine-p1-1 -> tor-r1-b2 (spine-p1-1 port 3).
    a = nak(1, "b1s1n1", "b2s1n1", via(h, "b1s1n1", "b2s1n1", spine))
    b = nak(2, "b1s1n2", "b2s2n1", via(h, "b1s1n2", "b2s2n1", spine))
    c = nak(1, "b2s1n2", "b2s1n1", via(h, "b2s1n2", "b2s1n1", spine))
    tor = "tor-r1-b2"
    clean = {3: {K.ROCE_KIND_DATA: 0}}
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_DATA: 1}, **clean}))
    h.advance(5 * S)
    feed(
        h,
        tor,
        counters(
            h.now.wall_ns,
            {
                1: {K.ROCE_KIND_DATA: 1, K.ROCE_KIND_NAK_PSN_SEQUENCE: 100},
                2: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 60},
                **clean,
            },
            [a, b, c, a],
        ),
    )
    alarms = roce_alarms(h)
    assert list(alarms) == [f"roce_retransmission:{spine}:3"], alarms
    alarm = alarms[f"roce_retransmission:{spine}:3"]
    assert (alarm.switch, alarm.port, alarm.severity, alarm.kind) == (
        spine,
        3,
        "warning",
        "roce_retransmission",
    )
    assert "toward tor-r1-b2:3" in alarm.message
    assert "3 of 3 NAK-ing flows" in alarm.message
    assert "20.0/s at tor-r1-b2:1" in alarm.message
    assert "tor-r1-b1->tor-r1-b2" in alarm.message
    assert h.core.roce.suspects()[0].end == (spine, 3)
    events = [e for e in h.core.events if e.type == admin_pb2.EVENT_KIND_ALARM_RAISED]
    assert events[-1].switch_name == spine and events[-1].port == 3

    # GetRoce and `railctl roce` say the same.
    reply = h.core.roce_answer()
    assert [(p.switch_name, p.port, p.nak_psn_sequence_per_s) for p in reply.ports] == [
        (tor, 1, 20.0),
        (tor, 2, 12.0),
    ]
    (suspect,) = reply.suspects
    assert (suspect.end.switch_name, suspect.end.port, suspect.peer) == (spine, 3, "tor-r1-b2:3")
    assert (suspect.flows, suspect.of_flows) == (3, 3)
    assert list(suspect.tor_pairs) == [
        "tor-r1-b1->tor-r1-b2",
        "tor-r2-b1->tor-r1-b2",
        "tor-r2-b2->tor-r1-b2",
    ]
    assert {(c.end.switch_name, c.end.port): c.flows for c in reply.crossed} == {
        (spine, 3): 3,
        (tor, 1): 2,
        (tor, 2): 1,
        ("tor-r1-b1", 3): 1,
        ("tor-r2-b1", 3): 1,
        ("tor-r2-b2", 3): 1,
    }
    assert (reply.samples, reply.flows, reply.window_ms, reply.sampling) == (4, 3, 10_000, True)
    assert reply.assessed_wall_ns == h.now.wall_ns
    assert [(x.switch_name, x.port, x.hot_now) for x in reply.hot if x.switch_name] == [
        (tor, 1, True),
        (tor, 2, True),
    ]
    assert h.core.roce_answer("spine-p1-2").ports == []
    text = "\n".join(roce_commands.render(reply, argparse.Namespace()))
    assert re.search(r"^tor-r1-b2\s+1\s+3\s+0\s+0\s+20\.0\s+0\s+0\s+0$", text, re.M), text
    assert re.search(r"^spine-p1-1:3\s+tor-r1-b2:3\s+3/3\s+tor-r1-b1->tor-r1-b2, ", text, re.M)
    assert roce_commands._exit(reply) == 3


def test_clean_roce_traffic_raises_nothing(lab: Harness) -> None:
    h = lab
    before = dict(h.core.alarms.active)
    for i in range(6):
        for tor in ("tor-r1-b1", "tor-r1-b2"):
            ports = {
                p: {
                    K.ROCE_KIND_DATA: 1_000_000 * i,
                    K.ROCE_KIND_ACK: 100_000 * i,
                    K.ROCE_KIND_CNP: 10 * i,  # a few CNPs: DCQCN at work, not congestion
                }
                for p in (1, 2, 3, 4)
            }
            assert h.core.counters(tor, counters(h.now.wall_ns, ports), h.now) == []
        h.advance(5 * S)
    assert h.core.alarms.active == before
    (row,) = [r for r in h.core.roce_answer("tor-r1-b1").ports if r.port == 1]
    assert (row.data_per_s, row.ack_per_s, row.cnp_per_s) == (200_000.0, 20_000.0, 2.0)


def test_rnr_naks_are_counted_and_never_accuse_the_network(lab: Harness) -> None:
    h = lab
    tor = "tor-r1-b2"
    s = nak(1, "b1s1n1", "b2s1n1", 50_000, kind=K.ROCE_KIND_NAK_RNR)
    for i in range(4):
        feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_RNR: 1_000 * i}}, [s]))
        h.advance(5 * S)
    assert roce_alarms(h) == {}
    assert h.core.roce.switches[tor].rates_by_key() == {(1, TC, K.ROCE_KIND_NAK_RNR): 200.0}


def test_naks_without_samples_raise_on_the_port_they_arrive_on_not_localised(
    lab: Harness,
) -> None:
    h = lab
    tor = "tor-r1-b2"
    # The same NAKs cross the spine on their way back: counted there too, alarmed once, where
    # they enter the fabric (the spine reports first).
    for i in range(3):
        naks = {K.ROCE_KIND_NAK_PSN_SEQUENCE: 500 * i}
        feed(h, "spine-p1-1", counters(h.now.wall_ns, {3: naks}))
        assert not any(a.switch == "spine-p1-1" for a in roce_alarms(h).values())
        feed(h, tor, counters(h.now.wall_ns, {1: naks}))
        h.advance(5 * S)
    alarms = roce_alarms(h)
    assert list(alarms) == [f"roce_retransmission:{tor}:1"]
    text = alarms[f"roce_retransmission:{tor}:1"].message
    assert "100.0 RoCE NAKs/s" in text
    assert "not localised: no NAK sampled on this port in the last 10 s" in text


def test_with_sampling_off_the_alarm_says_so() -> None:
    h = Harness()
    off = dataclasses.replace(h.core.roce.params, sample_interval_us=0)
    h.core.roce.params = off
    h.connect_all()
    h.core.roce.params = off  # as the intent would say (a reload sets it)
    for i in range(3):
        # Not a host port: raised at the second report in a row above the threshold.
        assert roce_alarms(h) == {}
        feed(h, "spine-p1-2", counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_OTHER: 100 * i}}))
        h.advance(5 * S)
    (alarm,) = roce_alarms(h).values()
    assert (alarm.switch, alarm.port) == ("spine-p1-2", 1)
    assert "NAK sampling is off (roce.nak_sample_interval_us: 0)" in alarm.message


def test_the_alarm_holds_through_the_window_and_clears_after_it(lab: Harness) -> None:
    h = lab
    spine = "spine-p1-1"
    tor = "tor-r1-b2"
    a = nak(1, "b1s1n1", "b2s1n1", via(h, "b1s1n1", "b2s1n1", spine))
    b = nak(2, "b1s1n2", "b2s2n1", via(h, "b1s1n2", "b2s2n1", spine))
    naks = 0
    raised_cleared: list[tuple[int, int]] = []
    # 12 NAKs/s then 8 then 12 ... around the threshold of 10: raised once, held.
    for i, per_s in enumerate([0, 12, 8, 12, 8, 12, 0, 0, 0, 0]):
        naks += per_s * 5
        feed(
            h,
            tor,
            counters(
                h.now.wall_ns,
                {p: {K.ROCE_KIND_NAK_PSN_SEQUENCE: naks} for p in (1, 2)},
                [a, b] if per_s else [],
            ),
        )
        kinds = [e.type for e in h.core.events]
        raised_cleared.append(
            (
                kinds.count(admin_pb2.EVENT_KIND_ALARM_RAISED),
                kinds.count(admin_pb2.EVENT_KIND_ALARM_CLEARED),
            )
        )
        if i == 5:
            assert f"roce_retransmission:{spine}:3" in roce_alarms(h)
        h.advance(5 * S)
    first_raise = raised_cleared[1][0]
    assert [r for r, _ in raised_cleared[1:]] == [first_raise] * 9  # raised once
    assert roce_alarms(h) == {}
    # Cleared once per link alarm, a window after the NAKs stopped (report 7 at 35 s: the
    # last hot report was at 25 s).
    cleared = [c for _, c in raised_cleared]
    assert cleared[6] == cleared[0] and cleared[8] > cleared[0]
    texts = [e.message for e in h.core.events if e.type == admin_pb2.EVENT_KIND_ALARM_CLEARED]
    assert "no NAK-ing flow sampled in the last 10 s on a port or ToR pair above" in texts[-1]


def test_sustained_cnps_raise_congestion_and_a_lower_rate_clears_it(lab: Harness) -> None:
    h = lab
    tor = "tor-r1-b1"
    cnps = 0
    seen: list[bool] = []
    for per_s in [0, 2_000, 2_000, 2_000, 500]:
        cnps += per_s * 5
        feed(h, tor, counters(h.now.wall_ns, {3: {K.ROCE_KIND_CNP: cnps}}))
        seen.append(f"roce_congestion:{tor}:3" in roce_alarms(h))
        h.advance(5 * S)
    # Above 1,000/s from 0 s: at 10 s it has lasted the 10 s of roce.cnp_alarm_s.
    assert seen == [False, False, True, True, False]
    text = next(
        e.message
        for e in h.core.events
        if e.type == admin_pb2.EVENT_KIND_ALARM_RAISED and e.switch_name == tor
    )
    assert "2000 CNPs/s arriving for 10 s" in text and "(roce.cnp_alarm_s)" in text


def test_a_routing_change_places_new_samples_on_the_new_path(lab: Harness) -> None:
    h = lab
    spine = "spine-p1-1"
    sport = via(h, "b1s1n1", "b2s1n1", spine)
    flow = (ip("b1s1n1"), ip("b2s1n1"), sport)
    first = h.core.roce._place(flow, h.now.mono_ns, h.core._roce_context)
    assert first is not None and (spine, 3) in first.links
    assert first.pair == ("tor-r1-b1", "tor-r1-b2")
    h.set_carrier("tor-r1-b2:3--spine-p1-1:3", False)
    h.settle()
    again = h.core.roce._place(flow, h.now.mono_ns, h.core._roce_context)
    assert again is not None and (spine, 3) not in again.links


def test_path_prediction_is_bounded_per_second(lab: Harness) -> None:
    h = lab
    monitor = h.core.roce
    ctx = h.core._roce_context
    placed = [
        monitor._place((ip("b1s1n1"), ip("b2s1n1"), sport), h.now.mono_ns, ctx)
        for sport in range(roce.PREDICTIONS_PER_S + 10)
    ]
    assert sum(p is not None for p in placed) == roce.PREDICTIONS_PER_S
    assert monitor.unplaced == 10
    # A cached flow costs nothing; a second later the budget is back.
    assert monitor._place((ip("b1s1n1"), ip("b2s1n1"), 0), h.now.mono_ns, ctx) is not None
    later = h.now.mono_ns + S
    assert monitor._place((ip("b1s1n1"), ip("b2s1n1"), 65_000), later, ctx) is not None


def _lab_file(tmp_path: Path, extra: str) -> Path:
    text = LAB.read_text().replace("rails: 2\n", f"rails: 2\n{extra}\n")
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return path


def test_with_the_qp_hashed_a_flow_counts_on_every_path_of_its_nic_pair(tmp_path: Path) -> None:
    h = Harness(_lab_file(tmp_path, "ecmp: {hash: five_tuple_qp}"))
    h.connect_all()
    assert h.core.roce.params.qp_hashed
    flow = (ip("b1s1n1"), ip("b2s1n1"), 50_000)
    placed = h.core.roce._place(flow, h.now.mono_ns, h.core._roce_context)
    assert placed is not None
    # Both spines: the data's QP (the responder's) is not in the NAK, so either path.
    assert {("tor-r1-b1", 3), ("tor-r1-b1", 4), ("spine-p1-1", 3), ("spine-p1-2", 3)} <= set(
        placed.links
    )
    assert ("tor-r1-b2", 1) in placed.links
    assert h.core.roce.predictions == roce.PATH_QPS


def test_a_reload_takes_the_new_thresholds(tmp_path: Path) -> None:
    h = Harness()
    h.connect_all()
    tor = "tor-r1-b2"
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 0}}))
    h.advance(5 * S)
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 25}}))  # 5/s
    assert roce_alarms(h) == {}
    h.reload(_lab_file(tmp_path, "roce: {nak_alarm_per_s: 2, window_s: 30}"))
    assert h.core.roce.params.nak_alarm_per_s == 2.0
    assert h.core.roce.params.window_ns == 30 * S
    h.advance(5 * S)
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 50}}))
    assert list(roce_alarms(h)) == [f"roce_retransmission:{tor}:1"]


def test_a_congestion_alarm_restored_from_the_store_clears_when_cnps_stop() -> None:
    h = Harness()
    h.connect_all()
    tor = "tor-r1-b1"
    cnps = 0
    for per_s in [0, 2_000, 2_000, 2_000]:
        cnps += per_s * 5
        feed(h, tor, counters(h.now.wall_ns, {3: {K.ROCE_KIND_CNP: cnps}}))
        h.advance(5 * S)
    assert f"roce_congestion:{tor}:3" in roce_alarms(h)
    h.restart_controller()
    h.connect_all()
    assert f"roce_congestion:{tor}:3" in roce_alarms(h)  # restored
    for _ in range(2):  # the CNPs stopped: the counts do not grow
        feed(h, tor, counters(h.now.wall_ns, {3: {K.ROCE_KIND_CNP: cnps}}))
        h.advance(5 * S)
    assert roce_alarms(h) == {}


def test_a_retransmission_alarm_restored_from_the_store_waits_a_window_for_evidence() -> None:
    h = Harness()
    h.connect_all()
    tor = "tor-r1-b2"
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 0}}))
    h.advance(5 * S)
    feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 500}}))
    alarm_id = f"roce_retransmission:{tor}:1"
    assert alarm_id in roce_alarms(h)
    h.restart_controller()
    h.connect_all()
    seen = []
    for _ in range(4):  # the NAKs stopped
        feed(h, tor, counters(h.now.wall_ns, {1: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 500}}))
        seen.append(alarm_id in roce_alarms(h))
        h.advance(5 * S)
    # Kept while the new monitor has less than a window (10 s) of reports (0, 5 s), then
    # cleared: nothing was hot in that window.
    assert seen == [True, True, False, False]


def test_flows_sharing_no_link_raise_where_the_naks_arrive_saying_so(lab: Harness) -> None:
    h = lab
    tor = "tor-r1-b2"
    a = nak(1, "b1s1n1", "b2s1n1", via(h, "b1s1n1", "b2s1n1", "spine-p1-1"))
    b = nak(2, "b1s1n2", "b2s2n1", via(h, "b1s1n2", "b2s2n1", "spine-p1-2"))
    for i in range(2):
        naks = {p: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 100 * i} for p in (1, 2)}
        feed(h, tor, counters(h.now.wall_ns, naks, [a, b] if i else []))
        h.advance(5 * S)
    alarms = roce_alarms(h)
    assert sorted(alarms) == [f"roce_retransmission:{tor}:1", f"roce_retransmission:{tor}:2"]
    text = alarms[f"roce_retransmission:{tor}:1"].message
    assert "not localised: the 2 NAK-ing flows sampled in the last 10 s share no link" in text
    assert h.core.roce.suspects() == ()
