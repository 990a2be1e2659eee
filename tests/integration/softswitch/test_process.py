"""The softswitch process: starts on real interfaces, serves P4Runtime, stops cleanly on
SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import build_hosts, start_softswitch

pytestmark = pytest.mark.integration


async def test_sigterm_stops_cleanly(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    switch_ifs, hosts = build_hosts(netns, [1, 2])
    try:
        await start_softswitch(processes, free_port(), switch_ifs)
        proc = processes.children[-1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        for host in hosts.values():
            host.close()
