"""The controller's Prometheus endpoint over a real decision core, served on loopback: every link
state and every alarm kind seen reads 0 rather than vanishing, refused inputs are a counter,
process_* and railfabric_build_info are there, and `promtool check metrics` finds nothing to
say."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.daemon.core_planner import load_planner
from controller.daemon.metrics import Metrics, snapshot
from controller.daemon.runner import now
from controller.daemon.store import SqliteStore
from railfabric import __version__, latency
from railfabric.fabric_counters import roce_index
from railfabric.latency import Result, results_of
from railfabric.metrics import MetricsServer
from railfabric.v1 import control_pb2
from tests.metrics_checks import promtool_check, samples, scrape, value

pytestmark = pytest.mark.unit

LAB = Path(__file__).resolve().parents[3] / "examples" / "lab-2rail.yaml"
STORE = {"kind": "store_unavailable", "severity": "critical"}


@pytest.fixture
async def served() -> AsyncIterator[tuple[DecisionCore, MetricsServer]]:
    core = DecisionCore(load_planner(LAB), DampingParams())
    core.start(SqliteStore.open(":memory:").load(), now())
    metrics = Metrics()
    metrics.watch(asyncio.get_running_loop(), lambda: snapshot(core, 1, True))
    server = metrics.serve("127.0.0.1:0")
    yield core, server
    await asyncio.to_thread(server.close)


async def _scrape(server: MetricsServer) -> str:
    return await asyncio.to_thread(scrape, server.port)


async def test_states_and_kinds_read_zero_rather_than_vanish(
    served: tuple[DecisionCore, MetricsServer],
) -> None:
    core, server = served
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)
    assert value(found, "railfabric_links", state="unknown") == 8
    for state in ("up", "down", "hold_down", "damped"):
        assert value(found, "railfabric_links", state=state) == 0, state
    assert value(found, "railfabric_alarms", **STORE) is None  # never raised: not a kind yet
    assert value(found, "railfabric_build_info", version=__version__) == 1
    assert value(found, "process_cpu_seconds_total") is not None

    core.store_health(False, "disk full", now())
    found = samples(await _scrape(server))
    assert value(found, "railfabric_alarms", **STORE) == 1
    core.store_health(True, "", now())
    text = await _scrape(server)
    promtool_check(text)
    assert value(samples(text), "railfabric_alarms", **STORE) == 0


async def test_refused_inputs_are_counted_by_reason(
    served: tuple[DecisionCore, MetricsServer],
) -> None:
    core, server = served
    core.hello(control_pb2.Hello(switch_name="tor-r1-b1"), now())
    for generation in (10**6, 10**7):
        core.applied("tor-r1-b1", control_pb2.Applied(generation=generation), now())
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)
    assert value(found, "railfabric_inputs_refused_total", reason="applied_unsent") == 2
    assert value(found, "railfabric_switch_generation", switch="tor-r1-b1", kind="applied") == 0
    assert value(found, "railfabric_switch_converged", switch="tor-r1-b1") == 0
    assert value(found, "railfabric_agent_sessions") == 1


async def test_roce_rates_are_series_only_where_nonzero(
    served: tuple[DecisionCore, MetricsServer],
) -> None:
    core, server = served
    t = now()
    for wall_ns, naks, cnps in ((t.wall_ns, 0, 0), (t.wall_ns + 2_000_000_000, 40, 10)):
        msg = control_pb2.Counters(wall_ns=wall_ns)
        msg.ports.add(port=1)
        for tc, kind, packets in (
            (3, control_pb2.ROCE_KIND_DATA, wall_ns % 1000),
            (3, control_pb2.ROCE_KIND_NAK_RNR, naks),
            (6, control_pb2.ROCE_KIND_CNP, cnps),
        ):
            msg.roce_cells.append(roce_index(1, tc, kind))
            msg.roce_packets.append(packets)
        msg.ports.add(port=2)
        core.counters("tor-r1-b1", msg, t)
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)
    nak_rate = "railfabric_roce_naks_per_second"
    assert value(found, nak_rate, switch="tor-r1-b1", port="1", kind="rnr") == 20.0
    assert value(found, nak_rate, switch="tor-r1-b1", port="1", kind="psn_sequence") is None
    assert value(found, nak_rate, switch="tor-r1-b1", port="2", kind="rnr") is None
    cnp_rate = "railfabric_roce_cnps_per_second"
    assert value(found, cnp_rate, switch="tor-r1-b1", port="1") == 5.0
    assert value(found, cnp_rate, switch="tor-r1-b1", port="2") is None
    assert value(found, "railfabric_roce_suspect_links") == 0


async def test_latency_by_rail_pair_and_the_outlier_cables(
    served: tuple[DecisionCore, MetricsServer],
) -> None:
    core, server = served
    text = await _scrape(server)
    promtool_check(text)
    assert value(samples(text), "railfabric_latency_outlier_links") == 0
    assert (
        value(samples(text), "railfabric_latency_rail_p50_seconds", src_rail="1", dst_rail="2")
        is None
    )
    t = now()
    rtt = latency.bucket_of(30_000)
    mesh = Result(
        kind=control_pb2.PROBE_KIND_MESH,
        target="tor-r2-b1",
        sent=10,
        received=10,
        bucket_index=[rtt],
        bucket_count=[10],
    )
    lossy = Result(
        kind=control_pb2.PROBE_KIND_LINK,
        port=3,
        sent=10,
        received=5,
        bucket_index=[rtt],
        bucket_count=[5],
    )
    core.counters("tor-r1-b1", control_pb2.Counters(probe_results=results_of([mesh, lossy])), t)
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)
    rail_pair = {"src_rail": "1", "dst_rail": "2"}
    assert value(found, "railfabric_latency_rail_p50_seconds", **rail_pair) == (
        latency.bucket_bound_ns(rtt) / 1e9
    )
    assert value(found, "railfabric_latency_rail_samples", **rail_pair) == 10
    assert value(found, "railfabric_latency_rail_loss_ratio", **rail_pair) == 0
    assert value(found, "railfabric_latency_outlier_links") == 1
    link = "tor-r1-b1:3--spine-p1-1:1"
    assert value(found, "railfabric_latency_outlier_rank", link=link, reason="link_loss") == 1
    assert value(found, "railfabric_latency_outlier_bad_pairs", link=link) == 0
