"""softswitch forwarding real frames between veths in network namespaces, programmed over
P4Runtime by finsy: LPM routing and TTL, ECMP spreading and the exact member the shared hash
predicts, watch_port failover on carrier loss, LLDP punted with its ingress port, packet-out,
malformed frames. Every test removes its entries (controller()) and its namespaces/process."""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import finsy as fy
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.path import probe_flow
from railfabric import ecmp, latency
from railfabric import fabric_p4 as p4
from tests.conftest import Netns, Processes, ip
from tests.integration.softswitch.fabric_helpers import (
    ROUTER_MAC,
    Fabric,
    add_acl_entry,
    add_group,
    add_member,
    add_next_entry,
    add_routing_v4_entry,
    build_hosts,
    check_nak_sampling,
    check_probe_answers,
    check_probe_punts,
    check_qp_hashing,
    controller,
    host_mac,
    read_counter,
    start_softswitch,
)

pytestmark = pytest.mark.integration

MARK = b"railfabric-softswitch-test"
SRC = "10.0.1.1"


@pytest.fixture
async def fabric(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> AsyncIterator[Fabric]:
    switch_ifs, hosts = build_hosts(netns, [1, 2, 3, 4])
    try:
        address = await start_softswitch(processes, free_port(), switch_ifs)
        yield Fabric(address, hosts, switch_ifs)
    finally:
        for host in hosts.values():
            host.close()


def udp_frame(dst: str, sport: int, dport: int = ecmp.ROCEV2_UDP_PORT, ttl: int = 64) -> bytes:
    return bytes(
        Ether(dst=ROUTER_MAC, src=host_mac(1))
        / IP(src=SRC, dst=dst, ttl=ttl)
        / UDP(sport=sport, dport=dport)
        / (bytes(12) + MARK)
    )


def ours(frame: bytes) -> bool:
    return MARK in frame


def sport_of(frame: bytes) -> int:
    return int(Ether(frame)[UDP].sport)


async def capture(fab: Fabric, port: int, seconds: float = 1.0) -> list[bytes]:
    return await asyncio.to_thread(fab.hosts[port].capture, seconds, ours)


async def test_lpm_routing_and_ttl(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await add_member(sw, 2, 2)
        await add_member(sw, 3, 3)
        await add_next_entry(sw, 20, member_id=2)
        await add_next_entry(sw, 30, member_id=3)
        await add_routing_v4_entry(sw, "10.0.2.0/24", 20)
        await add_routing_v4_entry(sw, "10.0.0.0/8", 30)
        h1 = fabric.hosts[1]
        h1.send(udp_frame("10.0.2.5", 1000))  # /24 beats /8
        h1.send(udp_frame("10.9.9.9", 1001))  # only /8
        h1.send(udp_frame("10.0.2.6", 1002, ttl=1))  # TTL expires
        h1.send(udp_frame("192.0.2.1", 1003))  # no route
        on2, on3 = await asyncio.gather(capture(fabric, 2), capture(fabric, 3))
        assert [sport_of(f) for f in on2] == [1000]
        assert [sport_of(f) for f in on3] == [1001]
        pkt = Ether(on2[0])
        assert (pkt.src, pkt.dst) == (ROUTER_MAC, host_mac(2))
        assert pkt[IP].ttl == 63
        checksum = pkt[IP].chksum
        del pkt[IP].chksum
        assert Ether(bytes(pkt))[IP].chksum == checksum
        drops, _ = await read_counter(sw, p4.DROP_COUNTER, 1)
        assert drops >= 2
        received, _ = await read_counter(sw, p4.INGRESS_PORT_COUNTER, 1)
        assert received >= 4


async def _ecmp_group(sw: fy.Switch) -> dict[int, int]:
    members = {102: 2, 103: 3, 104: 4}  # member id -> port, created in ascending port order
    for member_id, port in members.items():
        await add_member(sw, member_id, port)
    await add_group(sw, 1, {104: 4, 102: 2, 103: 3})  # listed in another order on purpose
    await add_next_entry(sw, 100, group_id=1)
    await add_routing_v4_entry(sw, "10.2.0.0/16", 100)
    return members


def predicted_port(dst: str, sport: int, live_ports: list[int]) -> int:
    h = ecmp.flow_hash(
        int(ipaddress.IPv4Address(SRC)),
        int(ipaddress.IPv4Address(dst)),
        17,
        sport,
        ecmp.ROCEV2_UDP_PORT,
    )
    return ecmp.choose_member(h, live_ports)


async def _send_flows(fab: Fabric, sports: range) -> dict[int, set[int]]:
    """Send one frame per source port; which sports arrived on which port."""
    for sport in sports:
        fab.hosts[1].send(udp_frame("10.2.0.9", sport))
    results = await asyncio.gather(*(capture(fab, p, 1.5) for p in (2, 3, 4)))
    return {p: {sport_of(f) for f in frames} for p, frames in zip((2, 3, 4), results, strict=True)}


async def test_ecmp_spreads_flows_onto_the_predicted_members(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await _ecmp_group(sw)
        sports = range(49152, 49152 + 150)
        arrived = await _send_flows(fabric, sports)
        assert all(len(s) > 20 for s in arrived.values()), {p: len(s) for p, s in arrived.items()}
        for sport in sports:
            expected = predicted_port("10.2.0.9", sport, [2, 3, 4])
            assert sport in arrived[expected], (sport, expected)
        assert sum(len(s) for s in arrived.values()) == len(sports)


async def test_watch_port_failover_needs_no_write(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await _ecmp_group(sw)
        fabric.hosts[3].set_link(False)  # the peer goes down: switch port 3 loses carrier
        await asyncio.sleep(0.4)  # carrier: a link event, and a check every second
        sports = range(50000, 50100)
        arrived = await _send_flows(fabric, sports)
        assert arrived[3] == set()
        for sport in sports:
            assert sport in arrived[predicted_port("10.2.0.9", sport, [2, 4])]
        fabric.hosts[3].set_link(True)
        await asyncio.sleep(0.6)
        arrived = await _send_flows(fabric, range(50000, 50030))
        for sport in range(50000, 50030):
            assert sport in arrived[predicted_port("10.2.0.9", sport, [2, 3, 4])]


async def test_mesh_probes_take_the_member_the_probe_path_predicts(fabric: Fabric) -> None:
    """Protocol 253 has no L4 header: the selector hashes ports 0, as controller.path's
    probe_flow says; 120 probe addresses spread over the group, each on its predicted member."""
    dst = "10.2.0.1"
    sources = [f"10.0.{i}.1" for i in range(1, 121)]
    async with controller(fabric.address) as sw:
        await _ecmp_group(sw)
        for seq, src in enumerate(sources):
            fabric.hosts[1].send(
                bytes(
                    Ether(dst=ROUTER_MAC, src=host_mac(1))
                    / IP(src=src, dst=dst, proto=latency.PROBE_IP_PROTO, tos=26 << 2)
                    / (seq.to_bytes(4, "big") + MARK)
                )
            )
        results = await asyncio.gather(*(capture(fabric, p, 1.5) for p in (2, 3, 4)))
        arrived = {
            port: {int.from_bytes(f[f.index(MARK) - 4 : f.index(MARK)], "big") for f in frames}
            for port, frames in zip((2, 3, 4), results, strict=True)
        }
        assert sum(len(s) for s in arrived.values()) == len(sources), arrived
        assert all(arrived.values()), {p: len(s) for p, s in arrived.items()}
        for seq, src in enumerate(sources):
            flow = probe_flow(int(ipaddress.IPv4Address(src)), int(ipaddress.IPv4Address(dst)))
            expected = ecmp.choose_member(flow.hash(ecmp.HashFields.FIVE_TUPLE), [2, 3, 4])
            assert seq in arrived[expected], (src, expected)


async def test_lldp_is_punted_with_its_ingress_port(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await add_acl_entry(sw, p4.PUNT_TO_CPU, 100, eth_type=0x88CC)
        lldp = (
            b"\x01\x80\xc2\x00\x00\x0e"
            + bytes.fromhex(host_mac(3).replace(":", ""))
            + b"\x88\xcc"
            + MARK
            + bytes(30)
        )

        async def first_packet_in() -> fy.P4PacketIn:
            async for packet in sw.read_packets(eth_types={0x88CC}):
                if MARK in packet.payload:
                    return packet
            raise AssertionError("no packet-in")

        waiter = asyncio.create_task(first_packet_in())
        await asyncio.sleep(0.1)
        fabric.hosts[3].send(lldp)
        packet = await asyncio.wait_for(waiter, 5)
        assert packet.payload == lldp
        assert packet.metadata[p4.PACKET_IN_INGRESS_PORT] == 3


async def test_packet_out_leaves_the_requested_port(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        frame = b"\xff" * 6 + bytes.fromhex("020000000099") + b"\x88\xb5" + MARK + bytes(30)
        await sw.write([fy.P4PacketOut(frame, egress_port=4, _pad=0)])
        on4, on2 = await asyncio.gather(capture(fabric, 4), capture(fabric, 2, 0.5))
        assert on4 == [frame]
        assert on2 == []
        sent, _ = await read_counter(sw, p4.EGRESS_PORT_COUNTER, 4)
        assert sent >= 1


async def test_malformed_frames_are_dropped_and_forwarding_continues(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await add_member(sw, 2, 2)
        await add_next_entry(sw, 20, member_id=2)
        await add_routing_v4_entry(sw, "10.0.0.0/8", 20)
        good = udp_frame("10.7.7.7", 4242)
        h1 = fabric.hosts[1]
        for cut in (15, 20, 33, 40):  # ethernet ok, ipv4/udp truncated
            h1.send(good[:cut])
        h1.send(good[:14] + b"\x65" + good[15:])  # IP version 6 in an IPv4 ethertype
        h1.send(good)
        on2 = await capture(fabric, 2)
        assert [sport_of(f) for f in on2] == [4242]
        drops, _ = await read_counter(sw, p4.DROP_COUNTER, 1)
        assert drops >= 5


async def test_kernel_udp_between_namespaces(fabric: Fabric, netns: Netns) -> None:
    """Hosts' own stacks (ping, UDP, a 1 MB TCP transfer) across softswitch with the veths'
    offloads on: checksums left to offload are completed, GSO super-frames segmented."""
    for port in (1, 2):
        host = fabric.hosts[port]
        ns = host.ns
        ip("link", "set", host.ifname, "address", host_mac(port), netns=ns)
        ip("addr", "add", f"10.0.{port}.1/24", "dev", host.ifname, netns=ns)
        ip("route", "add", "default", "via", f"10.0.{port}.254", netns=ns)
        ip("neigh", "add", f"10.0.{port}.254", "lladdr", ROUTER_MAC, "dev", host.ifname, netns=ns)
    async with controller(fabric.address) as sw:
        for port in (1, 2):
            await add_member(sw, port, port)
            await add_next_entry(sw, port, member_id=port)
            await add_routing_v4_entry(sw, f"10.0.{port}.0/24", port)
        ping = netns.exec(fabric.hosts[1].ns, "ping", "-c", "2", "-W", "2", "-i", "0.2", "10.0.2.1")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        receiver = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
            "s.bind(('0.0.0.0', 5000)); s.settimeout(5); print(s.recv(100).decode())"
        )
        sender = (
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
            "s.sendto(b'over-softswitch', ('10.0.2.1', 5000))"
        )
        listening = asyncio.create_task(
            asyncio.to_thread(netns.exec, fabric.hosts[2].ns, sys.executable, "-c", receiver)
        )
        await asyncio.sleep(0.5)
        netns.exec(fabric.hosts[1].ns, sys.executable, "-c", sender)
        done = await listening
        assert done.stdout.strip() == "over-softswitch", done.stderr
        # TCP: the sender's GSO super-frames are cut into MTU-sized segments on the way.
        tcp_receiver = (
            "import hashlib, socket\n"
            "s = socket.socket(); s.bind(('0.0.0.0', 5001)); s.listen(); s.settimeout(10)\n"
            "c, _ = s.accept(); c.settimeout(10); h = hashlib.sha256(); n = 0\n"
            "while (d := c.recv(65536)):\n    h.update(d); n += len(d)\n"
            "print(n, h.hexdigest())"
        )
        tcp_sender = (
            "import hashlib, socket\n"
            "d = bytes(range(256)) * 4096\n"
            "s = socket.create_connection(('10.0.2.1', 5001)); s.sendall(d); s.close()\n"
            "print(len(d), hashlib.sha256(d).hexdigest())"
        )
        listening = asyncio.create_task(
            asyncio.to_thread(netns.exec, fabric.hosts[2].ns, sys.executable, "-c", tcp_receiver)
        )
        await asyncio.sleep(0.5)
        sent = netns.exec(fabric.hosts[1].ns, sys.executable, "-c", tcp_sender)
        got = await listening
        assert sent.stdout.strip() == got.stdout.strip() != "", (sent.stderr, got.stderr)


FLOOD = """
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = bytes.fromhex(sys.argv[2]); end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for _ in range(64):
        try:
            s.send(frame)
        except OSError:
            pass
"""


async def test_p4runtime_answers_while_forwarding_a_flood(fabric: Fabric, netns: Netns) -> None:
    async with controller(fabric.address) as sw:
        await add_member(sw, 2, 2)
        await add_next_entry(sw, 20, member_id=2)
        await add_routing_v4_entry(sw, "10.0.0.0/8", 20)
        host = fabric.hosts[1]
        flood = asyncio.create_task(
            asyncio.to_thread(
                netns.exec,
                host.ns,
                sys.executable,
                "-c",
                FLOOD,
                host.ifname,
                udp_frame("10.5.5.5", 7).hex(),
                "3",
            )
        )
        await asyncio.sleep(0.5)
        before, _ = await read_counter(sw, p4.INGRESS_PORT_COUNTER, 1)
        for i in range(100):
            await add_routing_v4_entry(sw, f"11.{i}.0.0/16", 20)
        after, _ = await read_counter(sw, p4.INGRESS_PORT_COUNTER, 1)
        reader: Any = sw.read  # finsy types read() as a coroutine; it is an async generator
        routes = [e async for e in reader(fy.P4TableEntry(p4.ROUTING_V4))]
        await flood
        assert len(routes) == 101
        assert after > before  # the flood was being forwarded while the writes were served


async def test_qp_hashing_spreads_one_source_port_onto_the_predicted_members(
    fabric: Fabric,
) -> None:
    async with controller(fabric.address) as sw:
        await _ecmp_group(sw)
        await check_qp_hashing(sw, fabric.hosts, SRC, "10.2.0.9", [2, 3, 4])


async def test_naks_are_counted_forwarded_and_sampled_once_per_interval(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await check_nak_sampling(sw, fabric.hosts, SRC, "10.2.0.9")


async def test_probes_are_punted_by_the_acl_and_packet_outs_leave_untouched(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await check_probe_punts(sw, fabric.hosts, SRC, "10.2.0.9")


async def test_probe_requests_are_answered_by_the_data_plane(fabric: Fabric) -> None:
    async with controller(fabric.address) as sw:
        await check_probe_answers(sw, fabric.hosts, SRC, "10.2.0.9")
