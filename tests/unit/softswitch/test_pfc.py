"""PFC in the traffic manager: 802.1Qbb PAUSE frames (softswitch/pfc.py), pausing upstream
above xoff and resuming at xon, honouring received PAUSEs per priority, the watchdog, and a
2->1 incast kept lossless by PFC that drops without it, and the integration test's incast
(tests/integration/softswitch/test_qos.py) with the slack its numbers leave. Simulated time
only."""

from __future__ import annotations

import collections
import functools
import itertools
from dataclasses import dataclass

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from softswitch import pfc
from softswitch.tm import (
    DEFAULT_WATCHDOG,
    PauseVerdict,
    StormAction,
    TrafficManager,
    Verdict,
    WatchdogConfig,
)
from tests.integration.softswitch import test_qos as qos

pytestmark = pytest.mark.unit

GBPS = 1_000_000_000
US = 1_000
MS = 1_000_000
ROCE_TC = 3


def mac(port: int) -> bytes:
    return bytes([2, 0, 0, 0, 0x10, port])


@functools.cache
def frame(size: int = 1000, tag: int = 0) -> bytes:
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.1.1", id=tag) / UDP(dport=4791)
    raw = bytes(pkt)
    return raw + bytes(size - len(raw))


def tag_of(raw: bytes) -> int:
    return int.from_bytes(raw[18:20])


def quanta_ns(quanta: int, speed_bps: int = GBPS) -> int:
    return quanta * 512 * 1_000_000_000 // speed_bps


# --- frames ---------------------------------------------------------------------------------


def test_pause_frame_layout() -> None:
    raw = pfc.build_pause_frame(mac(1), 0b1000_1000, (0, 0, 0, 0xFFFF, 0, 0, 0, 7))
    assert len(raw) == 60
    eth = Ether(raw)
    assert eth.dst == "01:80:c2:00:00:01"
    assert eth.src == "02:00:00:00:10:01"
    assert eth.type == 0x8808
    assert raw[14:16] == b"\x01\x01"  # PFC opcode
    assert raw[16:18] == b"\x00\x88"  # class-enable vector: priorities 3 and 7
    assert raw[18:34] == bytes(6) + b"\xff\xff" + bytes(6) + b"\x00\x07"
    parsed = pfc.parse_pause_frame(raw)
    assert parsed.priorities() == [3, 7]
    assert parsed.quanta == (0, 0, 0, 0xFFFF, 0, 0, 0, 7)
    assert parsed.src_mac == mac(1)


def _with(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value) :]


GOOD = pfc.pause_for(mac(9), 3, 100)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (GOOD[:33], pfc.PauseError.TOO_SHORT),
        (_with(GOOD, 12, b"\x08\x00"), pfc.PauseError.NOT_MAC_CONTROL),
        (_with(GOOD, 0, bytes.fromhex("0180c2000002")), pfc.PauseError.WRONG_DESTINATION),
        (_with(GOOD, 14, b"\x00\x01"), pfc.PauseError.NOT_PFC),  # 802.3x PAUSE
        (_with(GOOD, 16, b"\x01\x08"), pfc.PauseError.RESERVED_BITS),
    ],
)
def test_malformed_pause_is_rejected_counted_and_ignored(
    raw: bytes, reason: pfc.PauseError
) -> None:
    with pytest.raises(pfc.MalformedPause) as err:
        pfc.parse_pause_frame(raw)
    assert err.value.reason is reason
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS)
    tm.enqueue(0, 1, ROCE_TC, frame(), None)
    assert tm.on_pause_frame(0, 1, raw) is PauseVerdict.MALFORMED
    counters = tm.port_counters(1)
    assert counters.pause_rx_malformed == 1 and counters.pause_rx == 0
    assert len(tm.next_departure(0)) == 1  # not paused


def test_build_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="6 bytes"):
        pfc.build_pause_frame(b"\x02", 1, (0,) * 8)
    with pytest.raises(ValueError, match="8 quanta"):
        pfc.build_pause_frame(mac(1), 1, (0,) * 7)


