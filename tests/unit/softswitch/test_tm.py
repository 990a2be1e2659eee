"""The traffic manager's queues: strict priority for CNP, DRR among the rest, port rate,
tail drop and ECN marking (softswitch/tm.py, softswitch/ecn.py), and the integration test's
ECN incast with the slack its numbers leave. Simulated time only."""

from __future__ import annotations

import functools
import ipaddress
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from softswitch import ecn
from softswitch.tm import TC_CNP, TrafficManager, Verdict
from tests.integration.softswitch import test_qos as qos

pytestmark = pytest.mark.unit

GBPS = 1_000_000_000
MS = 1_000_000


def mac(port: int) -> bytes:
    return bytes([2, 0, 0, 0, 0, port])


@functools.cache
def _template(size: int, tos: int) -> bytes:
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.1.1", tos=tos)
        / UDP(sport=49152, dport=4791)
    )
    raw = bytes(pkt)
    return raw + bytes(size - len(raw))


def frame(size: int = 1000, *, tos: int = 0, tag: int = 0) -> bytes:
    """An IPv4/UDP frame of `size` bytes; `tag` (the IPv4 id) tells frames apart. Built by
    scapy once per (size, tos), then the id is patched and the header checksum recomputed."""
    raw = bytearray(_template(size, tos))
    raw[18:20] = tag.to_bytes(2)
    raw[24:26] = b"\0\0"
    total = sum(int.from_bytes(raw[i : i + 2]) for i in range(14, 34, 2))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    raw[24:26] = (~total & 0xFFFF).to_bytes(2)
    return bytes(raw)


def tag_of(raw: bytes) -> int:
    return int.from_bytes(raw[18:20])  # IPv4 identification


def drain(tm: TrafficManager, now: int, until: int) -> tuple[list[tuple[int, bytes]], int]:
    """Run the TM's own event loop from `now` to `until`; return what left and the time."""
    out: list[tuple[int, bytes]] = []
    while True:
        out.extend(tm.next_departure(now))
        nxt = tm.next_event_ns()
        if nxt is None or nxt > until:
            return out, now
        now = max(nxt, now)


def test_cnp_is_served_before_everything_queued_earlier() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, burst_bytes=1000)
    for i in range(20):
        assert tm.enqueue(0, 1, 0, frame(tag=i), None).accepted
    for i in range(5):
        assert tm.enqueue(0, 1, 3, frame(tag=100 + i), None).accepted
    for i in range(5):
        assert tm.enqueue(0, 1, TC_CNP, frame(tag=200 + i), None).accepted
    sent, _ = drain(tm, 0, 10**12)
    tags = [tag_of(f) for _, f in sent]
    assert tags[:5] == [200, 201, 202, 203, 204]
    assert sorted(tags) == sorted([*range(20), *range(100, 105), *range(200, 205)])


def test_cnp_arriving_later_jumps_the_backlog() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, burst_bytes=1000)
    for i in range(50):
        tm.enqueue(0, 1, 3, frame(tag=i), None)
    first, now = drain(tm, 0, 40_000)  # 8 us per frame: 5 or 6 frames out
    tm.enqueue(now, 1, TC_CNP, frame(tag=999), None)
    nxt = tm.next_event_ns()
    assert nxt is not None
    (port, cnp), *_ = tm.next_departure(nxt)
    assert port == 1 and tag_of(cnp) == 999
    assert len(first) < 50


def test_drr_shares_bytes_equally_between_backlogged_classes() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1500)
    for i in range(300):
        tm.enqueue(0, 1, 0, frame(1500, tag=i), None)
        tm.enqueue(0, 1, 3, frame(500, tag=1000 + i), None)
    sent, _ = drain(tm, 0, 2 * MS)  # both classes stay backlogged for 2 ms
    by_class = {0: 0, 3: 0}
    for _, f in sent:
        by_class[0 if tag_of(f) < 1000 else 3] += len(f)
    assert by_class[0] > 0 and by_class[3] > 0
    assert abs(by_class[0] - by_class[3]) <= 2 * 9216


