"""softswitch learns carrier from the kernel's link events: a cable pulled (the peer end of a
real veth set down, the port itself staying up) reaches the switch in well under its periodic
check, which is set to an hour here so only the event can have told it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from softswitch import dataplane
from softswitch.dataplane import DataPlane
from softswitch.switch import Switch
from tests.conftest import Netns, ip

pytestmark = pytest.mark.integration


async def _until(what: str, done: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `done()` is true; fails naming `what` after `timeout_s`."""
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


async def test_a_pulled_cable_is_seen_by_its_link_event_not_the_periodic_check(
    netns: Netns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dataplane, "CARRIER_CHECK_S", 3600.0)
    peer_ns = netns.add("peer")
    port_if, peer_if = f"rft{netns.tag}c1", f"rft{netns.tag}p1"
    netns.veth(port_if, None, peer_if, peer_ns)
    switch = Switch(1, {1: port_if})
    plane = DataPlane(switch)
    plane.start(asyncio.get_running_loop())
    try:
        await _until("carrier up at start", lambda: switch.carrier[1], 5)
        await asyncio.sleep(0.1)  # the first periodic check has run: the next is an hour away
        ip("link", "set", peer_if, "down", netns=peer_ns)
        down_s = await _until("carrier loss", lambda: not switch.carrier[1], 1.0)
        ip("link", "set", peer_if, "up", netns=peer_ns)
        up_s = await _until("carrier back", lambda: switch.carrier[1], 1.0)
        # Well under the 50 ms the poll took (and an hour here): the event said it.
        assert down_s < 0.5 and up_s < 0.5, (down_s, up_s)
    finally:
        plane.close()
