"""Collective-aware ECMP on the real target: bmv2 running fabric.p4 sends 120 queue pairs of
one NIC pair and one UDP source port onto every member with hash_config's hash_qp, onto one
without, each on the member railfabric.ecmp predicts — the same check softswitch passes in
tests/integration/softswitch/test_packets.py (skipped where bmv2 or p4c is not installed)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import finsy as fy
import pytest

from mininet_labs.processes import Bmv2
from railfabric.p4info import DEFAULT_P4INFO
from softswitch import p4build
from tests.bmv2.test_fabric_pipeline import _wait_for_port
from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import (
    add_group,
    add_member,
    add_next_entry,
    add_routing_v4_entry,
    build_hosts,
    check_qp_hashing,
)

pytestmark = pytest.mark.bmv2

DEVICE_ID = 42


async def test_bmv2_hashes_the_qp_only_when_told(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    target = Bmv2()
    if (why := target.unavailable()) is not None and "fabric.json" not in why:
        pytest.skip(why)
    if shutil.which(p4build.COMPILER) is None:
        pytest.skip(f"{p4build.COMPILER} (p4c) is not on PATH")
    built = p4build.compile_p4(tmp_path / "p4")
    switch_ifs, hosts = build_hosts(netns, [1, 2, 3, 4])
    grpc_port = free_port()
    log = (tmp_path / "bmv2.log").open("wb")
    # Plaintext: these tests check the pipeline; the lab runs bmv2 with mutual TLS.
    argv = target.argv(DEVICE_ID, f"127.0.0.1:{grpc_port}", switch_ifs, free_port(), None)
    processes.start(argv, stdout=log, stderr=log)
    _wait_for_port(grpc_port)
    options = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=built.bmv2_json, device_id=DEVICE_ID)
    try:
        async with asyncio.timeout(60), fy.Switch("bmv2", f"127.0.0.1:{grpc_port}", options) as sw:
            for port in (2, 3, 4):  # created in ascending port order: bmv2's member order
                await add_member(sw, 100 + port, port)
            await add_group(sw, 1, {104: 4, 102: 2, 103: 3})
            await add_next_entry(sw, 100, group_id=1)
            await add_routing_v4_entry(sw, "10.2.0.0/16", 100)
            await check_qp_hashing(sw, hosts, "10.0.1.1", "10.2.0.9", [2, 3, 4])
    finally:
        for host in hosts.values():
            host.close()
