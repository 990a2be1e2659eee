"""softswitch's traffic manager on real veths: ECN CE marks under a 2->1 incast into a
rate-limited port (and none without congestion), and PFC keeping a 2->1 incast lossless across
three softswitches where the same incast without PFC drops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import finsy as fy
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.conftest import Netns, Processes
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


async def send_burst(hosts: list[Host], count: int, tos: int) -> None:
    """Each host sends `count` frames back to back (interleaved in chunks)."""
    frames = {h.port: [frame(h.port, i, tos=tos) for i in range(count)] for h in hosts}
    for start in range(0, count, 25):
        for h in hosts:
            for f in frames[h.port][start : start + 25]:
                h.send(f)
        await asyncio.sleep(0)


async def test_ecn_marks_under_incast_and_not_without_congestion(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    switch_ifs, hosts = build_hosts(netns, [1, 2, 3])
    try:
        address = await start_softswitch(
            processes, free_port(), switch_ifs, "--port-rate-mbps", "50"
        )
        async with controller(address) as sw:
            await route_to(sw, 3)
            await add_ecn_marking_entry(sw, 3, 0, kmin=15_000, kmax=60_000, pmax=1_000_000)
            ect0 = 0x02
            # No congestion: frames spaced far apart never find a queue.
            for i in range(15):
                hosts[1].send(frame(1, i, tos=ect0))
                await asyncio.sleep(0.01)
            calm = await asyncio.to_thread(hosts[3].capture, 0.5, ours)
            assert len(calm) == 15
            assert all(Ether(f)[IP].tos & 3 == ect0 for f in calm)
            # 2 -> 1 incast: the port-3 queue grows far past kmax.
            capture = asyncio.create_task(asyncio.to_thread(hosts[3].capture, 5.0, ours, 0.5))
            await send_burst([hosts[1], hosts[2]], 120, ect0)
            burst = await capture
            ecn_bits = [Ether(f)[IP].tos & 3 for f in burst]
            assert len(burst) == 240
            assert ecn_bits.count(3) > 50, ecn_bits
            marks, _ = await read_counter(sw, "FabricEgress.ecn_mark_counter", 3)
            assert marks == ecn_bits.count(3)
    finally:
        for host in hosts.values():
            host.close()


async def _pfc_incast(
    netns: Netns, processes: Processes, free_port: Callable[[], int], *, pfc: bool
) -> tuple[int, int, int]:
    """h1 -> A -> C -> h3 and h2 -> B -> C -> h3. A and B send at 100 Mb/s, C's ports at
    50 Mb/s: C's port 3 queue grows at 150 Mb/s during the burst. A and B pace their output
    (as a link would), so a PAUSE from C reaches them while they still hold most of the burst.
    Returns (frames received at h3, C's drops on port 3, PAUSE frames C sent)."""
    hosts_ifs, hosts = build_hosts(netns, [1, 2, 3])
    tag = netns.tag
    a_up, c_from_a, b_up, c_from_b = f"a{tag}u", f"c{tag}a", f"b{tag}u", f"c{tag}b"
    netns.veth(a_up, None, c_from_a, None)
    netns.veth(b_up, None, c_from_b, None)
    try:
        rate = ("--port-rate-mbps", "100")
        a = await start_softswitch(processes, free_port(), {1: hosts_ifs[1], 2: a_up}, *rate)
        b = await start_softswitch(processes, free_port(), {1: hosts_ifs[2], 2: b_up}, *rate)
        c = await start_softswitch(
            processes,
            free_port(),
            {1: c_from_a, 2: c_from_b, 3: hosts_ifs[3]},
            "--port-rate-mbps",
            "50",
        )
        async with controller(a) as sw_a, controller(b) as sw_b, controller(c) as sw_c:
            for sw, port in ((sw_a, 2), (sw_b, 2), (sw_c, 3)):
                await route_to(sw, port)
                await add_qos_classify_entry(sw, ROCE_DSCP, ROCE_TC)
            if pfc:
                for ingress in (1, 2):
                    await add_pfc_config_entry(sw_c, ingress, ROCE_TC, xoff=40_000, xon=20_000)
            capture = asyncio.create_task(asyncio.to_thread(hosts[3].capture, 6.0, ours, 0.5))
            await send_burst([hosts[1], hosts[2]], 300, ROCE_DSCP << 2)
            received = len(await capture)
            drops, _ = await read_counter(sw_c, "FabricIngress.drop_counter", 3)
            pauses = 0
            for port in (1, 2):
                pauses += (await read_counter(sw_c, "FabricEgress.pfc_pause_tx_counter", port))[0]
            if pfc:
                paused, _ = await read_counter(sw_a, "FabricEgress.pfc_pause_rx_counter", 2)
                assert paused > 0
        return received, drops, pauses
    finally:
        for host in hosts.values():
            host.close()


async def test_incast_drops_without_pfc(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    received, drops, pauses = await _pfc_incast(netns, processes, free_port, pfc=False)
    assert drops > 0
    assert received + drops == 600
    assert pauses == 0


async def test_pfc_keeps_incast_lossless(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    received, drops, pauses = await _pfc_incast(netns, processes, free_port, pfc=True)
    assert pauses > 0
    assert drops == 0
    assert received == 600
