"""The latency heat map against a real controller daemon over loopback gRPC: every switch's
agent connected and reporting probe results in its Counters as agents do (link probes on
every cable from both ends, mesh probes to every other ToR merged over the healthy uplinks);
one cable loses probes. GetLatency pages, railctl latency's grid, JSON and exit code, and the
filters' errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from controller.daemon.core_planner import load_planner
from railfabric.latency import Result, bucket_of, results_of
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import (
    LAB,
    Agent,
    connect_every_switch,
    start,
)
from tests.integration.controller.test_railctl_ports import arailctl

pytestmark = pytest.mark.integration

US = 1_000
LOSSY = "tor-r1-b2:3--spine-p1-1:3"
SLOW_PAIR = ("tor-r2-b1", "tor-r1-b2")


def result(
    kind: control_pb2.ProbeKind.ValueType,
    port: int,
    rtt_ns: int,
    *,
    n: int = 10,
    lost: int = 0,
    target: str = "",
) -> Result:
    return Result(
        kind=kind,
        port=port,
        target=target,
        sent=n + lost,
        received=n,
        bucket_index=[bucket_of(rtt_ns)],
        bucket_count=[n],
        rtt_sum_ns=n * rtt_ns,
        rtt_min_ns=rtt_ns,
        rtt_max_ns=rtt_ns,
    )


async def feed(agents: dict[str, Agent]) -> None:
    """One report from every switch: 10 link probes per cable end (LOSSY losing 5 of 15 at
    both ends), 10 mesh probes from each ToR to each other one (SLOW_PAIR at 400 us)."""
    planner = load_planner(LAB)
    tors = [i.name for i in planner.switches() if i.role == admin_pb2.SWITCH_ROLE_TOR]
    probes: dict[str, list[Result]] = {name: [] for name in agents}
    for link in planner.links():
        for name, port in (link.a, link.b):
            lost = 5 if link.key == LOSSY else 0
            probes[name].append(result(control_pb2.PROBE_KIND_LINK, port, 20 * US, lost=lost))
    for src in tors:
        for dst in tors:
            if src != dst:
                rtt = 400 * US if (src, dst) == SLOW_PAIR else 30 * US
                probes[src].append(result(control_pb2.PROBE_KIND_MESH, 0, rtt, target=dst))
    for name, agent in agents.items():
        await agent.send(counters=control_pb2.Counters(probe_results=results_of(probes[name])))


async def test_latency_by_rail_tor_and_link_with_a_lossy_cable_ranked_first(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agents = await connect_every_switch(addr, admin)
        try:
            await feed(agents)
            # The agents' messages are taken in asynchronously: until all 6 reports are in.
            for _ in range(200):
                first = await admin.GetLatency(
                    admin_pb2.GetLatencyRequest(by=admin_pb2.LATENCY_BY_LINK, page_size=3)
                )
                if first.reports == 6:
                    break
            assert first.reports == 6 and first.results == 8 * 2 + 12
            assert first.window_ns == 10_000_000_000 and first.min_samples == 5
            # Pages of 3 cables: every cable once, in key order; the ranking on the first.
            cells = list(first.cells)
            request = admin_pb2.GetLatencyRequest(by=admin_pb2.LATENCY_BY_LINK, page_size=3)
            page = first
            while page.next_page_token:
                request.page_token = page.next_page_token
                page = await admin.GetLatency(request)
                assert not page.outliers and page.outlier_count == 1
                cells += page.cells
            keys = [c.link for c in cells]
            assert keys == sorted(link.key for link in load_planner(LAB).links())
            lossy = next(c for c in cells if c.link == LOSSY)
            assert (lossy.sent, lossy.received, lossy.samples) == (30, 20, 20)
            assert lossy.outlier and lossy.p50_ns == lossy.p99_ns == 20_749
            assert (lossy.src, lossy.src_port, lossy.dst, lossy.dst_port) == (
                "tor-r1-b2",
                3,
                "spine-p1-1",
                3,
            )
            assert [o.link for o in first.outliers] == [LOSSY]
            assert first.outliers[0].reason == admin_pb2.LATENCY_REASON_LINK_LOSS

            await feed(agents)
            done = await arailctl(addr, "--json", "latency", "--by", "tor")
            assert done.returncode == 3, done.stderr  # an outlier
            data = json.loads(done.stdout)
            assert "next_page_token" not in data
            pairs = {(c["src"], c["dst"]): c for c in data["cells"]}
            assert len(pairs) == 12
            assert pairs[SLOW_PAIR]["p50_ns"] > 10 * pairs[("tor-r1-b1", "tor-r1-b2")]["p50_ns"]
            assert pairs[SLOW_PAIR]["src_rail"] == 2 and pairs[SLOW_PAIR]["dst_rail"] == 1
            assert data["outliers"][0]["link"] == LOSSY
            assert data["outliers"][0]["reason"] == "LATENCY_REASON_LINK_LOSS"

            grid = await arailctl(addr, "latency", "--by", "rail")
            assert grid.returncode == 3, grid.stderr
            lines = grid.stdout.splitlines()
            assert lines[0].startswith("latency by rail pair, p50 RTT in us")
            assert lines[1].split() == ["rail", "1", "rail", "2"]
            assert any(line.startswith("shade (p50 us):") for line in lines)
            assert f"{LOSSY}  link loss" in grid.stdout, grid.stdout

            one = await arailctl(addr, "--json", "latency", "--by", "link", "--switch", "tor-r1-b1")
            assert {c["link"] for c in json.loads(one.stdout)["cells"]} == {
                "tor-r1-b1:3--spine-p1-1:1",
                "tor-r1-b1:4--spine-p1-2:1",
            }
            wrong = await arailctl(addr, "latency", "--by", "tor", "--switch", "tor-r1-b9")
            assert wrong.returncode == 1
            assert "NOT_FOUND: switch_name: unknown switch 'tor-r1-b9'" in wrong.stderr
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await admin.GetLatency(
                    admin_pb2.GetLatencyRequest(
                        by=admin_pb2.LATENCY_BY_RAIL, switch_name="tor-r1-b1"
                    )
                )
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "switch_name: not with by RAIL" in (err.value.details() or "")
        finally:
            for agent in agents.values():
                await agent.close()