def test_drr_weights_split_bytes_in_proportion() -> None:
    tm = TrafficManager(seed=1, weights={3: 3})
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1500)
    for i in range(600):
        tm.enqueue(0, 1, 0, frame(1000, tag=i), None)
        tm.enqueue(0, 1, 3, frame(1000, tag=1000 + i), None)
    sent, _ = drain(tm, 0, 3 * MS)
    roce = sum(1 for _, f in sent if tag_of(f) >= 1000)
    best_effort = len(sent) - roce
    assert roce / best_effort == pytest.approx(3.0, rel=0.1)


@pytest.mark.parametrize("rate_bps", [100_000_000, GBPS, 10 * GBPS])
def test_port_rate_limits_bytes_over_time(rate_bps: int) -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=rate_bps, buffer_bytes=10**9, burst_bytes=1500)
    for _ in range(20_000):
        tm.enqueue(0, 1, 0, frame(1000), None)
    window = 10 * MS if rate_bps <= GBPS else MS
    sent, _ = drain(tm, 0, window)
    sent_bits = sum(len(f) for _, f in sent) * 8
    assert sent_bits == pytest.approx(rate_bps * window / 1e9, rel=0.01)


def test_port_without_rate_sends_everything_at_once() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1))
    for i in range(10):
        tm.enqueue(5, 1, 0, frame(tag=i), None)
    assert [tag_of(f) for _, f in tm.next_departure(5)] == list(range(10))
    assert tm.next_event_ns() is None


def test_late_wakeup_is_credited_up_to_the_burst_only() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, burst_bytes=10_000)
    for i in range(100):
        tm.enqueue(0, 1, 0, frame(1000, tag=i), None)
    tm.next_departure(0)
    # Woken 1 ms late: 10 kB of credit plus what fits in the elapsed ~0 time, not 125 kB.
    late = tm.next_departure(MS)
    assert 9 <= len(late) <= 12


def test_tail_drop_when_the_port_buffer_is_full() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10_000)
    verdicts = [tm.enqueue(0, 1, i % 2 * 3, frame(1000, tag=i), None).verdict for i in range(15)]
    assert verdicts == [Verdict.ACCEPTED] * 10 + [Verdict.TAIL_DROP] * 5
    counters = tm.port_counters(1)
    assert counters.tail_drops == 5 and counters.tail_drop_bytes == 5000
    assert sum(counters.queue_bytes) == 10_000
    # room again once frames left
    tm.next_departure(0)
    assert tm.enqueue(50_000, 1, 0, frame(1000), None).verdict is Verdict.ACCEPTED


def test_unknown_port_is_a_clear_error() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1))
    with pytest.raises(KeyError, match="egress port 7 is not in the traffic manager"):
        tm.enqueue(0, 7, 0, frame(), None)
    with pytest.raises(ValueError, match=r"traffic class must be 0\.\.7"):
        tm.configure_ecn(1, 8, 0, 1, 1)
    with pytest.raises(ValueError, match="kmin <= kmax"):
        tm.configure_ecn(1, 3, 10, 5, 1)


# --- ECN ----------------------------------------------------------------------------------

ECT0 = 0b10
ECT1 = 0b01
NOT_ECT = 0b00


def ecn_tm(kmin: int, kmax: int, pmax_ppm: int, seed: int = 7) -> TrafficManager:
    tm = TrafficManager(seed=seed)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9)
    tm.configure_ecn(1, 3, kmin, kmax, pmax_ppm)
    return tm


def test_no_marks_below_kmin() -> None:
    tm = ecn_tm(kmin=100_000, kmax=200_000, pmax_ppm=1_000_000)
    results = [tm.enqueue(0, 1, 3, frame(1000, tos=ECT0), None) for _ in range(100)]
    assert not any(r.ce_marked for r in results)  # depths 0 .. 99 kB
    assert tm.port_counters(1).ecn_marks == 0