# --- received PAUSE ---------------------------------------------------------------------------


def backlogged_port() -> TrafficManager:
    """Port 1 at 1 Gb/s with 20 frames queued in TC 0 (tags 0..) and 20 in TC 3 (tags 100..)."""
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1000)
    for i in range(20):
        tm.enqueue(0, 1, 0, frame(tag=i), None)
        tm.enqueue(0, 1, ROCE_TC, frame(tag=100 + i), None)
    return tm


def run(tm: TrafficManager, start: int, until: int) -> list[tuple[int, int, bytes]]:
    """Everything `tm` sends from `start` to `until`, as (time, port, frame)."""
    out: list[tuple[int, int, bytes]] = []
    now = start
    while True:
        out.extend((now, port, f) for port, f in tm.next_departure(now))
        nxt = tm.next_event_ns()
        if nxt is None or nxt > until:
            return out
        now = max(now, nxt)


def test_pause_stops_only_the_addressed_priority_until_it_expires() -> None:
    tm = backlogged_port()
    quanta = 1000  # 512 us at 1 Gb/s
    assert tm.on_pause_frame(0, 1, pfc.pause_for(mac(9), ROCE_TC, quanta)) is PauseVerdict.APPLIED
    expiry = quanta_ns(quanta)
    sent = run(tm, 0, expiry - 1)
    assert len(sent) == 20 and all(tag_of(f) < 100 for _, _, f in sent)  # TC 0 only
    assert tm.port_counters(1).paused[ROCE_TC]
    assert tm.next_event_ns() == expiry  # TC 0 is empty: the next event is the expiry
    later = run(tm, expiry, 10**12)
    assert [tag_of(f) for _, _, f in later] == list(range(100, 120))
    assert later[0][0] == expiry
    assert tm.port_counters(1).pause_rx == 1


