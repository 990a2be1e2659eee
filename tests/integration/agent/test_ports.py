"""The netlink port monitor on real veths in real namespaces: a pulled cable (the peer end
going down) is seen as carrier loss on the switch's port, and its return as carrier up."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from agent.ports import PortEvent, PortMonitor
from railfabric import rtnl
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


async def test_changes_netlink_dropped_are_read_again(
    netns: Netns, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A burst of changes overflows the subscriber's buffer (ENOBUFS: the kernel drops what
    does not fit): the monitor reads every port again and ends with the ports as they are."""
    monkeypatch.setattr(rtnl, "SUBSCRIBER_RCVBUF", 0)  # the kernel's minimum, a few KiB
    switch, wire = netns.add("sw"), netns.add("wire")
    a1, b1 = f"rf{netns.tag}s1", f"rf{netns.tag}w1"
    a2, b2 = f"rf{netns.tag}s2", f"rf{netns.tag}w2"
    netns.veth(a1, switch, b1, wire)
    netns.veth(a2, switch, b2, wire)
    events: asyncio.Queue[PortEvent] = asyncio.Queue()
    monitor = PortMonitor({1: a1, 2: a2}, netns=switch)
    task = asyncio.create_task(monitor.run(events.put), name="port-monitor")
    try:
        assert all(e.up for e in [await _next(events), await _next(events)])
        index = {x.ifname: x.index for x in rtnl.dump_links(wire)}
        # The loop is not given back until the end: nothing is read meanwhile.
        with rtnl.route_socket(wire) as sock:
            sock.settimeout(5)
            for seq in range(1, 200):  # port 1 flaps and fills the buffer, ending up
                rtnl.set_link_up(sock, index[b1], seq % 2 == 1, seq)
            rtnl.set_link_up(sock, index[b2], False, 200)  # port 2's only change
        # The kernel reports carrier from a work queue, later: let it find the buffer full.
        time.sleep(0.5)  # noqa: ASYNC251 -- the loop must not read meanwhile
        while monitor.state != {1: True, 2: False}:
            await _next(events)
        assert "ENOBUFS" in caplog.text, "the burst did not overflow: the test tests nothing"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
