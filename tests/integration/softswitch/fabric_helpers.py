"""PTF-style helpers for softswitch packet tests: a softswitch process whose ports are veth
ends in the root namespace, one host namespace per port holding the peer end, raw sockets in
those namespaces to send and capture frames, and one helper per table to program it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import select
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import finsy as fy
import grpc
from finsy.proto import p4r, p4r_grpc
from pyroute2 import netns as pr_netns
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import ecmp, latency
from railfabric import fabric_p4 as p4
from railfabric.checksum import internet_checksum
from railfabric.fabric_counters import NAK_SAMPLE_SESSION, RoceKind, roce_index
from railfabric.p4info import DEFAULT_P4INFO
from tests.conftest import Netns, Processes, ip
from tests.p4_entries import SELECTOR

ROUTER_MAC = "02:00:00:00:00:fe"
ETH_P_ALL = 0x0003


def host_mac(port: int) -> str:
    return f"02:00:00:00:01:{port:02x}"


class Host:
    """The far end of one switch port: a namespace with a raw socket on its interface."""

    def __init__(self, port: int, ns: str, ifname: str) -> None:
        self.port = port
        self.ns = ns
        self.ifname = ifname
        pr_netns.pushns(ns)
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.bind((ifname, 0))
        finally:
            pr_netns.popns()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        self.sock.setblocking(False)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while True:
                self.sock.recv(65536)

    def capture(
        self, seconds: float, keep: Callable[[bytes], bool], idle: float | None = None
    ) -> list[bytes]:
        """Frames received within `seconds` (counted from now) that `keep` accepts; with
        `idle`, stop early once frames have arrived and none came for `idle` seconds."""
        deadline = time.monotonic() + seconds
        frames: list[bytes] = []
        while (left := deadline - time.monotonic()) > 0:
            wait = left if idle is None or not frames else min(left, idle)
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                if idle is not None and frames:
                    break
                continue
            try:
                while True:
                    data, addr = self.sock.recvfrom(65536)
                    if addr[2] != socket.PACKET_OUTGOING and keep(data):
                        frames.append(data)
            except BlockingIOError:
                continue
            except OSError as err:
                if err.errno == errno.ENETDOWN:  # our link is down: nothing can arrive
                    time.sleep(max(0.0, deadline - time.monotonic()))
                    break
                raise
        return frames

    def set_link(self, up: bool) -> None:
        ip("link", "set", self.ifname, "up" if up else "down", netns=self.ns)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Fabric:
    address: str
    hosts: dict[int, Host]
    switch_ifs: dict[int, str]


def build_hosts(netns: Netns, ports: Sequence[int]) -> tuple[dict[int, str], dict[int, Host]]:
    """One namespace per port; the switch keeps the root-namespace veth end."""
    switch_ifs: dict[int, str] = {}
    hosts: dict[int, Host] = {}
    for port in ports:
        ns = netns.add(f"h{port}")
        sw_if, host_if = f"s{netns.tag}p{port}", f"h{netns.tag}p{port}"
        netns.veth(sw_if, None, host_if, ns)
        for name, where in ((sw_if, None), (host_if, ns)):
            # No IPv6 chatter (router solicitations, DAD) on the test links.
            path = f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6"
            if where is None:
                with contextlib.suppress(OSError):
                    Path(path).write_text("1")
            else:
                netns.exec(where, "sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1")
        switch_ifs[port] = sw_if
        hosts[port] = Host(port, ns, host_if)
    return switch_ifs, hosts


async def start_softswitch(
    processes: Processes,
    grpc_port: int,
    switch_ifs: dict[int, str],
    *extra: str,
    device_id: int = 1,
) -> str:
    """Start `railfabric-softswitch` as a real process; return its address once it answers."""
    address = f"127.0.0.1:{grpc_port}"
    argv = [sys.executable, "-m", "softswitch.main", "--device-id", str(device_id)]
    argv += ["--grpc-addr", address, "--log-level", "WARNING", "--insecure", *extra]
    for port, ifname in switch_ifs.items():
        argv += ["-i", f"{port}@{ifname}"]
    proc = processes.start(argv, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    async with grpc.aio.insecure_channel(address) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        for _ in range(200):
            if proc.poll() is not None:
                raise RuntimeError(f"softswitch exited with {proc.returncode}")
            try:
                await stub.Capabilities(p4r.CapabilitiesRequest(), timeout=0.5)
                return address
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"softswitch did not answer on {address}")


@contextlib.asynccontextmanager
async def controller(address: str, election_id: int = 10) -> AsyncIterator[fy.Switch]:
    """A finsy client that pushes fabric.p4's P4Info and removes every entry afterwards."""
    opts = fy.SwitchOptions(
        p4info=DEFAULT_P4INFO,
        p4blob=b"softswitch",
        device_id=1,
        initial_election_id=election_id,
        p4force=True,
    )
    async with fy.Switch("softswitch", address, opts) as sw:
        try:
            yield sw
        finally:
            await sw.delete_all()


