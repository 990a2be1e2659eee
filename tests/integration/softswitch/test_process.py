"""The softswitch process: starts on real interfaces, serves P4Runtime, stops cleanly on
SIGTERM, and outlives a SIGHUP."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc

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


async def test_sighup_without_tls_is_not_the_end(
    netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    """SIGHUP reloads the TLS files; a plaintext softswitch has none and keeps serving (the
    default action of SIGHUP would end it)."""
    switch_ifs, hosts = build_hosts(netns, [1])
    try:
        address = await start_softswitch(processes, free_port(), switch_ifs)
        proc = processes.children[-1]
        proc.send_signal(signal.SIGHUP)
        async with grpc.aio.insecure_channel(address) as channel:
            stub: Any = p4r_grpc.P4RuntimeStub(channel)
            caps = await stub.Capabilities(p4r.CapabilitiesRequest(), timeout=5)
            assert caps.p4runtime_api_version
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        for host in hosts.values():
            host.close()