def test_quanta_zero_resumes_at_once_and_other_priorities_unaffected() -> None:
    tm = backlogged_port()
    tm.on_pause_frame(0, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    tm.on_pause_frame(0, 1, pfc.pause_for(mac(9), 5, 0xFFFF))  # nothing queued in TC 5
    sent = run(tm, 0, 100 * US)
    assert all(tag_of(f) < 100 for _, _, f in sent)
    tm.on_pause_frame(100 * US, 1, pfc.pause_for(mac(9), ROCE_TC, 0))
    resumed = run(tm, 100 * US, 10**12)
    roce = [(t, tag_of(f)) for t, _, f in resumed if tag_of(f) >= 100]
    assert [tag for _, tag in roce] == list(range(100, 120))
    assert roce[0][0] <= 100 * US + 10 * 8 * US  # at most one DRR visit of TC 0 first
    assert tm.port_counters(1).pause_rx == 3


def test_pause_on_another_port_does_not_stop_this_one() -> None:
    tm = backlogged_port()
    tm.add_port(2, mac=mac(2), rate_bps=GBPS)
    tm.on_pause_frame(0, 2, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    assert len(run(tm, 0, 10**12)) == 40


def test_pause_duration_follows_the_port_speed() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=10 * GBPS)
    tm.enqueue(0, 1, ROCE_TC, frame(), None)
    tm.on_pause_frame(0, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    assert tm.next_departure(0) == []
    assert tm.next_event_ns() == pfc.quanta_to_ns(0xFFFF, 10 * GBPS) == 3_355_392


# --- generated PAUSE ---------------------------------------------------------------------------


def test_xoff_pauses_upstream_refreshes_and_xon_resumes() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS)  # ingress
    tm.add_port(3, mac=mac(3), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1000)  # egress
    tm.configure_pfc(1, ROCE_TC, xoff=10_000, xon=5_000)
    results = [tm.enqueue(0, 3, ROCE_TC, frame(1000), ingress_port=1) for _ in range(30)]
    pauses = [(i, r.control) for i, r in enumerate(results) if r.control]
    assert [i for i, _ in pauses] == [10]  # the 11th frame takes occupancy above 10 kB
    ((port, raw),) = pauses[0][1]
    assert port == 1
    pause = pfc.parse_pause_frame(raw)
    assert pause.src_mac == mac(1)
    assert pause.priorities() == [ROCE_TC] and pause.quanta[ROCE_TC] == 0xFFFF
    assert tm.port_counters(1).ingress_bytes[ROCE_TC] == 30_000

    # Hold the egress queue with a PAUSE from downstream so the occupancy stays above xon.
    tm.on_pause_frame(0, 3, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    held = run(tm, 0, 20 * MS - 1)
    assert [(t, p) for t, p, _ in held] == [(quanta_ns(0xFFFF) // 2, 1)]  # refreshed in time
    assert pfc.parse_pause_frame(held[0][2]).quanta[ROCE_TC] == 0xFFFF
    tm.on_pause_frame(20 * MS, 3, pfc.pause_for(mac(9), ROCE_TC, 0))
    resumed = run(tm, 20 * MS, 10**12)
    data = [t for t, p, _ in resumed if p == 3]
    resumes = [(t, f) for t, p, f in resumed if p == 1]
    assert len(data) == 30
    assert len(resumes) == 1
    assert pfc.parse_pause_frame(resumes[0][1]).quanta[ROCE_TC] == 0
    # sent as the 25th frame left: 5 kB (xon) still queued
    assert resumes[0][0] == data[24]
    counters = tm.port_counters(1)
    assert counters.pause_tx == 3  # xoff, refresh, xon
    assert counters.ingress_bytes[ROCE_TC] == 0


def test_no_pause_without_pfc_config_or_from_unknown_ingress() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1))
    tm.add_port(3, mac=mac(3), rate_bps=GBPS, buffer_bytes=10**9)
    tm.configure_pfc(1, ROCE_TC, xoff=1000, xon=0)
    assert not any(tm.enqueue(0, 3, 0, frame(), 1).control for _ in range(10))  # TC 0
    assert not any(tm.enqueue(0, 3, ROCE_TC, frame(), 255).control for _ in range(10))  # CPU


def test_reconfiguring_pfc_during_a_pause_keeps_the_upstream_state() -> None:
    """The data plane re-applies pfc_config (clear, then configure) on every table change:
    that must neither drop the pause in force nor leave upstream paused without a resume."""
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS)
    tm.add_port(3, mac=mac(3), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1000)
    tm.configure_pfc(1, ROCE_TC, xoff=10_000, xon=5_000)
    assert any(tm.enqueue(0, 3, ROCE_TC, frame(), 1).control for _ in range(20))
    tm.clear_pfc(1, ROCE_TC)
    tm.configure_pfc(1, ROCE_TC, xoff=10_000, xon=5_000)
    assert not any(tm.enqueue(0, 3, ROCE_TC, frame(), 1).control for _ in range(5))
    tm.on_pause_frame(0, 3, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    held = run(tm, 0, 20 * MS)
    assert [p for _, p, _ in held] == [1]  # refreshed

    tm.clear_pfc(1, ROCE_TC)  # cleared while paused: no refresh, but a resume at xon
    tm.on_pause_frame(20 * MS, 3, pfc.pause_for(mac(9), ROCE_TC, 0))
    sent = run(tm, 20 * MS, 10**12)
    resumes = [f for _, p, f in sent if p == 1]
    assert len(resumes) == 1 and pfc.parse_pause_frame(resumes[0]).quanta[ROCE_TC] == 0
    assert tm.next_event_ns() is None


# --- incast ---------------------------------------------------------------------------------


def incast(pfc_on: bool, frames_per_sender: int = 600) -> tuple[int, int, int, int]:
    """Two senders at 1 Gb/s into switch ports 1 and 2, all to port 3 at 1 Gb/s (2:1).
    The senders are modelled by an upstream TrafficManager whose ports 1 and 2 obey the
    PAUSE frames the switch sends back. Returns (delivered, dropped, pauses sent, order
    violations within each sender's flow)."""
    upstream = TrafficManager(seed=1)
    switch = TrafficManager(seed=2)
    for port in (1, 2):
        upstream.add_port(port, mac=mac(0x20 + port), rate_bps=GBPS, buffer_bytes=10**9)
        switch.add_port(port, mac=mac(port), rate_bps=GBPS)
        if pfc_on:
            switch.configure_pfc(port, ROCE_TC, xoff=40_000, xon=20_000)
    switch.add_port(3, mac=mac(3), rate_bps=GBPS, buffer_bytes=100_000)
    for i in range(frames_per_sender):
        upstream.enqueue(0, 1, ROCE_TC, frame(1000, tag=i), None)
        upstream.enqueue(0, 2, ROCE_TC, frame(1000, tag=10_000 + i), None)

    delivered: list[int] = []
    dropped = 0
    now = 0
    while True:
        for port, raw in upstream.next_departure(now):
            result = switch.enqueue(now, 3, ROCE_TC, raw, ingress_port=port)
            dropped += result.verdict is not Verdict.ACCEPTED
            for pause_port, pause in result.control:
                assert upstream.on_pause_frame(now, pause_port, pause) is PauseVerdict.APPLIED
        for port, raw in switch.next_departure(now):
            if port == 3:
                delivered.append(tag_of(raw))
            else:
                assert upstream.on_pause_frame(now, port, raw) is PauseVerdict.APPLIED
        times = [t for t in (upstream.next_event_ns(), switch.next_event_ns()) if t is not None]
        if not times:
            break
        now = max(now, min(times))
    pauses = switch.port_counters(1).pause_tx + switch.port_counters(2).pause_tx
    flows = ([t for t in delivered if t < 10_000], [t for t in delivered if t >= 10_000])
    reordered = sum(1 for flow in flows for a, b in itertools.pairwise(flow) if b < a)
    assert dropped == switch.port_counters(3).tail_drops
    return len(delivered), dropped, pauses, reordered


def test_pfc_keeps_a_2_to_1_incast_lossless() -> None:
    delivered, dropped, pauses, reordered = incast(pfc_on=True)
    assert dropped == 0
    assert delivered == 1200
    assert pauses >= 4  # each sender paused and resumed at least once
    assert reordered == 0


def test_the_same_incast_without_pfc_drops() -> None:
    delivered, dropped, pauses, _ = incast(pfc_on=False)
    assert dropped > 0
    assert pauses == 0
    assert delivered + dropped == 1200


@dataclass
class PacedIncast:
    delivered: int
    dropped: int  # by the congested switch
    upstream_dropped: int  # by the senders' switches (a watchdog storm drops what they hold)
    storms: int
    longest_pause_ns: int  # at the senders' switches


def paced_incast(
    *,
    pfc_on: bool,
    sender_bps: int,
    lag_ns: int = 0,
    stall: tuple[int, int] | None = None,
    upstream_watchdog: WatchdogConfig = DEFAULT_WATCHDOG,
) -> PacedIncast:
    """tests/integration/softswitch/test_qos.py's incast in simulated time, with the default
    watchdog: each sender's switch (one upstream TM, ports 1 and 2 at `sender_bps`) holds its
    burst of jumbo frames and paces it into the congested switch C, whose port 3 runs at
    CONGESTED_RATE_MBPS. `lag_ns`: C reads each frame that long after it was sent (a switch
    behind its senders), so its PAUSE leaves that much later. `stall` (start, duration): C is
    not scheduled for that long (a starved process): it neither reads, sends nor PAUSEs, and
    what arrives waits."""
    upstream = TrafficManager(seed=1, watchdog=upstream_watchdog)
    switch = TrafficManager(seed=2)
    congested = int(qos.CONGESTED_RATE_MBPS * 1e6)
    for port in (1, 2):
        upstream.add_port(port, mac=mac(0x20 + port), rate_bps=sender_bps)
        switch.add_port(port, mac=mac(port), rate_bps=congested)
        if pfc_on:
            switch.configure_pfc(port, ROCE_TC, xoff=qos.XOFF, xon=qos.XON)
    switch.add_port(3, mac=mac(3), rate_bps=congested)
    for i in range(qos.PFC_FRAMES):
        for port in (1, 2):
            raw = frame(qos.PFC_FRAME, tag=port * 1000 + i)
            assert upstream.enqueue(0, port, ROCE_TC, raw, None).accepted
    in_flight: collections.deque[tuple[int, int, bytes]] = collections.deque()
    paused_at: dict[int, int] = {}
    longest = delivered = dropped = 0
    now = 0

    def pause(port: int, raw: bytes) -> None:
        nonlocal longest
        assert upstream.on_pause_frame(now, port, raw) is PauseVerdict.APPLIED
        if pfc.parse_pause_frame(raw).quanta[ROCE_TC]:
            paused_at.setdefault(port, now)
        elif port in paused_at:
            longest = max(longest, now - paused_at.pop(port))

    while True:
        stalled = stall is not None and stall[0] <= now < stall[0] + stall[1]
        while in_flight and in_flight[0][0] <= now and not stalled:
            _, port, raw = in_flight.popleft()
            result = switch.enqueue(now, 3, ROCE_TC, raw, ingress_port=port)
            dropped += not result.accepted
            for pause_port, pause_frame in result.control:
                pause(pause_port, pause_frame)
        for port, raw in upstream.next_departure(now):
            in_flight.append((now + lag_ns, port, raw))
        for port, raw in [] if stalled else switch.next_departure(now):
            if port == 3:
                delivered += 1
            else:
                pause(port, raw)
        at_c = [t for t in (switch.next_event_ns(),) if t is not None]
        if in_flight:
            at_c.append(in_flight[0][0])
        if stall is not None and stalled:
            at_c = [max(t, stall[0] + stall[1]) for t in at_c]
        times = at_c + [t for t in (upstream.next_event_ns(),) if t is not None]
        if not times:
            break
        now = max(now, min(times))
    for started in paused_at.values():
        longest = max(longest, now - started)
    counters = [upstream.port_counters(port) for port in (1, 2)]
    return PacedIncast(
        delivered,
        dropped,
        sum(c.storm_drops + c.tail_drops for c in counters),
        sum(c.storms for c in counters),
        longest,
    )


SENDER_BPS = int(qos.SENDER_RATE_MBPS * 1e6)
BURST = 2 * qos.PFC_FRAMES


@pytest.mark.parametrize("share", [1.0, 0.5])  # it stops dropping at ~40 %
def test_the_integration_incast_drops_without_pfc_even_at_half_the_sender_rate(
    share: float,
) -> None:
    """The integration test's congestion is arithmetic: it drops even if the senders'
    switches reach only half their rate."""
    r = paced_incast(pfc_on=False, sender_bps=int(SENDER_BPS * share))
    assert r.dropped > 0
    assert r.delivered + r.dropped == BURST
    assert r.upstream_dropped == 0


@pytest.mark.parametrize("lag_ms", [0, 20])
def test_the_integration_incast_with_pfc_stays_lossless_with_a_lagging_switch(
    lag_ms: int,
) -> None:
    """With PFC, pauses end far within the 200 ms watchdog and the buffer holds the
    overshoot, even with the congested switch 20 ms behind its senders."""
    r = paced_incast(pfc_on=True, sender_bps=SENDER_BPS, lag_ns=lag_ms * MS)
    assert (r.delivered, r.dropped, r.upstream_dropped, r.storms) == (BURST, 0, 0, 0)
    assert 0 < r.longest_pause_ns < DEFAULT_WATCHDOG.detect_ns
    if lag_ms == 0:
        assert r.longest_pause_ns < DEFAULT_WATCHDOG.detect_ns // 4  # ~33 ms


STALL = (MS, 400 * MS)  # from before the first PAUSE; a busy 2-core machine stalls that long


def test_a_stalled_congested_switch_keeps_what_arrived_meanwhile_in_headroom() -> None:
    """C is not scheduled for 400 ms while the senders keep sending (its PAUSE is late): the
    lossless frames that arrived meanwhile exceed the egress buffer, and are admitted at
    ingress against xoff + headroom, so nothing is tail-dropped. (With a watchdog slower than
    the stall, as the lab configures it.)"""
    slow_watchdog = WatchdogConfig(detect_ns=1000 * MS)
    r = paced_incast(
        pfc_on=True, sender_bps=SENDER_BPS, stall=STALL, upstream_watchdog=slow_watchdog
    )
    assert (r.delivered, r.dropped, r.upstream_dropped, r.storms) == (BURST, 0, 0, 0)
    # Without PFC the same frames meet the egress buffer and overflow it.
    without = paced_incast(pfc_on=False, sender_bps=SENDER_BPS, stall=STALL)
    assert without.dropped > 0 and without.delivered + without.dropped == BURST


def test_a_stall_longer_than_the_watchdog_is_a_storm_at_the_paused_upstream() -> None:
    """A stall that starts while C pauses its upstream, with SONiC's 200 ms watchdog: the
    upstream, paused by a switch that stopped answering, declares a storm and drops what it
    holds. That is the watchdog doing its job, and why the lab, whose switches share 2 cores,
    sets a longer detection time."""
    r = paced_incast(pfc_on=True, sender_bps=SENDER_BPS, stall=(20 * MS, 400 * MS))
    assert r.storms >= 1 and r.upstream_dropped > 0
    assert r.dropped == 0


def test_lossless_frames_beyond_xoff_plus_headroom_are_headroom_drops_at_ingress() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, headroom_bytes=3000)
    tm.add_port(2, mac=mac(2), rate_bps=GBPS, buffer_bytes=1000)
    tm.configure_pfc(1, ROCE_TC, xoff=2000, xon=1000)
    verdicts = [tm.enqueue(0, 2, ROCE_TC, frame(1000), 1).verdict for _ in range(7)]
    # xoff + headroom = 5 frames from port 1, far past port 2's 1,000-byte buffer.
    assert verdicts == [Verdict.ACCEPTED] * 5 + [Verdict.HEADROOM_DROP] * 2
    ingress, egress = tm.port_counters(1), tm.port_counters(2)
    assert (ingress.headroom_drops, ingress.headroom_drop_bytes) == (2, 2000)
    assert egress.tail_drops == 0 and egress.queue_bytes[ROCE_TC] == 5000
    # Headroom is a pool of its own: best effort still finds port 2's buffer (2,000 bytes of
    # lossless frames within xoff fill it: one more best-effort frame does not fit).
    tm.set_buffer_limit(2, 3000)
    assert tm.enqueue(0, 2, 0, frame(1000), None).verdict is Verdict.ACCEPTED
    assert tm.enqueue(0, 2, 0, frame(1000), None).verdict is Verdict.TAIL_DROP
    # Draining the headroom frames gives their pool back, and the resume goes out at xon.
    sent = [port for port, _ in tm.next_departure(10**9)]
    assert sent.count(2) == 6 and tm.port_counters(1).ingress_bytes[ROCE_TC] == 0
    verdicts = [tm.enqueue(10**9, 2, 0, frame(1000), None).verdict for _ in range(4)]
    assert verdicts == [Verdict.ACCEPTED] * 3 + [Verdict.TAIL_DROP]  # all 3,000 bytes free


# --- watchdog ---------------------------------------------------------------------------------


def storm(action: StormAction) -> tuple[TrafficManager, list[tuple[int, int, bytes]]]:
    """A peer that keeps PAUSEing TC 3 on port 1 every ms for 30 ms, with detect 10 ms and
    restore 20 ms; returns the TM and everything it sent meanwhile."""
    tm = TrafficManager(
        seed=1, watchdog=WatchdogConfig(detect_ns=10 * MS, restore_ns=20 * MS, action=action)
    )
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1000)
    for i in range(20):
        tm.enqueue(0, 1, ROCE_TC, frame(tag=100 + i), None)
    sent: list[tuple[int, int, bytes]] = []
    verdicts = []
    for ms in range(30):
        verdicts.append(tm.on_pause_frame(ms * MS, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF)))
        sent.extend(run(tm, ms * MS, (ms + 1) * MS - 1))
    assert verdicts[:10] == [PauseVerdict.APPLIED] * 10
    assert verdicts[11:] == [PauseVerdict.IGNORED_STORM] * 19
    return tm, sent