# ---- one helper per table (PTF style) ------------------------------------------------------


async def add_routing_v4_entry(sw: fy.Switch, prefix: str, next_id: int) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.ROUTING_V4,
                match=fy.P4TableMatch(ipv4_dst=prefix),
                action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=next_id),
            )
        ]
    )


async def add_member(sw: fy.Switch, member_id: int, port: int) -> None:
    await sw.insert(
        [
            fy.P4ActionProfileMember(
                SELECTOR,
                member_id=member_id,
                action=fy.P4TableAction(
                    p4.SET_NEXTHOP, port=port, smac=ROUTER_MAC, dmac=host_mac(port)
                ),
            )
        ]
    )


async def add_group(sw: fy.Switch, group_id: int, members: dict[int, int]) -> None:
    """A group of member ids, each watching its port (member id -> port)."""
    await sw.insert(
        [
            fy.P4ActionProfileGroup(
                SELECTOR,
                group_id=group_id,
                members=[fy.P4Member(mid, weight=(1, port)) for mid, port in members.items()],
            )
        ]
    )


async def add_next_entry(
    sw: fy.Switch, next_id: int, *, member_id: int | None = None, group_id: int | None = None
) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.NEXT,
                match=fy.P4TableMatch(next_id=next_id),
                action=fy.P4IndirectAction(member_id=member_id, group_id=group_id),
            )
        ]
    )


async def add_acl_entry(sw: fy.Switch, action: str, priority: int, **match: object) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.ACL,
                match=fy.P4TableMatch(**match),
                action=fy.P4TableAction(action),
                priority=priority,
            )
        ]
    )


async def add_qos_classify_entry(sw: fy.Switch, dscp: int, tc: int) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.QOS_CLASSIFY,
                match=fy.P4TableMatch(dscp=dscp),
                action=fy.P4TableAction(p4.SET_TRAFFIC_CLASS, tc=tc),
            )
        ]
    )


async def add_ecn_marking_entry(
    sw: fy.Switch, port: int, tc: int, *, kmin: int, kmax: int, pmax: int
) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.ECN_MARKING,
                match=fy.P4TableMatch(eg_port=port, traffic_class=tc),
                action=fy.P4TableAction(p4.SET_ECN_THRESHOLDS, kmin=kmin, kmax=kmax, pmax=pmax),
            )
        ]
    )


async def add_pfc_config_entry(
    sw: fy.Switch, port: int, priority: int, xoff: int, xon: int
) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.PFC_CONFIG,
                match=fy.P4TableMatch(port=port, priority=priority),
                action=fy.P4TableAction(p4.SET_PFC_THRESHOLDS, xoff=xoff, xon=xon),
            )
        ]
    )


async def read_counter(sw: fy.Switch, name: str, index: int) -> tuple[int, int]:
    """(packets, bytes) of counter `name` at `index`."""
    reader: object = sw.read
    async for entry in reader(fy.P4CounterEntry(name, index=index)):  # type: ignore[operator]
        data = entry.data
        return data.packet_count, data.byte_count
    raise LookupError(f"{name}[{index}] not read")


# ---- collective-aware ECMP (hash_config) --------------------------------------------------

QP_MARK = b"railfabric-qp-test"


