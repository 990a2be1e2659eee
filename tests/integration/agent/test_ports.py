"""The netlink port monitor on real veths in real namespaces: a pulled cable (the peer end
going down) is seen as carrier loss on the switch's port, and its return as carrier up."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from agent.ports import PortEvent, PortMonitor
from tests.conftest import Netns, ip

pytestmark = pytest.mark.integration


async def _next(queue: asyncio.Queue[PortEvent]) -> PortEvent:
    return await asyncio.wait_for(queue.get(), timeout=5)


async def test_initial_state_then_carrier_down_and_up_inside_a_netns(netns: Netns) -> None:
    switch, wire = netns.add("sw"), netns.add("wire")
    a1, b1 = f"rf{netns.tag}s1", f"rf{netns.tag}w1"
    a2, b2 = f"rf{netns.tag}s2", f"rf{netns.tag}w2"
    netns.veth(a1, switch, b1, wire)
    netns.veth(a2, switch, b2, wire)
    ip("link", "set", b2, "down", netns=wire)  # port 2 starts with no carrier

    events: asyncio.Queue[PortEvent] = asyncio.Queue(maxsize=16)
    monitor = PortMonitor({1: a1, 2: a2, 3: f"rf{netns.tag}none"}, netns=switch)
    task = asyncio.create_task(monitor.run(events.put), name="port-monitor")
    try:
        initial = {e.port: e for e in [await _next(events) for _ in range(3)]}
        assert {p: (e.up, e.initial) for p, e in initial.items()} == {
            1: (True, True),
            2: (False, True),
            3: (False, True),
        }
        assert initial[1].mac != 0

        before = time.monotonic_ns()
        ip("link", "set", b1, "down", netns=wire)
        down = await _next(events)
        assert (down.port, down.up, down.initial, down.ifname) == (1, False, False, a1)
        assert down.monotonic_ns >= before
        assert abs(down.wall_ns - time.time_ns()) < 5_000_000_000

        ip("link", "set", b1, "up", netns=wire)
        ip("link", "set", b2, "up", netns=wire)
        ups = {(e.port, e.up) for e in [await _next(events), await _next(events)]}
        assert ups == {(1, True), (2, True)}
        assert monitor.state == {1: True, 2: True, 3: False}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
