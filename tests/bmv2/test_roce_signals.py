"""RoCEv2 signals on the real target: bmv2 running fabric.p4 forwards NAKs and ACKs, counts
them by port, class and kind in roce_counter, and clones one NAK per interval to the CPU port
through the clone session (PI keeps it as a multicast group; the copy keeps its ingress port)
— the same check softswitch passes in tests/integration/softswitch/test_packets.py (skipped
where bmv2 or p4c is not installed)."""

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
from tests.integration.softswitch.fabric_helpers import build_hosts, check_nak_sampling

pytestmark = pytest.mark.bmv2

DEVICE_ID = 43


async def test_bmv2_counts_forwards_and_samples_naks(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    target = Bmv2()
    if (why := target.unavailable()) is not None and "fabric.json" not in why:
        pytest.skip(why)
    if shutil.which(p4build.COMPILER) is None:
        pytest.skip(f"{p4build.COMPILER} (p4c) is not on PATH")
    built = p4build.compile_p4(tmp_path / "p4")
    switch_ifs, hosts = build_hosts(netns, [1, 2])
    grpc_port = free_port()
    log = (tmp_path / "bmv2.log").open("wb")
    # Plaintext: these tests check the pipeline; the lab runs bmv2 with mutual TLS.
    argv = target.argv(DEVICE_ID, f"127.0.0.1:{grpc_port}", switch_ifs, free_port(), None)
    processes.start(argv, stdout=log, stderr=log)
    _wait_for_port(grpc_port)
    options = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=built.bmv2_json, device_id=DEVICE_ID)
    try:
        async with asyncio.timeout(60), fy.Switch("bmv2", f"127.0.0.1:{grpc_port}", options) as sw:
            await check_nak_sampling(sw, hosts, "10.0.1.1", "10.2.0.9")
    finally:
        for host in hosts.values():
            host.close()