def test_every_ect_frame_marked_above_kmax() -> None:
    tm = ecn_tm(kmin=10_000, kmax=20_000, pmax_ppm=1)  # pmax tiny: only "above kmax" marks
    for _ in range(21):
        tm.enqueue(0, 1, 3, frame(1000, tos=NOT_ECT), None)  # depth 21 kB > kmax
    results = [tm.enqueue(0, 1, 3, frame(1000, tos=tos), None) for tos in [ECT0, ECT1] * 50]
    assert all(r.ce_marked for r in results)
    assert tm.port_counters(1).ecn_marks == 100
    sent, _ = drain(tm, 0, 10**12)
    ecn_bits = [Ether(f)[IP].tos & 3 for _, f in sent]
    assert ecn_bits == [NOT_ECT] * 21 + [ecn.ECN_CE] * 100


def test_non_ect_is_never_marked() -> None:
    tm = ecn_tm(kmin=0, kmax=1, pmax_ppm=1_000_000)
    results = [tm.enqueue(0, 1, 3, frame(1000, tos=NOT_ECT), None) for _ in range(50)]
    assert not any(r.ce_marked for r in results)
    ce = frame(1000, tos=ecn.ECN_CE)
    assert not tm.enqueue(0, 1, 3, ce, None).ce_marked  # already CE: left alone


def test_other_classes_and_ports_are_not_marked() -> None:
    tm = ecn_tm(kmin=0, kmax=1, pmax_ppm=1_000_000)
    tm.add_port(2, mac=mac(2), rate_bps=GBPS)
    assert not any(tm.enqueue(0, 1, 0, frame(tos=ECT0), None).ce_marked for _ in range(20))
    assert not any(tm.enqueue(0, 2, 3, frame(tos=ECT0), None).ce_marked for _ in range(20))


def test_marking_between_kmin_and_kmax_is_linear_up_to_pmax() -> None:
    """Depth sweeps kmin..kmax evenly, so the marked fraction is pmax / 2; same seed, same
    marks."""
    pmax = 400_000  # 40 %
    n = 4000
    tm = ecn_tm(kmin=0, kmax=n * 1000, pmax_ppm=pmax, seed=3)
    marks = [tm.enqueue(0, 1, 3, frame(1000, tos=ECT0), None).ce_marked for _ in range(n)]
    fraction = sum(marks) / n
    assert fraction == pytest.approx(0.2, abs=0.02)
    # rising with depth: the deeper half is marked about three times as often
    assert sum(marks[n // 2 :]) / max(1, sum(marks[: n // 2])) == pytest.approx(3.0, rel=0.25)
    again = ecn_tm(kmin=0, kmax=n * 1000, pmax_ppm=pmax, seed=3)
    assert [again.enqueue(0, 1, 3, frame(1000, tos=ECT0), None).ce_marked for _ in range(n)] == (
        marks
    )


@pytest.mark.parametrize("depth_fraction", [0.25, 0.5, 1.0])
def test_mark_probability_at_a_fixed_depth(depth_fraction: float) -> None:
    thresholds = ecn.EcnThresholds(kmin=10_000, kmax=50_000, pmax_ppm=500_000)
    depth = 10_000 + int(40_000 * depth_fraction)
    rng = random.Random(11)
    n = 20_000
    marked = sum(ecn.should_mark(depth, thresholds, rng) for _ in range(n))
    assert marked / n == pytest.approx(0.5 * depth_fraction, abs=0.015)


@pytest.mark.parametrize("tos", [ECT0 | (26 << 2), ECT1 | (26 << 2), ECT0])
def test_ce_mark_keeps_the_ipv4_checksum_right(tos: int) -> None:
    tm = ecn_tm(kmin=0, kmax=0, pmax_ppm=0)
    tm.enqueue(0, 1, 3, frame(1000, tos=NOT_ECT), None)  # depth 1000 > kmax
    original = frame(1000, tos=tos, tag=4242)
    assert tm.enqueue(0, 1, 3, original, None).ce_marked
    sent, _ = drain(tm, 0, 10**12)
    (_, _), (_, marked) = sent
    ip = Ether(marked)[IP]
    assert ip.tos == (tos & 0xFC) | ecn.ECN_CE
    recomputed = IP(bytes(ip))
    recomputed.chksum = None
    assert ip.chksum == IP(bytes(recomputed))[IP].chksum
    assert marked[:15] == original[:15] and marked[26:] == original[26:]  # only TOS+checksum


def test_ce_mark_finds_ipv4_behind_a_vlan_tag() -> None:
    raw = bytes(Ether() / Dot1Q(vlan=10) / IP(tos=ECT0) / UDP())
    offset = ecn.ect_ipv4_offset(raw)
    assert offset == 18
    marked = Ether(ecn.mark_ce(raw, offset))
    assert marked[IP].tos & 3 == ecn.ECN_CE
    check = marked[IP].copy()
    check.chksum = None
    assert marked[IP].chksum == IP(bytes(check)).chksum


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        bytes(30),
        bytes(Ether(type=0x86DD) / bytes(40)),  # IPv6 ethertype
        bytes(Ether() / IP(tos=ECT0))[:30],  # truncated IPv4 header
    ],
)
def test_frames_without_an_ect_ipv4_header_are_not_candidates(raw: bytes) -> None:
    assert ecn.ect_ipv4_offset(raw) == -1