def roce_frame(src: str, dst: str, sport: int, dst_qp: int) -> bytes:
    """A RoCEv2 frame from port 1's host: UDP to 4791, a BTH whose destination QP is
    `dst_qp`, and the QP again at the end to tell frames apart."""
    bth = bytes([0x04, 0, 0xFF, 0xFF, 0]) + dst_qp.to_bytes(3, "big") + bytes(4)
    return bytes(
        Ether(dst=ROUTER_MAC, src=host_mac(1))
        / IP(src=src, dst=dst)
        / UDP(sport=sport, dport=ecmp.ROCEV2_UDP_PORT)
        / (bth + QP_MARK + dst_qp.to_bytes(4, "big"))
    )


async def set_hash_config(sw: fy.Switch, action: str) -> None:
    """hash_config's default action: p4.HASH_QP or p4.NO_ACTION."""
    await sw.modify(
        [fy.P4TableEntry(p4.HASH_CONFIG, action=fy.P4TableAction(action), is_default_action=True)]
    )


async def check_qp_hashing(
    sw: fy.Switch, hosts: dict[int, Host], src: str, dst: str, members: list[int]
) -> None:
    """One NIC pair, one UDP source port, 120 queue pairs routed to a group of `members`
    (ports, in creation order): with hash_qp they use every member, without it one, and each
    frame leaves on the member railfabric.ecmp predicts."""
    sport, qps = 49152, range(1, 121)
    src_ip, dst_ip = int(ipaddress.IPv4Address(src)), int(ipaddress.IPv4Address(dst))
    for action, fields in (
        (p4.HASH_QP, ecmp.HashFields.FIVE_TUPLE_QP),
        (p4.NO_ACTION, ecmp.HashFields.FIVE_TUPLE),
    ):
        await set_hash_config(sw, action)
        for qp in qps:
            hosts[1].send(roce_frame(src, dst, sport, qp))
        results = await asyncio.gather(
            *(asyncio.to_thread(hosts[p].capture, 1.5, lambda f: QP_MARK in f) for p in members)
        )
        arrived = {
            p: {int.from_bytes(f[-4:], "big") for f in frames}
            for p, frames in zip(members, results, strict=True)
        }
        counts = {p: len(s) for p, s in arrived.items()}
        assert sum(counts.values()) == len(qps), (action, counts)
        for qp in qps:
            hashed = ecmp.hashed_sport(fields, ecmp.UDP_PROTOCOL, sport, ecmp.ROCEV2_UDP_PORT, qp)
            h = ecmp.flow_hash(src_ip, dst_ip, ecmp.UDP_PROTOCOL, hashed, ecmp.ROCEV2_UDP_PORT)
            assert qp in arrived[ecmp.choose_member(h, members)], (action, qp)
        used = [p for p, n in counts.items() if n]
        assert len(used) == (len(members) if action == p4.HASH_QP else 1), (action, counts)


# ---- RoCEv2 signals (roce_counter, nak_sampling, the NAK clone session) ----------------------

NAK_MARK = b"railfabric-nak-test"


def roce_ack_frame(src: str, dst: str, syndrome: int, seq: int) -> bytes:
    """An RC Acknowledge from port 1's host (the responder), DSCP 26, with `syndrome` in its
    AETH (0x1F an ACK, 0x60 a NAK for a PSN sequence error) and `seq` after the marker."""
    bth = bytes([0x11, 0, 0xFF, 0xFF, 0, 0, 0x12, 0x34, 0, 0, 0, 7])
    aeth = bytes([syndrome, 0, 0, 1])
    return bytes(
        Ether(dst=ROUTER_MAC, src=host_mac(1))
        / IP(src=src, dst=dst, tos=26 << 2)
        / UDP(sport=49152, dport=ecmp.ROCEV2_UDP_PORT)
        / (bth + aeth + NAK_MARK + seq.to_bytes(4, "big"))
    )


