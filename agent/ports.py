"""Carrier state of the switch's ports from netlink (pyroute2's asyncio socket), optionally
inside a named network namespace.

The monitor reports the initial state of every mapped port, then one event per carrier change,
stamped with CLOCK_MONOTONIC (durations on this host: netlink event → committed repair) and
Unix time (ordering across hosts). A port is up when the interface has carrier; a pulled cable
(the lab's peer veth going down) drops carrier while the port stays administratively up."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.rtnl import RTMGRP_LINK

from railfabric.netns import netlink_socket

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


def _carrier(msg: Any) -> bool:
    carrier = msg.get("carrier")
    if carrier is not None:
        return bool(carrier) and bool(msg["flags"] & 1)  # IFF_UP
    return bool(msg.get("operstate") == "UP")


def _mac(msg: Any) -> int:
    address = msg.get("address")
    return int(address.replace(":", ""), 16) if address else 0


Emit = Callable[[PortEvent], Awaitable[None]]


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
        # Not pyroute2's netns=: it forks, and the child shares our signal wakeup fd.
        fileno = netlink_socket(self.netns).detach() if self.netns else None
        async with AsyncIPRoute(fileno=fileno) as ipr:
            # Subscribe before the dump so no change between the two is lost.
            await ipr.bind(groups=RTMGRP_LINK)
            seen: set[int] = set()
            async for msg in await ipr.get_links():
                port = self._by_name.get(msg.get("ifname"))
                if port is None:
                    continue
                seen.add(port)
                await self._report(emit, port, _carrier(msg), _mac(msg), initial=True)
            for port in sorted(set(self.port_map) - seen):
                LOG.warning(
                    "port %d: interface %r not found%s; reported down until it appears",
                    port,
                    self.port_map[port],
                    f" in netns {self.netns}" if self.netns else "",
                )
                await self._report(emit, port, False, 0, initial=True)
            self.initial_done.set()
            while True:
                async for msg in ipr.get():
                    if msg.get("event") not in ("RTM_NEWLINK", "RTM_DELLINK"):
                        continue
                    port = self._by_name.get(msg.get("ifname"))
                    if port is None:
                        continue
                    up = msg["event"] == "RTM_NEWLINK" and _carrier(msg)
                    if self.state.get(port) != up:
                        await self._report(emit, port, up, _mac(msg), initial=False)

    async def _report(self, emit: Emit, port: int, up: bool, mac: int, *, initial: bool) -> None:
        event = PortEvent(
            port=port,
            ifname=self.port_map[port],
            up=up,
            monotonic_ns=time.monotonic_ns(),
            wall_ns=time.time_ns(),
            initial=initial,
            mac=mac or self.macs.get(port, 0),
        )
        self.state[port] = up
        if mac:
            self.macs[port] = mac
        await emit(event)
