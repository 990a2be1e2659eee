"""The admin API at scale over real gRPC on loopback: a client with gRPC's default settings (4
MiB receive limit, no channel options) reads a topology whose whole answer is larger than
that, page by page; railctl follows pages and filters, against an in-process server with
small pages and against a controller process."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from controller.cli.admin_commands import _render_links
from controller.core.clock import Now
from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.daemon import pages
from controller.daemon.admin import AdminService
from controller.daemon.core_planner import CorePlanner
from controller.daemon.store import SqliteStore
from controller.intent import load_fabric_text
from railfabric.v1 import admin_pb2, admin_pb2_grpc, state_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import start
from tests.unit.core.harness import Harness

pytestmark = pytest.mark.integration

S = 1_000_000_000
DEFAULT_RECEIVE_LIMIT = 4 * 1024 * 1024
# 248 ToRs x 120 spines: 29,760 links. No agent has reported, so every link says why in a
# sentence, and the whole topology is ~4.9 MB.
BIG = """
name: big-links
rails: 8
pods: 1
blocks_per_pod: 31
servers_per_block: 1
spines: {per: pod, count: 120}
links:
  host: {speed: 400G, length_m: 3}
  tor_spine: {speed: 400G, length_m: 50}
addressing:
  nic_pool: 10.0.0.0/16