async def check_nak_sampling(sw: fy.Switch, hosts: dict[int, Host], src: str, dst: str) -> None:
    """With `dst` routed out of port 2, DSCP 26 in class 3 and port 1 sampled at most once a
    second: 20 NAKs and 10 ACKs sent back to back from port 1 all leave on port 2, exactly one
    NAK (the first, as it arrived) comes to the controller as a packet-in from port 1, and
    roce_counter counts 20 NAKs and 10 ACKs at (port 1, class 3)."""
    await add_member(sw, 102, 2)
    await add_next_entry(sw, 100, member_id=102)
    await add_routing_v4_entry(sw, dst + "/32", 100)
    await add_qos_classify_entry(sw, 26, 3)
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.NAK_SAMPLING,
                match=fy.P4TableMatch(ig_port=1),
                action=fy.P4TableAction(p4.SAMPLE_NAKS, interval_us=1_000_000),
            ),
            fy.P4CloneSessionEntry(NAK_SAMPLE_SESSION, replicas=[(255, 1)]),
        ]
    )
    naks = [roce_ack_frame(src, dst, 0x60, i) for i in range(20)]
    acks = [roce_ack_frame(src, dst, 0x1F, 100 + i) for i in range(10)]

    async def packet_ins() -> list[fy.P4PacketIn]:
        got: list[fy.P4PacketIn] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                async for packet in sw.read_packets():
                    if NAK_MARK in packet.payload:
                        got.append(packet)
        return got

    listener = asyncio.create_task(packet_ins())
    await asyncio.sleep(0.2)
    for frame in naks + acks:
        hosts[1].send(frame)
    forwarded = await asyncio.to_thread(hosts[2].capture, 2.0, lambda f: NAK_MARK in f, 0.5)
    sampled = await listener
    assert len(forwarded) == len(naks) + len(acks)
    assert [(p.metadata["ingress_port"], p.payload) for p in sampled] == [(1, naks[0])]
    counts = {}
    for kind in (RoceKind.NAK_PSN_SEQUENCE, RoceKind.ACK, RoceKind.DATA):
        counts[kind] = (await read_counter(sw, p4.ROCE_COUNTER, roce_index(1, 3, kind)))[0]
    assert counts == {RoceKind.NAK_PSN_SEQUENCE: 20, RoceKind.ACK: 10, RoceKind.DATA: 0}


# ---- latency probes (railfabric/latency.py): the ACL punts and the packet-out -----------------


async def check_probe_punts(sw: fy.Switch, hosts: dict[int, Host], src: str, dst: str) -> None:
    """With `dst` routed out of port 2: a mesh probe (IPv4 protocol 253) is routed like any
    packet until the ACL punts protocol 253 (a ToR's entry; a spine has none), then it and a
    link probe (ethertype 0x88b5) from port 1 come to the controller as sent, and nothing
    leaves; a mesh probe sent as a packet-out leaves the port named, untouched."""
    await add_member(sw, 102, 2)
    await add_next_entry(sw, 100, member_id=102)
    await add_routing_v4_entry(sw, dst + "/32", 100)
    probe = latency.Probe(latency.OP_REQUEST, 2, 1, 7, 123)
    src_ip, dst_ip = (int(ipaddress.IPv4Address(a)) for a in (src, dst))
    mesh = latency.mesh_frame(0x0200000000FE, 0x020000000001, src_ip, dst_ip, dscp=0, probe=probe)
    link = latency.link_frame(0x0200000000FE, 0x020000000001, probe)

    def is_probe(frame: bytes) -> bool:
        return latency.parse_mesh(frame) is not None or latency.parse_link(frame) is not None

    async def packet_ins() -> list[fy.P4PacketIn]:
        got: list[fy.P4PacketIn] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.5):
                async for packet in sw.read_packets():
                    if is_probe(packet.payload):
                        got.append(packet)
        return got

    # A spine: routed, TTL 63, header checksum rewritten as the pipeline does.
    hosts[1].send(mesh)
    (routed,) = await asyncio.to_thread(hosts[2].capture, 1.5, is_probe, 0.5)
    routed_mesh = latency.parse_mesh(routed)
    assert routed_mesh is not None and routed_mesh.probe == probe and routed[22] == 63

    await add_acl_entry(sw, p4.PUNT_TO_CPU, 100, eth_type=latency.PROBE_ETH_TYPE)
    await add_acl_entry(
        sw,
        p4.PUNT_TO_CPU,
        100,
        eth_type=latency.ETH_TYPE_IPV4,
        ip_proto=latency.PROBE_IP_PROTO,
    )
    listener = asyncio.create_task(packet_ins())
    await asyncio.sleep(0.2)
    hosts[1].send(mesh)
    hosts[1].send(link)
    leaked = await asyncio.to_thread(hosts[2].capture, 1.0, is_probe)
    punted = await listener
    assert leaked == []
    assert sorted((p.metadata["ingress_port"], p.payload) for p in punted) == sorted(
        [(1, mesh), (1, link)]
    )
    await sw.write([fy.P4PacketOut(mesh, egress_port=2, _pad=0)])
    assert await asyncio.to_thread(hosts[2].capture, 1.5, is_probe, 0.5) == [mesh]


