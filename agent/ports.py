"""Carrier state of the switch's ports from netlink (railfabric.rtnl), optionally inside a
named network namespace.

The monitor reports the initial state of every mapped port, then one event per carrier change,
stamped as read with CLOCK_MONOTONIC (durations on this host: netlink event → committed repair)
and Unix time (ordering across hosts). Netlink dropping changes (ENOBUFS, its buffer full)
is answered by reading every port again. A port is up when the interface has carrier; a
pulled cable (the lab's peer veth going down) drops carrier while the port stays
administratively up."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from railfabric import rtnl

LOG = logging.getLogger("railfabric.agent.ports")


@dataclass(frozen=True, slots=True)
class PortEvent:
    port: int
    ifname: str
    up: bool
    monotonic_ns: int
    wall_ns: int
    # True for the state reported when the monitor starts (not a change).
    initial: bool
    mac: int = 0


def parse_port_map(text: str) -> dict[int, str]:
    """`1=veth1,2=veth2` → {1: "veth1", 2: "veth2"}; errors name the bad item."""
    out: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        port_text, sep, ifname = item.partition("=")
        if not sep or not ifname or not port_text.strip().isdigit():
            raise ValueError(f"--port-map: {item!r} is not PORT=IFNAME")
        port = int(port_text)
        if not 1 <= port <= 510 or port == 255:
            raise ValueError(f"--port-map: port {port} in {item!r} is not 1..510 (255 is the CPU)")
        if port in out:
            raise ValueError(f"--port-map: port {port} is mapped twice")
        if ifname in out.values():
            raise ValueError(f"--port-map: interface {ifname!r} is mapped twice")
        out[port] = ifname
    if not out:
        raise ValueError("--port-map: no ports")
    return out


Emit = Callable[[PortEvent], Awaitable[None]]


def _discard(sock: socket.socket) -> None:
    """Throw away what `sock` holds now."""
    with contextlib.suppress(BlockingIOError):
        while True:
            sock.recv(rtnl.RECV_BYTES)


class PortMonitor:
    """Watches the interfaces of `port_map` and calls `emit` with the initial state and with
    every carrier change, in the order netlink delivers them."""

    def __init__(self, port_map: Mapping[int, str], netns: str | None = None) -> None:
        self.port_map = dict(port_map)
        self.netns = netns
        self._by_name = {name: port for port, name in port_map.items()}
        self.state: dict[int, bool] = {}
        self.macs: dict[int, int] = {}
        # Set once the initial state of every mapped port has been emitted.
        self.initial_done = asyncio.Event()

    async def run(self, emit: Emit) -> None:
        loop = asyncio.get_running_loop()
        # Subscribe before the dump so no change between the two is lost.
        sock = rtnl.subscribe_links(self.netns)
        read: asyncio.Queue[tuple[list[rtnl.Link], int, int] | OSError] = asyncio.Queue()

        def on_readable() -> None:
            # Stamped as read: the change is seen now, whatever the loop does next.
            while True:
                try:
                    data = sock.recv(rtnl.RECV_BYTES)
                except BlockingIOError:
                    return
                except OSError as err:  # ENOBUFS: changes were dropped; the task resyncs
                    if err.errno == errno.ENOBUFS:
                        _discard(sock)  # older than the dump that follows, and incomplete
                    read.put_nowait(err)
                    return
                mono_ns, wall_ns = time.monotonic_ns(), time.time_ns()
                try:
                    links, _ = rtnl.links_in(data)
                except OSError as err:
                    read.put_nowait(err)
                    return
                read.put_nowait((links, mono_ns, wall_ns))

        loop.add_reader(sock.fileno(), on_readable)
        try:
            await self._resync(emit, initial=True)
            self.initial_done.set()
            while True:
                item = await read.get()
                if isinstance(item, OSError):
                    if item.errno != errno.ENOBUFS:
                        raise item
                    LOG.warning("netlink dropped link changes (ENOBUFS): reading every port again")
                    await self._resync(emit, initial=False)
                    continue
                links, mono_ns, wall_ns = item
                for link in links:
                    port = self._by_name.get(link.ifname)
                    if port is not None and self.state.get(port) != link.has_carrier:
                        up, seen = link.has_carrier, (mono_ns, wall_ns)
                        await self._report(emit, port, up, link.mac, initial=False, seen=seen)
        finally:
            loop.remove_reader(sock.fileno())
            sock.close()

    async def _resync(self, emit: Emit, *, initial: bool) -> None:
        """Report every mapped port as a dump finds it: all of them at the start (`initial`),
        afterwards only those whose carrier is not what was last reported."""
        seen: set[int] = set()
        for link in await asyncio.to_thread(rtnl.dump_links, self.netns):
            port = self._by_name.get(link.ifname)
            if port is None:
                continue
            seen.add(port)
            if initial or self.state.get(port) != link.has_carrier:
                await self._report(emit, port, link.has_carrier, link.mac, initial=initial)
        for port in sorted(set(self.port_map) - seen):
            if initial:
                LOG.warning(
                    "port %d: interface %r not found%s; reported down until it appears",
                    port,
                    self.port_map[port],
                    f" in netns {self.netns}" if self.netns else "",
                )
            if initial or self.state.get(port) is not False:
                await self._report(emit, port, False, 0, initial=initial)

    async def _report(
        self,
        emit: Emit,
        port: int,
        up: bool,
        mac: int,
        *,
        initial: bool,
        seen: tuple[int, int] | None = None,
    ) -> None:
        """`seen`: when the change was read (monotonic, Unix ns); now when None."""
        mono_ns, wall_ns = seen or (time.monotonic_ns(), time.time_ns())
        event = PortEvent(
            port=port,
            ifname=self.port_map[port],
            up=up,
            monotonic_ns=mono_ns,
            wall_ns=wall_ns,
            initial=initial,
            mac=mac or self.macs.get(port, 0),
        )
        self.state[port] = up
        if mac:
            self.macs[port] = mac
        await emit(event)