@settings(max_examples=300, deadline=None)
@given(
    tos=st.integers(0, 255).filter(lambda t: t & 3 in (ECT0, ECT1)),
    fields=st.tuples(
        st.integers(0, 0xFFFF),  # id
        st.integers(0, 255),  # ttl
        st.integers(0, 255),  # protocol
        st.integers(0, 2**32 - 1),  # src
        st.integers(0, 2**32 - 1),  # dst
    ),
    options=st.binary(min_size=0, max_size=40).map(lambda b: b[: len(b) // 4 * 4]),
)
def test_ce_mark_checksum_is_right_for_any_ipv4_header(
    tos: int, fields: tuple[int, int, int, int, int], options: bytes
) -> None:
    ident, ttl, proto, src, dst = fields
    ip = IP(
        tos=tos,
        id=ident,
        ttl=ttl,
        proto=proto,
        src=str(ipaddress.IPv4Address(src)),
        dst=str(ipaddress.IPv4Address(dst)),
        options=options,
    )
    raw = bytes(Ether() / ip / b"payload")
    offset = ecn.ect_ipv4_offset(raw)
    assert offset == 14
    marked = IP(ecn.mark_ce(raw, offset)[14:])
    assert marked.tos == tos | ecn.ECN_CE
    claimed = marked.chksum
    marked.chksum = None
    assert IP(bytes(marked)).chksum == claimed


# --- the integration test's ECN incast ------------------------------------------------------


def integration_ecn(arrival_gap_ns: int, frames: int) -> tuple[int, int]:
    """tests/integration/softswitch/test_qos.py's ECN port in simulated time: `frames` ECT(0)
    frames of 1400 bytes reaching the switch `arrival_gap_ns` apart; (marked, dropped)."""
    tm = TrafficManager(seed=0)
    tm.add_port(3, mac=mac(3), rate_bps=int(qos.ECN_RATE_MBPS * 1e6))
    tm.configure_ecn(3, 0, qos.ECN_KMIN, qos.ECN_KMAX, qos.ECN_PMAX)
    marked = dropped = 0
    for i in range(frames):
        now = i * arrival_gap_ns
        result = tm.enqueue(now, 3, 0, frame(1400, tos=ECT0, tag=i), None)
        marked += result.ce_marked
        dropped += not result.accepted
        tm.next_departure(now)
    return marked, dropped


def test_the_integration_ecn_burst_marks_even_on_a_slow_switch() -> None:
    """Its burst marks enough frames even if the switch forwards only 250 frames/s (a loaded
    Python switch does thousands), and drops none."""
    marked, dropped = integration_ecn(1_000_000_000 // 250, 2 * qos.ECN_FRAMES)
    assert marked > 2 * qos.ECN_MIN_MARKS
    assert dropped == 0
    assert integration_ecn(0, 2 * qos.ECN_FRAMES)[1] == 0  # all at once: still no drop


def test_the_integration_ecn_calm_frames_are_never_marked() -> None:
    gap_ns = int(qos.ECN_CALM_GAP_S * 1e9)
    assert integration_ecn(gap_ns, qos.ECN_CALM_FRAMES) == (0, 0)
    assert integration_ecn(gap_ns // 2, qos.ECN_CALM_FRAMES) == (0, 0)  # woken twice as fast