def test_watchdog_breaks_a_storm_and_drains_the_queue() -> None:
    tm, sent = storm(StormAction.DRAIN)
    assert len(sent) == 20
    assert min(t for t, _, _ in sent) == 10 * MS  # sent once the storm is declared
    counters = tm.port_counters(1)
    assert counters.storms == 1 and counters.stormed[ROCE_TC]
    assert counters.pause_rx == 30
    # while stormed, new frames are sent despite PAUSEs
    tm.enqueue(30 * MS, 1, ROCE_TC, frame(tag=7), None)
    assert [tag_of(f) for _, f in tm.next_departure(30 * MS)] == [7]


def test_watchdog_drop_action_drops_queued_and_arriving_frames() -> None:
    tm, sent = storm(StormAction.DROP)
    assert sent == []
    assert tm.enqueue(30 * MS, 1, ROCE_TC, frame(), None).verdict is Verdict.STORM_DROP
    counters = tm.port_counters(1)
    assert counters.storms == 1
    assert counters.storm_drops == 21
    assert counters.queue_bytes[ROCE_TC] == 0


def test_a_new_watchdog_timing_judges_the_pause_in_progress() -> None:
    tm = TrafficManager(seed=1)
    tm.add_port(1, mac=mac(1), rate_bps=GBPS)
    tm.enqueue(0, 1, ROCE_TC, frame(), None)
    tm.on_pause_frame(0, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))  # ~33 ms at 1 Gb/s
    tm.set_watchdog(WatchdogConfig(detect_ns=10 * MS, restore_ns=20 * MS))
    tm.on_pause_frame(9 * MS, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF))
    assert tm.next_departure(9 * MS) == [] and not tm.port_counters(1).stormed[ROCE_TC]
    tm.next_departure(10 * MS)  # paused 10 ms with a frame held: a storm at the new detect
    assert tm.port_counters(1).storms == 1


