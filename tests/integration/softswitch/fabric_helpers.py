"""PTF-style helpers for softswitch packet tests: a softswitch process whose ports are veth
ends in the root namespace, one host namespace per port holding the peer end, raw sockets in
those namespaces to send and capture frames, and one helper per table to program it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
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
    argv += ["--grpc-addr", address, "--log-level", "WARNING", *extra]
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
                "FabricIngress.routing_v4",
                match=fy.P4TableMatch(ipv4_dst=prefix),
                action=fy.P4TableAction("FabricIngress.set_next_id", next_id=next_id),
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
                    "FabricIngress.set_nexthop", port=port, smac=ROUTER_MAC, dmac=host_mac(port)
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
                "FabricIngress.next",
                match=fy.P4TableMatch(next_id=next_id),
                action=fy.P4IndirectAction(member_id=member_id, group_id=group_id),
            )
        ]
    )


async def add_acl_entry(sw: fy.Switch, action: str, priority: int, **match: object) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                "FabricIngress.acl",
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
                "FabricIngress.qos_classify",
                match=fy.P4TableMatch(dscp=dscp),
                action=fy.P4TableAction("FabricIngress.set_traffic_class", tc=tc),
            )
        ]
    )


async def add_ecn_marking_entry(
    sw: fy.Switch, port: int, tc: int, *, kmin: int, kmax: int, pmax: int
) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                "FabricEgress.ecn_marking",
                match=fy.P4TableMatch(eg_port=port, traffic_class=tc),
                action=fy.P4TableAction(
                    "FabricEgress.set_ecn_thresholds", kmin=kmin, kmax=kmax, pmax=pmax
                ),
            )
        ]
    )


async def add_pfc_config_entry(
    sw: fy.Switch, port: int, priority: int, xoff: int, xon: int
) -> None:
    await sw.insert(
        [
            fy.P4TableEntry(
                "FabricEgress.pfc_config",
                match=fy.P4TableMatch(port=port, priority=priority),
                action=fy.P4TableAction("FabricEgress.set_pfc_thresholds", xoff=xoff, xon=xon),
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
