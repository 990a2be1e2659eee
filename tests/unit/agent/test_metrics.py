"""The agent's Prometheus endpoint, served by a real Agent on loopback: per-port counters of its
last counter read with switch, port and peer labels and the values read, only the drop reasons
and queue figures the target reports, target health and session state, a local-repair
histogram that counts each repair once; `promtool check metrics` finds nothing to say."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.codec import Codec
from agent.main import Agent, build_parser
from agent.translate import translate
from railfabric import __version__
from railfabric.fabric_counters import roce_index
from railfabric.metrics import MetricsServer
from railfabric.p4info import DEFAULT_P4INFO
from railfabric.v1 import control_pb2, state_pb2
from tests import pki
from tests.metrics_checks import promtool_check, samples, scrape, value
from tests.unit.agent.samples import tor_state
from tests.unit.agent.test_writer import RecordingTarget, _desired, _port

pytestmark = pytest.mark.unit

SWITCH = "tor-r1-b1"
ARGS = [
    "--switch", SWITCH,
    "--controller", "127.0.0.1:1",
    "--target", "127.0.0.1:1",
    "--device-id", "1",
    "--port-map", "1=eth1,2=eth2,3=eth3",
    "--p4info", str(DEFAULT_P4INFO),
    *pki.flags(pki.switch(SWITCH)),
]  # fmt: skip
READ_AT_NS = 1_750_000_000_123_000_000
AGENT_EXE = Path(sys.executable).parent / "railfabric-agent"


def _agent() -> Agent:
    return Agent(build_parser().parse_args(ARGS))


@pytest.fixture
async def served() -> AsyncIterator[tuple[Agent, MetricsServer]]:
    agent = _agent()
    agent.metrics.watch(asyncio.get_running_loop(), agent)
    server = agent.metrics.serve("127.0.0.1:0")
    yield agent, server
    await asyncio.to_thread(server.close)


async def _scrape(server: MetricsServer) -> str:
    return await asyncio.to_thread(scrape, server.port)


async def test_port_counters_carry_switch_port_and_peer_and_the_values_read(
    served: tuple[Agent, MetricsServer],
) -> None:
    agent, server = served
    agent.writer.held = state_pb2.DesiredState(
        neighbors=[
            state_pb2.Neighbor(
                port=1, kind=state_pb2.PEER_KIND_SWITCH, peer_name="spine-1", peer_port=3
            ),
            state_pb2.Neighbor(port=2, kind=state_pb2.PEER_KIND_HOST, peer_name="srv-b1-s1/nic1"),
        ]
    )
    agent.last_counters = control_pb2.Counters(
        wall_ns=READ_AT_NS,
        ports=[
            control_pb2.PortCounters(
                port=1,
                rx_packets=10,
                rx_bytes=1_000,
                tx_packets=20,
                tx_bytes=2_000,
                drops=5,
                ecn_marks=3,
                pfc_pause_tx=4,
                pfc_pause_rx=6,
                pfc_watchdog_storms=1,
                drops_by_reason=[
                    control_pb2.DropCount(reason=control_pb2.DROP_REASON_NO_ROUTE, packets=2),
                    control_pb2.DropCount(reason=control_pb2.DROP_REASON_QUEUE_FULL, packets=3),
                ],
                queue_depth_bytes=1_500,
                queue_watermark_bytes=0,
            ),
            control_pb2.PortCounters(port=2, rx_packets=7, queue_depth_packets=4),
            control_pb2.PortCounters(port=3),
        ],
        roce_cells=[
            roce_index(1, 3, control_pb2.ROCE_KIND_DATA),
            roce_index(1, 3, control_pb2.ROCE_KIND_NAK_PSN_SEQUENCE),
        ],
        roce_packets=[900, 4],
    )
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)

    one = {"switch": SWITCH, "port": "1", "peer": "spine-1:3"}
    for name, want in (
        ("railfabric_port_rx_packets_total", 10),
        ("railfabric_port_rx_bytes_total", 1_000),
        ("railfabric_port_tx_packets_total", 20),
        ("railfabric_port_tx_bytes_total", 2_000),
        ("railfabric_port_drops_total", 5),
        ("railfabric_port_ecn_marks_total", 3),
        ("railfabric_port_pfc_pause_tx_total", 4),
        ("railfabric_port_pfc_pause_rx_total", 6),
        ("railfabric_port_pfc_watchdog_storms_total", 1),
        ("railfabric_port_queue_depth_bytes", 1_500),
        ("railfabric_port_queue_watermark_bytes", 0),  # present, so shown, even at 0
    ):
        assert value(found, name, **one) == want, name
    by_reason = "railfabric_port_drops_by_reason_total"
    assert value(found, by_reason, **one, reason="no_route") == 2
    assert value(found, by_reason, **one, reason="queue_full") == 3
    # Reasons the target did not list are "not available", not 0.
    assert {dict(labels)["reason"] for name, labels in found if name == by_reason} == {
        "no_route",
        "queue_full",
    }
    roce = "railfabric_port_roce_packets_total"
    assert value(found, roce, **one, traffic_class="3", kind="data") == 900
    assert value(found, roce, **one, traffic_class="3", kind="nak_psn_sequence") == 4
    assert len([1 for name, _ in found if name == roce]) == 2  # only what counted
    two = {"switch": SWITCH, "port": "2", "peer": "srv-b1-s1/nic1"}
    assert value(found, "railfabric_port_rx_packets_total", **two) == 7
    assert value(found, "railfabric_port_queue_depth_packets", **two) == 4
    # Queue figures only where the target reports them.
    assert value(found, "railfabric_port_queue_depth_bytes", **two) is None
    assert value(found, "railfabric_port_queue_watermark_packets", **one) is None
    # No neighbour in the controller's state: an empty peer.
    three = {"switch": SWITCH, "port": "3", "peer": ""}
    assert value(found, "railfabric_port_tx_bytes_total", **three) == 0
    assert (
        value(found, "railfabric_agent_counters_timestamp_seconds", switch=SWITCH)
        == READ_AT_NS / 1e9
    )


async def test_before_any_counter_read_no_port_series_but_the_rest_is_there(
    served: tuple[Agent, MetricsServer],
) -> None:
    agent, server = served
    agent.health = control_pb2.TargetHealth(
        reachable=True,
        primary=False,
        error="another client is primary",
        last_read_back_wall_ns=READ_AT_NS,
        missing=2,
        modified=1,
    )
    text = await _scrape(server)
    promtool_check(text)
    found = samples(text)
    assert not [name for name, _ in found if name.startswith("railfabric_port_")]
    assert value(found, "railfabric_agent_counters_timestamp_seconds", switch=SWITCH) is None
    assert value(found, "railfabric_agent_target_reachable", switch=SWITCH) == 1
    assert value(found, "railfabric_agent_target_primary", switch=SWITCH) == 0
    assert (
        value(found, "railfabric_agent_target_read_back_timestamp_seconds", switch=SWITCH)
        == READ_AT_NS / 1e9
    )
    differences = "railfabric_agent_target_read_back_differences"
    assert value(found, differences, switch=SWITCH, kind="missing") == 2
    assert value(found, differences, switch=SWITCH, kind="unexpected") == 0
    assert value(found, differences, switch=SWITCH, kind="modified") == 1
    assert value(found, "railfabric_agent_controller_connected", switch=SWITCH) == 0
    assert value(found, "railfabric_agent_controller_connections_total", switch=SWITCH) == 0
    assert value(found, "railfabric_agent_controller_dropped_messages_total", switch=SWITCH) == 0
    assert value(found, "railfabric_build_info", version=__version__) == 1
    assert value(found, "process_resident_memory_bytes") is not None


async def test_the_local_repair_histogram_counts_each_repair_once(
    served: tuple[Agent, MetricsServer], codec: Codec
) -> None:
    agent, server = served
    writer = agent.writer
    want, _ = translate(tor_state(1))
    writer.target = RecordingTarget(codec, [], holds=want)

    async def settle() -> None:
        task = asyncio.create_task(writer.run())
        for _ in range(100):
            await asyncio.sleep(0)
        task.cancel()

    await writer.controller_message(_desired(tor_state(1)))
    await writer.target_ready()
    await settle()
    await writer.port_event(_port(1, False))
    await settle()
    await writer.port_event(_port(2, False))
    await settle()
    assert len(writer.repairs) == 2

    histogram = "railfabric_agent_local_repair_seconds"
    for _ in range(2):  # a second scrape must not count them again
        found = samples(await _scrape(server))
        assert value(found, f"{histogram}_count", switch=SWITCH) == 2
        assert value(found, f"{histogram}_sum", switch=SWITCH) == pytest.approx(
            sum(r.latency_ns for r in writer.repairs) / 1e9
        )
        assert value(found, f"{histogram}_bucket", switch=SWITCH, le="+Inf") == 2


def test_metrics_are_off_unless_asked_and_the_flag_says_so() -> None:
    assert _agent().metrics_address is None
    help_text = " ".join(build_parser().format_help().split())
    assert "--metrics HOST:PORT" in help_text
    assert "(unset: no metrics)" in help_text


def test_a_metrics_address_in_use_is_one_line_and_exit_1() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        done = _run_agent("--metrics", address)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"railfabric-agent: --metrics {address}: address in use"]


def test_a_bad_metrics_address_is_refused_naming_the_flag() -> None:
    done = _run_agent("--metrics", ":9100")
    assert done.returncode == 2
    assert "argument --metrics: ':9100' is not HOST:PORT" in done.stderr.splitlines()[-1]


def _run_agent(*extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(AGENT_EXE), *ARGS, "--port-map", "1=lo", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
