"""Latency probes on the real target: bmv2 running fabric.p4 routes a mesh probe (IPv4
protocol 253) like any packet until the ACL punts it, punts link probes (ethertype 0x88b5),
sends a packet-out out of the port named, and answers probe requests in the data plane
(answer_probe) — the same checks softswitch passes in
tests/integration/softswitch/test_packets.py (skipped where bmv2 or p4c is not installed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bmv2.switch import bmv2_switch
from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import check_probe_answers, check_probe_punts

pytestmark = pytest.mark.bmv2

DEVICE_ID = 44


async def test_bmv2_punts_probes_and_sends_packet_outs_untouched(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    async with bmv2_switch(
        netns, processes, free_port, tmp_path, ports=[1, 2], device_id=DEVICE_ID
    ) as (sw, hosts):
        await check_probe_punts(sw, hosts, "10.0.1.1", "10.2.0.9")


async def test_bmv2_answers_probe_requests_in_the_data_plane(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    async with bmv2_switch(
        netns, processes, free_port, tmp_path, ports=[1, 2], device_id=DEVICE_ID
    ) as (sw, hosts):
        await check_probe_answers(sw, hosts, "10.0.1.1", "10.2.0.9")
