"""fabric.p4 on the real target: compile it with p4c, start simple_switch_grpc with the lab's
own command line (mininet_labs.processes: `--thrift-port` only where the binary's `--help`
lists it, the target's options after `--`; docs/bmv2.md), push the pipeline with finsy and
write one entry into every table the contract names (skipped where bmv2 or p4c is not
installed)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import finsy as fy
import pytest

from mininet_labs.processes import Bmv2
from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import QUEUE_DEPTH_LEVELS, DropReason, drop_reason_index
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from softswitch import p4build
from tests.conftest import Netns, Processes

pytestmark = pytest.mark.bmv2


def _wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"simple_switch_grpc did not listen on 127.0.0.1:{port}")


@pytest.fixture
def bmv2_address(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> str:
    """A simple_switch_grpc with no program and two veth ports (carrier up)."""
    if shutil.which(p4build.COMPILER) is None:
        pytest.skip(f"{p4build.COMPILER} (p4c) is not on PATH")
    a1, a2 = f"rf{netns.tag}a1", f"rf{netns.tag}a2"
    b1, b2 = f"rf{netns.tag}b1", f"rf{netns.tag}b2"
    netns.veth(a1, None, b1, None)
    netns.veth(a2, None, b2, None)
    target = Bmv2()
    missing = target.options().missing()
    assert missing == [], f"simple_switch_grpc's --help lists no {', '.join(missing)}"
    grpc_port = free_port()
    log = (tmp_path / "bmv2.log").open("wb")
    # Plaintext: these tests check the pipeline; the lab runs bmv2 with mutual TLS.
    argv = target.argv(41, f"127.0.0.1:{grpc_port}", {1: a1, 2: a2}, free_port(), None)
    processes.start(argv, stdout=log, stderr=log)
    _wait_for_port(grpc_port)
    return f"127.0.0.1:{grpc_port}"


async def test_bmv2_accepts_fabric_pipeline(bmv2_address: str, tmp_path: Path) -> None:
    built = p4build.compile_p4(tmp_path / "p4")
    # The compiler's P4Info is the checked-in one, name for name.
    assert p4build.p4info_differences(load_p4info(DEFAULT_P4INFO), load_p4info(built.p4info)) == []

    options = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=built.bmv2_json, device_id=41)
    async with asyncio.timeout(30), fy.Switch("bmv2", bmv2_address, options) as sw:
        ecmp = p4.ECMP_SELECTOR
        nexthop = [
            fy.P4ActionProfileMember(
                ecmp,
                member_id=port,
                action=fy.P4TableAction(p4.SET_NEXTHOP, port=port, smac=0x0200000000FE, dmac=port),
            )
            for port in (1, 2)
        ]
        group = fy.P4ActionProfileGroup(
            ecmp,
            group_id=10,
            members=[fy.P4Member(port, weight=(1, port)) for port in (1, 2)],  # watch_port
        )
        entries = [
            fy.P4TableEntry(
                p4.ACL,
                match=fy.P4TableMatch(eth_type=(0x88CC, 0xFFFF)),
                action=fy.P4TableAction(p4.PUNT_TO_CPU),
                priority=10,
            ),
            fy.P4TableEntry(
                p4.QOS_CLASSIFY,
                match=fy.P4TableMatch(dscp=26),
                action=fy.P4TableAction(p4.SET_TRAFFIC_CLASS, tc=3),
            ),
            fy.P4TableEntry(
                p4.ROUTING_V4,
                match=fy.P4TableMatch(ipv4_dst="10.1.0.0/16"),
                action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=10),
            ),
            fy.P4TableEntry(
                p4.NEXT,
                match=fy.P4TableMatch(next_id=10),
                action=fy.P4IndirectAction(group_id=10),
            ),
            fy.P4TableEntry(
                p4.ECN_MARKING,
                match=fy.P4TableMatch(eg_port=1, traffic_class=3),
                action=fy.P4TableAction(
                    p4.SET_ECN_THRESHOLDS, kmin=15000, kmax=150000, pmax=200000
                ),
            ),
            fy.P4TableEntry(
                p4.PFC_CONFIG,
                match=fy.P4TableMatch(port=1, priority=3),
                action=fy.P4TableAction(p4.SET_PFC_THRESHOLDS, xoff=60000, xon=30000),
            ),
        ]
        await sw.insert([*nexthop, group, *entries])

        # finsy's read() overloads are typed as coroutines; at runtime it is an async generator.
        routes = [
            e
            async for e in sw.read(  # type: ignore[attr-defined]
                fy.P4TableEntry(p4.ROUTING_V4)
            )
        ]
        assert [r.match for r in routes] == [fy.P4TableMatch(ipv4_dst="10.1.0.0/16")]
        counters = [
            c
            async for c in sw.read(  # type: ignore[attr-defined]
                fy.P4CounterEntry(p4.INGRESS_PORT_COUNTER)
            )
        ]
        assert len(counters) == 512

        # Drops by reason and the queue histogram are counters, which bmv2 serves; its
        # registers it does not (PI: UNIMPLEMENTED), which is why an agent for bmv2 reads the
        # histogram and reports no depth (agent/counters.py, docs/bmv2.md).
        for name, index in (
            (p4.DROP_REASON_COUNTER, drop_reason_index(1, DropReason.NO_ROUTE)),
            (p4.QUEUE_DEPTH_HISTOGRAM, 1 * QUEUE_DEPTH_LEVELS + 63),
        ):
            read = [
                c
                async for c in sw.read(  # type: ignore[attr-defined]
                    fy.P4CounterEntry(name, index=index)
                )
            ]
            assert [(c.index, c.packet_count) for c in read] == [(index, 0)], name
        with pytest.raises(fy.P4ClientError) as err:
            async for _ in sw.read(  # type: ignore[attr-defined]
                fy.P4RegisterEntry(p4.QUEUE_WATERMARK, index=1)
            ):
                pass
        assert err.value.code == fy.GRPCStatusCode.UNIMPLEMENTED
