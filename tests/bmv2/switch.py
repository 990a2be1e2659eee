"""bmv2 running fabric.p4 on veths to per-port host namespaces, programmed by finsy: the set-up
every packet test on the real target shares (skipped where bmv2 or p4c is not installed)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import finsy as fy
import pytest

from mininet_labs.processes import Bmv2
from railfabric.p4info import DEFAULT_P4INFO
from softswitch import p4build
from tests.bmv2.test_fabric_pipeline import _wait_for_port
from tests.conftest import Netns, Processes
from tests.integration.softswitch.fabric_helpers import Host, build_hosts


@contextlib.asynccontextmanager
async def bmv2_switch(
    netns: Netns,
    processes: Processes,
    free_port: Callable[[], int],
    tmp_path: Path,
    *,
    ports: Sequence[int],
    device_id: int,
) -> AsyncIterator[tuple[fy.Switch, dict[int, Host]]]:
    """A primary finsy client of a simple_switch_grpc whose `ports` each lead to a host."""
    target = Bmv2()
    if (why := target.unavailable()) is not None and "fabric.json" not in why:
        pytest.skip(why)
    if shutil.which(p4build.COMPILER) is None:
        pytest.skip(f"{p4build.COMPILER} (p4c) is not on PATH")
    built = p4build.compile_p4(tmp_path / "p4")
    switch_ifs, hosts = build_hosts(netns, ports)
    grpc_port = free_port()
    log = (tmp_path / "bmv2.log").open("wb")
    # Plaintext: these tests check the pipeline; the lab runs bmv2 with mutual TLS.
    argv = target.argv(device_id, f"127.0.0.1:{grpc_port}", switch_ifs, free_port(), None)
    processes.start(argv, stdout=log, stderr=log)
    _wait_for_port(grpc_port)
    options = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=built.bmv2_json, device_id=device_id)
    try:
        async with asyncio.timeout(60), fy.Switch("bmv2", f"127.0.0.1:{grpc_port}", options) as sw:
            yield sw, hosts
    finally:
        for host in hosts.values():
            host.close()
