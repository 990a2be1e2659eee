"""softswitch's traffic manager on real veths: ECN CE marks under a 2->1 incast into a
rate-limited port (and none without congestion), and PFC keeping a 2->1 incast lossless across
three softswitches where the same incast without PFC drops.

Congestion here is arithmetic, not a race against the scheduler: the congested port runs at a
rate far below what a Python switch forwards on a loaded core (a few hundred frames/s), and
every burst holds more bytes than the port's buffer plus what the port can send while the
burst arrives, even if the senders reach only a fraction of their rate. Each number below
says how much slack it leaves. Waits are for outcomes (every frame accounted for), with a
deadline of WAIT_S that only a broken switch reaches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import finsy as fy
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import fabric_p4 as p4
from softswitch.tm import DEFAULT_BUFFER_BYTES
from tests.conftest import Netns, Processes, ip
from tests.integration.softswitch.fabric_helpers import (
    ROUTER_MAC,
    Host,
    add_ecn_marking_entry,
    add_member,
    add_next_entry,
    add_pfc_config_entry,
    add_qos_classify_entry,
    add_routing_v4_entry,
    build_hosts,
    controller,
    host_mac,
    read_counter,
    start_softswitch,
)

pytestmark = pytest.mark.integration

MARK = b"railfabric-qos-test"
DST = "10.3.0.3"
ROCE_DSCP = 26
ROCE_TC = 3
WAIT_S = 30.0  # for frames to arrive: an outcome bound, not a figure

# ECN: at 2 Mb/s the port sends ~180 frames/s of 1400 bytes. The 240-frame burst (336 kB,
# within the 512 kB buffer: nothing is dropped) marks far more than 50 frames as long as the
# switch forwards more than ~250 frames/s; calm frames 10 ms apart (each sent in 5.6 ms) never
# find a queue, kmin being ten frames deep. tests/unit/softswitch/test_tm.py replays both.
ECN_RATE_MBPS = 2
ECN_FRAMES = 120  # per sender
ECN_CALM_FRAMES, ECN_CALM_GAP_S = 15, 0.01
ECN_KMIN, ECN_KMAX, ECN_PMAX = 15_000, 60_000, 1_000_000
ECN_MIN_MARKS = 50

# PFC: jumbo frames, so the congested port (C's) sends ~140 frames/s and the senders' switches
# (A and B) ~350 frames/s each. Each sender's burst fits its own switch's buffer.
JUMBO_MTU = 9000
PFC_FRAME = 9000
PFC_FRAMES = 56  # per sender: 504 kB
SENDER_RATE_MBPS = 25
CONGESTED_RATE_MBPS = 10
XOFF, XON = 20_000, 10_000
# Without PFC, C's buffer plus what C sends while the burst arrives is short of the burst as
# long as A and B reach ~40 % of their rate: it drops (~30 frames at full rate). With PFC, a
# pause lasts ~33 ms, far from the watchdog's 200 ms, and stays lossless with C up to ~35 ms
# behind its senders. tests/unit/softswitch/test_pfc.py replays this in simulated time.
_ARRIVAL_AT_HALF_RATE_S = PFC_FRAMES * PFC_FRAME * 8 / (SENDER_RATE_MBPS / 2 * 1e6)
assert PFC_FRAMES * PFC_FRAME < DEFAULT_BUFFER_BYTES
assert 2 * PFC_FRAMES * PFC_FRAME > (
    DEFAULT_BUFFER_BYTES + CONGESTED_RATE_MBPS * 1e6 / 8 * _ARRIVAL_AT_HALF_RATE_S
)


def frame(src_port: int, seq: int, *, tos: int, size: int = 1400) -> bytes:
    pkt = (
        Ether(dst=ROUTER_MAC, src=host_mac(src_port))
        / IP(src=f"10.{src_port}.0.1", dst=DST, tos=tos)
        / UDP(sport=10000 + seq, dport=4791)
    )
    return bytes(pkt / (MARK + bytes(size - len(pkt) - len(MARK))))


def ours(data: bytes) -> bool:
    return MARK in data


async def route_to(sw: fy.Switch, port: int) -> None:
    await add_member(sw, port, port)
    await add_next_entry(sw, port, member_id=port)
    await add_routing_v4_entry(sw, "10.3.0.0/16", port)


async def send_burst(hosts: list[Host], count: int, tos: int, size: int = 1400) -> None:
    """Each host sends `count` frames back to back (interleaved in chunks)."""
    frames = {h.port: [frame(h.port, i, tos=tos, size=size) for i in range(count)] for h in hosts}
    for start in range(0, count, 25):
        for h in hosts:
            for f in frames[h.port][start : start + 25]:
                h.send(f)
        await asyncio.sleep(0)


async def capture_until(
    host: Host, done: Callable[[int], Awaitable[bool]], timeout_s: float = WAIT_S
) -> list[bytes]:
    """Our frames arriving at `host` until `done(frames so far)` or `timeout_s` (frames wait
    in the socket between polls)."""
    frames: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while not await done(len(frames)) and (left := deadline - time.monotonic()) > 0:
        frames += await asyncio.to_thread(host.capture, min(0.2, left), ours)
    return frames


def count_reached(n: int) -> Callable[[int], Awaitable[bool]]:
    async def done(got: int) -> bool:
        return got >= n

    return done


def jumbo_links(links: list[tuple[str, str | None]], *, ipv6: bool = True) -> None:
    """MTU JUMBO_MTU on each (interface, namespace); `ipv6=False` also silences IPv6 on the
    root-namespace links between switches (no router solicitations or MLD reports)."""
    for ifname, ns in links:
        ip("link", "set", ifname, "mtu", str(JUMBO_MTU), netns=ns)
        if not ipv6 and ns is None:
            Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")


async def test_ecn_marks_under_incast_and_not_without_congestion(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    switch_ifs, hosts = build_hosts(netns, [1, 2, 3])
    try:
        address = await start_softswitch(
            processes, free_port(), switch_ifs, "--port-rate-mbps", str(ECN_RATE_MBPS)
        )
        async with controller(address) as sw:
            await route_to(sw, 3)
            await add_ecn_marking_entry(sw, 3, 0, kmin=ECN_KMIN, kmax=ECN_KMAX, pmax=ECN_PMAX)
            ect0 = 0x02
            # No congestion: frames far apart never find a queue.
            for i in range(ECN_CALM_FRAMES):
                hosts[1].send(frame(1, i, tos=ect0))
                await asyncio.sleep(ECN_CALM_GAP_S)
            calm = await capture_until(hosts[3], count_reached(ECN_CALM_FRAMES))
            assert len(calm) == ECN_CALM_FRAMES
            assert all(Ether(f)[IP].tos & 3 == ect0 for f in calm)
            # 2 -> 1 incast: the port-3 queue grows far past kmax.
            await send_burst([hosts[1], hosts[2]], ECN_FRAMES, ect0)
            burst = await capture_until(hosts[3], count_reached(2 * ECN_FRAMES))
            ecn_bits = [Ether(f)[IP].tos & 3 for f in burst]
            assert len(burst) == 2 * ECN_FRAMES
            assert ecn_bits.count(3) > ECN_MIN_MARKS, ecn_bits
            marks, _ = await read_counter(sw, p4.ECN_MARK_COUNTER, 3)
            assert marks == ecn_bits.count(3)
    finally:
        for host in hosts.values():
            host.close()


async def _pfc_incast(
    netns: Netns, processes: Processes, free_port: Callable[[], int], *, pfc: bool
) -> tuple[int, int, int]:
    """h1 -> A -> C -> h3 and h2 -> B -> C -> h3, jumbo frames. A and B send at
    SENDER_RATE_MBPS, C's ports run at CONGESTED_RATE_MBPS: C's port 3 queue grows at 4x its
    rate during the burst. A and B pace their output (as a link would), so a PAUSE from C
    reaches them while they still hold most of the burst. Returns (frames received at h3,
    C's drops on port 3, PAUSE frames C sent); every frame is accounted for before it returns."""
    hosts_ifs, hosts = build_hosts(netns, [1, 2, 3])
    tag = netns.tag
    a_up, c_from_a, b_up, c_from_b = f"a{tag}u", f"c{tag}a", f"b{tag}u", f"c{tag}b"
    netns.veth(a_up, None, c_from_a, None)
    netns.veth(b_up, None, c_from_b, None)
    jumbo_links([(n, None) for n in (a_up, c_from_a, b_up, c_from_b)], ipv6=False)
    jumbo_links([(n, None) for n in hosts_ifs.values()])
    jumbo_links([(h.ifname, h.ns) for h in hosts.values()])
    total = 2 * PFC_FRAMES
    try:
        rate = ("--port-rate-mbps", str(SENDER_RATE_MBPS))
        a = await start_softswitch(processes, free_port(), {1: hosts_ifs[1], 2: a_up}, *rate)
        b = await start_softswitch(processes, free_port(), {1: hosts_ifs[2], 2: b_up}, *rate)
        c = await start_softswitch(
            processes,
            free_port(),
            {1: c_from_a, 2: c_from_b, 3: hosts_ifs[3]},
            "--port-rate-mbps",
            str(CONGESTED_RATE_MBPS),
        )
        async with controller(a) as sw_a, controller(b) as sw_b, controller(c) as sw_c:
            for sw, port in ((sw_a, 2), (sw_b, 2), (sw_c, 3)):
                await route_to(sw, port)
                await add_qos_classify_entry(sw, ROCE_DSCP, ROCE_TC)
            if pfc:
                for ingress in (1, 2):
                    await add_pfc_config_entry(sw_c, ingress, ROCE_TC, xoff=XOFF, xon=XON)

            async def accounted(got: int) -> bool:
                # Without PFC, what C dropped never arrives.
                return got + (0 if pfc else (await c_drops())) >= total

            async def c_drops() -> int:
                return (await read_counter(sw_c, p4.DROP_COUNTER, 3))[0]

            await send_burst([hosts[1], hosts[2]], PFC_FRAMES, ROCE_DSCP << 2, size=PFC_FRAME)
            received = len(await capture_until(hosts[3], accounted))
            drops = await c_drops()
            pauses = 0
            for port in (1, 2):
                pauses += (await read_counter(sw_c, p4.PFC_PAUSE_TX_COUNTER, port))[0]
            # No pause lasted long enough for the senders' PFC watchdog to call it a storm
            # (and drop what they hold).
            for sw in (sw_a, sw_b):
                assert (await read_counter(sw, p4.PFC_STORM_COUNTER, 2))[0] == 0
            if pfc:
                paused, _ = await read_counter(sw_a, p4.PFC_PAUSE_RX_COUNTER, 2)
                assert paused > 0
        return received, drops, pauses
    finally:
        for host in hosts.values():
            host.close()


async def test_incast_drops_without_pfc(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    received, drops, pauses = await _pfc_incast(netns, processes, free_port, pfc=False)
    assert drops > 0, (received, drops)
    assert received + drops == 2 * PFC_FRAMES
    assert pauses == 0


async def test_pfc_keeps_incast_lossless(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    received, drops, pauses = await _pfc_incast(netns, processes, free_port, pfc=True)
    assert pauses > 0
    assert drops == 0
    assert received == 2 * PFC_FRAMES