def test_storm_ends_after_restore_time_without_pause() -> None:
    tm, _ = storm(StormAction.DRAIN)
    # Last PAUSE at 29 ms; at 49 ms the storm is over and PAUSEs are honoured again.
    assert tm.on_pause_frame(40 * MS, 1, pfc.pause_for(mac(9), ROCE_TC, 0)) is (
        PauseVerdict.IGNORED_STORM
    )
    assert tm.on_pause_frame(49 * MS, 1, pfc.pause_for(mac(9), ROCE_TC, 0xFFFF)) is (
        PauseVerdict.APPLIED
    )
    tm.enqueue(49 * MS, 1, ROCE_TC, frame(), None)
    assert tm.next_departure(49 * MS) == []
    assert not tm.port_counters(1).stormed[ROCE_TC]
    assert tm.port_counters(1).storms == 1


def test_normal_pfc_is_not_a_storm() -> None:
    """Pauses that keep stopping the queue but let it send in between never reach detect."""
    tm = TrafficManager(seed=1, watchdog=WatchdogConfig(detect_ns=2 * MS, restore_ns=MS))
    tm.add_port(1, mac=mac(1), rate_bps=GBPS, buffer_bytes=10**9, burst_bytes=1000)
    for i in range(400):
        tm.enqueue(0, 1, ROCE_TC, frame(tag=i), None)
    sent = 0
    for ms in range(0, 20, 2):  # paused 1.5 ms of every 2 ms
        tm.on_pause_frame(ms * MS, 1, pfc.pause_for(mac(9), ROCE_TC, 2929))  # ~1.5 ms
        sent += len(run(tm, ms * MS, (ms + 2) * MS - 1))
    assert tm.port_counters(1).storms == 0
    assert sent == 400
