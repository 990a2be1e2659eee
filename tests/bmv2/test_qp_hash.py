"""Collective-aware ECMP on the real target: bmv2 running fabric.p4 sends 120 queue pairs of
one NIC pair and one UDP source port onto every member with hash_config's hash_qp, onto one
without, each on the member railfabric.ecmp predicts — the same check softswitch passes in
tests/integration/softswitch/test_packets.py (skipped where bmv2 or p4c is not installed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bmv2.switch import bmv2_switch
from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import (
    add_group,
    add_member,
    add_next_entry,
    add_routing_v4_entry,
    check_qp_hashing,
)

pytestmark = pytest.mark.bmv2

DEVICE_ID = 42


async def test_bmv2_hashes_the_qp_only_when_told(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    ports = [1, 2, 3, 4]
    async with bmv2_switch(
        netns, processes, free_port, tmp_path, ports=ports, device_id=DEVICE_ID
    ) as (sw, hosts):
        for port in (2, 3, 4):  # created in ascending port order: bmv2's member order
            await add_member(sw, 100 + port, port)
        await add_group(sw, 1, {104: 4, 102: 2, 103: 3})
        await add_next_entry(sw, 100, group_id=1)
        await add_routing_v4_entry(sw, "10.2.0.0/16", 100)
        await check_qp_hashing(sw, hosts, "10.0.1.1", "10.2.0.9", [2, 3, 4])
