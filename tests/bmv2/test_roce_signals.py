"""RoCEv2 signals on the real target: bmv2 running fabric.p4 forwards NAKs and ACKs, counts
them by port, class and kind in roce_counter, and clones one NAK per interval to the CPU port
through the clone session (PI keeps it as a multicast group; the copy keeps its ingress port)
— the same check softswitch passes in tests/integration/softswitch/test_packets.py (skipped
where bmv2 or p4c is not installed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bmv2.switch import bmv2_switch
from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import check_nak_sampling

pytestmark = pytest.mark.bmv2

DEVICE_ID = 43


async def test_bmv2_counts_forwards_and_samples_naks(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    async with bmv2_switch(
        netns, processes, free_port, tmp_path, ports=[1, 2], device_id=DEVICE_ID
    ) as (sw, hosts):
        await check_nak_sampling(sw, hosts, "10.0.1.1", "10.2.0.9")