"""


class StaticPlanner(CorePlanner):
    """The intent's planner without its routes: the admin API reads links and switches, and
    routing a 30,000-link fabric would take the test's time. What it does not override still
    routes, slowly but correctly."""

    def state_parts(self, switch: str) -> tuple[state_pb2.DesiredState, bytes]:
        return state_pb2.DesiredState(switch_name=switch), b""

    def route_counts(self, switch: str) -> Mapping[int, int]:
        return {}

    def set_link_usable(self, key: str, usable: bool) -> Mapping[str, state_pb2.StateDelta]:
        return {}

    def set_links_usable(
        self, changes: Sequence[tuple[str, bool]], *, deltas: bool = True
    ) -> Mapping[str, state_pb2.StateDelta]:
        return {}

    def set_all_unusable(self) -> None:
        pass


@pytest.fixture(scope="module")
def big_core() -> DecisionCore:
    core = DecisionCore(StaticPlanner(load_fabric_text(BIG, "big.yaml")), DampingParams())
    core.start(SqliteStore.open(":memory:").load(), Now(mono_ns=1_000 * S, wall_ns=1_700 * S))
    return core


@asynccontextmanager
async def serve(api: AdminService) -> AsyncIterator[str]:
    """The admin service on a free loopback port, in this process; its address."""
    server = grpc.aio.server()
    admin_pb2_grpc.add_FabricAdminServicer_to_server(api, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_a_default_client_reads_a_topology_larger_than_its_receive_limit(
    big_core: DecisionCore,
) -> None:
    async with serve(AdminService(big_core)) as addr, grpc.aio.insecure_channel(addr) as channel:
        stub = admin_pb2_grpc.FabricAdminStub(channel)
        request = admin_pb2.GetTopologyRequest(page_size=pages.MAX_PAGE_SIZE)
        replies = []
        while True:
            reply = await stub.GetTopology(request, timeout=30)
            replies.append(reply)
            if not reply.next_page_token:
                break
            request.page_token = reply.next_page_token
        # The same with no paging field at all (an older client): the default page.
        first = await stub.GetTopology(admin_pb2.GetTopologyRequest(), timeout=30)
    whole = admin_pb2.Topology()
    for reply in replies:
        whole.MergeFrom(reply)
    assert whole.ByteSize() > DEFAULT_RECEIVE_LIMIT  # one answer would be refused
    assert max(r.ByteSize() for r in replies) <= pages.MAX_PAGE_BYTES
    assert [s.name for s in whole.switches] == [s.name for s in big_core.planner.switches()]
    keys = [f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}" for x in whole.links]
    assert keys == [link.key for link in big_core.links()]  # each once, in order
    assert all(r.fabric_name == "big-links" and r.host_nics == 248 for r in replies)
    total = len(whole.switches) + len(whole.links)
    assert len(replies) == -(-total // pages.MAX_PAGE_SIZE)
    assert len(first.switches) + len(first.links) == pages.DEFAULT_PAGE_SIZE
    assert first.next_page_token


async def test_every_list_answers_a_default_client(big_core: DecisionCore) -> None:
    async with serve(AdminService(big_core)) as addr, grpc.aio.insecure_channel(addr) as channel:
        stub = admin_pb2_grpc.FabricAdminStub(channel)
        for call, request, field in [
            (stub.ListLinks, admin_pb2.ListLinksRequest(page_size=pages.MAX_PAGE_SIZE), "links"),
            (stub.ListLinks, admin_pb2.ListLinksRequest(only_down=True), "links"),
            (stub.ListSwitches, admin_pb2.ListSwitchesRequest(), "switches"),
            (stub.Diagnose, admin_pb2.DiagnoseRequest(page_size=pages.MAX_PAGE_SIZE), "findings"),
            (stub.ListAlarms, admin_pb2.ListAlarmsRequest(), "alarms"),
            (stub.ListEvents, admin_pb2.ListEventsRequest(limit=10_000), "events"),
        ]:
            count = 0
            while True:
                reply = await call(request, timeout=30)  # type: ignore[operator]
                count += len(getattr(reply, field))
                if not reply.next_page_token:
                    break
                request.page_token = reply.next_page_token  # type: ignore[attr-defined]
            if field == "links":
                assert count == 29_760
            if field == "findings":  # every link is down, every switch without its agent
                assert count == 29_760 + 368


async def railctl(addr: str, *args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller.cli.railctl",
        "--controller",
        addr,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def test_railctl_follows_small_pages_into_the_same_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.connect_all()
    h.cut("tor-r1-b1:3--spine-p1-1:1")
    api = AdminService(h.core, insecure=True)
    monkeypatch.setattr("controller.daemon.admin.now", lambda: h.now)
    whole = await api.ListLinks(admin_pb2.ListLinksRequest(), cast(Any, _Ctx()))
    # A controller whose pages hold 3 items: railctl's 5,000 is read as 3.
    monkeypatch.setattr(pages, "MAX_PAGE_SIZE", 3)
    async with serve(api) as addr:
        code, out = await railctl(addr, "--insecure", "links")
        assert code == 0 and out == "\n".join(_render_links(whole)) + "\n"
        code, out = await railctl(
            addr, "--insecure", "links", "--switch", "tor-r1-b1", "--state", "down"
        )
        assert code == 0 and out.count("\n") == 2 and "tor-r1-b1:3" in out, out
        code, out = await railctl(addr, "--insecure", "--json", "switches", "--rail", "1")
        assert code == 0 and '"next_page_token"' not in out and out.count('"name"') == 2, out
        code, out = await railctl(addr, "--insecure", "switches", "--rail", "7")
        assert code == 1 and "INVALID_ARGUMENT: rail: 7 is not a rail" in out
        code, out = await railctl(addr, "--insecure", "diagnose", "--switch", "tor-r1-b1")
        assert code == 3 and "link_down" in out and "tor-r2-b2" not in out, out


class _Ctx:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError(f"{code}: {details}")


async def test_railctl_filters_against_a_controller(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    env = pki.railctl_env()
    code, out = await railctl(addr, "links", "--switch", "tor-r1-b1", "--state", "unknown", env=env)
    assert code == 0 and out.count("tor-r1-b1:") == 2, out
    code, out = await railctl(addr, "switches", "--rail", "2", "--state", "disconnected", env=env)
    assert code == 0 and "tor-r2-b1" in out and "tor-r1-b1" not in out, out
    code, out = await railctl(addr, "links", "--switch", "tor-r1-b9", env=env)
    assert code == 1 and "NOT_FOUND: switch_name: unknown switch 'tor-r1-b9'" in out, out
    code, out = await railctl(addr, "diagnose", "--rail", "1", env=env)
    assert code == 3 and "tor-r1-b2" in out and "tor-r2-b1" not in out, out