async def check_probe_answers(sw: fy.Switch, hosts: dict[int, Host], src: str, dst: str) -> None:
    """answer_probe (acl.p4): with entries for link probes (address 0) and mesh probes to
    `dst`, a link request and a mesh request to `dst` from port 1 come back out of port 1 with
    their addresses swapped and op a reply (payload and a valid IPv4 checksum kept) and reach
    no one else; a reply, a mesh request to another address and a request to the broadcast
    MAC come to the controller as sent."""
    src_ip, dst_ip = (int(ipaddress.IPv4Address(a)) for a in (src, dst))
    await add_member(sw, 102, 2)
    await add_next_entry(sw, 100, member_id=102)
    # Routed, a probe would leave port 2 (a miss would drop it, which shows nothing).
    await add_routing_v4_entry(sw, str(ipaddress.IPv4Network(f"{dst}/8", strict=False)), 100)
    entries = [
        fy.P4TableEntry(
            p4.ACL,
            match=fy.P4TableMatch(**match),
            action=fy.P4TableAction(p4.ANSWER_PROBE, address=address),
            priority=100,
        )
        for match, address in (
            ({"eth_type": latency.PROBE_ETH_TYPE}, 0),
            ({"eth_type": latency.ETH_TYPE_IPV4, "ip_proto": latency.PROBE_IP_PROTO}, dst_ip),
        )
    ]
    await sw.insert(entries)
    me, them = 0x0200000000FE, 0x020000000001
    request = latency.Probe(latency.OP_REQUEST, 1, 1, 7, 123_456_789)
    reply = request.reply(0, 0)
    link = latency.link_frame(me, them, request)
    mesh = latency.mesh_frame(me, them, src_ip, dst_ip, dscp=26, probe=request)

    def is_probe(frame: bytes) -> bool:
        return latency.parse_mesh(frame) is not None or latency.parse_link(frame) is not None

    for frame in (link, mesh):
        hosts[1].send(frame)
        (back,) = await asyncio.to_thread(hosts[1].capture, 1.5, is_probe, 0.5)
        assert back[:12] == frame[6:12] + frame[:6]
        if frame is link:
            assert latency.parse_link(back) == (me, reply)
        else:
            assert latency.parse_mesh(back) == latency.MeshFrame(dst_ip, src_ip, 26, me, reply)
            header = back[14:24] + bytes(2) + back[26:34]
            assert internet_checksum(header) == int.from_bytes(back[24:26], "big")
            assert back[22] == frame[22]  # not routed: the TTL as it came
    assert await asyncio.to_thread(hosts[2].capture, 0.5, is_probe) == []

    to_cpu = [
        latency.link_frame(me, them, reply),
        latency.mesh_frame(me, them, src_ip, dst_ip + 1, dscp=26, probe=request),
        latency.link_frame(0xFFFF_FFFF_FFFF, them, request),
    ]
    got: list[bytes] = []

    async def packet_ins() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.5):
                async for packet in sw.read_packets():
                    if is_probe(packet.payload):
                        assert packet.metadata["ingress_port"] == 1
                        got.append(packet.payload)

    listener = asyncio.create_task(packet_ins())
    await asyncio.sleep(0.2)
    for frame in to_cpu:
        hosts[1].send(frame)
    leaked = await asyncio.to_thread(hosts[1].capture, 1.0, is_probe)
    leaked += await asyncio.to_thread(hosts[2].capture, 0.2, is_probe)  # held by its socket
    await listener
    assert leaked == [] and sorted(got) == sorted(to_cpu)
