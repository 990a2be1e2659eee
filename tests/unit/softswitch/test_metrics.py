"""The softswitch's Prometheus endpoint: its collector over a real switch model and traffic
manager, served on loopback, shows the counts fed in (pipeline drops by reason, P4 counters
with the traffic manager's drops folded in, TM drops, queues, ECN marks, PAUSE state); the
installed daemon serves it with --metrics, and `promtool check metrics` finds nothing to say."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from finsy.proto import p4i, p4r

from mininet_labs.processes import free_port as _free_port
from railfabric import metrics
from softswitch import pfc
from softswitch.dataplane import DataPlane
from softswitch.egress import TmEgress
from softswitch.metrics import collector
from softswitch.switch import Switch
from tests.metrics_checks import promtool_check, samples, scrape, value

pytestmark = pytest.mark.unit

EXE = Path(sys.executable).parent / "railfabric-softswitch"
MAC = bytes.fromhex("020000000001")
NOT_IPV4 = bytes(12) + b"\x86\xdd" + bytes(46)
# Ethernet, then an IPv4 header with ECN = ECT(0) (UDP, addresses 0), then a payload.
ECT_FRAME = bytes(12) + b"\x08\x00" + b"\x45\x02" + bytes(8) + b"\x11" + bytes(9) + bytes(80)


async def test_pipeline_and_traffic_manager_counts_are_exported_as_fed_in(
    p4info: p4i.P4Info,
) -> None:
    loop = asyncio.get_running_loop()
    switch = Switch(1, {1: "p1", 2: "p2"})
    switch.commit(p4r.ForwardingPipelineConfig(p4info=p4info))
    dataplane = DataPlane(Switch(1, {}))  # no interfaces: the TM's ports are added below
    egress = TmEgress(switch, dataplane, loop, None)
    tm = egress.tm
    tm.add_port(1, mac=MAC, rate_bps=1_000_000, buffer_bytes=3_000)
    tm.add_port(2, mac=MAC, rate_bps=1_000_000)
    now = time.monotonic_ns()
    # Port 1: three 1000-byte frames fill the buffer, the fourth is tail-dropped.
    verdicts = [tm.enqueue(now, 1, 0, bytes(1_000), None).accepted for _ in range(4)]
    assert verdicts == [True, True, True, False]
    # Port 2, class 3: marks from the first byte queued; the second ECT frame is marked.
    tm.configure_ecn(2, 3, 0, 0, 1_000_000)
    assert [tm.enqueue(now, 2, 3, ECT_FRAME, None).ce_marked for _ in range(2)] == [False, True]
    tm.on_pause_frame(now, 2, pfc.pause_for(MAC, 3, 0xFFFF))
    tm.on_pause_frame(now, 2, bytes(60))  # not a PAUSE
    switch.receive(NOT_IPV4, 1)

    registry = metrics.registry()
    registry.register(collector(loop, switch, dataplane, egress))
    server = metrics.serve(registry, "127.0.0.1:0")
    try:
        text = await asyncio.to_thread(scrape, server.port)
    finally:
        await asyncio.to_thread(server.close)
    promtool_check(text)
    found = samples(text)

    assert value(found, "railfabric_softswitch_pipeline_loaded") == 1
    assert value(found, "railfabric_softswitch_pipeline_commits_total") == 1
    assert value(found, "railfabric_softswitch_pipeline_drops_total", reason="not_ipv4") == 1
    assert value(found, "railfabric_softswitch_pipeline_drops_total", reason="no_route") == 0
    tm_drops = "railfabric_softswitch_tm_drops_total"
    assert value(found, tm_drops, port="1", reason="queue_full") == 1
    assert value(found, tm_drops, port="1", reason="headroom_full") == 0
    assert value(found, tm_drops, port="2", reason="pfc_watchdog") == 0
    dropped = "railfabric_softswitch_tm_dropped_bytes_total"
    assert value(found, dropped, port="1", reason="queue_full") == 1_000
    assert value(found, dropped, port="1", reason="pfc_watchdog") is None  # not measured
    assert value(found, "railfabric_softswitch_tm_queue_bytes", port="1", tc="0") == 3_000
    assert value(found, "railfabric_softswitch_tm_queue_packets", port="1", tc="0") == 3
    assert value(found, "railfabric_softswitch_tm_queue_bytes", port="1", tc="1") == 0
    assert value(found, "railfabric_softswitch_tm_ecn_marks_total", port="2") == 1
    assert value(found, "railfabric_softswitch_tm_pfc_pause_rx_total", port="2") == 1
    assert value(found, "railfabric_softswitch_tm_pfc_pause_rx_malformed_total", port="2") == 1
    assert value(found, "railfabric_softswitch_tm_paused", port="2", tc="3") == 1
    assert value(found, "railfabric_softswitch_tm_paused", port="2", tc="0") == 0
    assert value(found, "railfabric_softswitch_tm_stormed", port="2", tc="3") == 0
    # The P4 counters, with the TM's drop and marks folded in as a P4Runtime read sees them.
    p4_packets = "railfabric_softswitch_p4_packets_total"
    p4_bytes = "railfabric_softswitch_p4_bytes_total"
    drop_counter = {"counter": "FabricIngress.drop_counter", "port": "1"}
    assert value(found, p4_packets, **drop_counter) == 2
    assert value(found, p4_bytes, **drop_counter) == len(NOT_IPV4) + 1_000
    ingress = {"counter": "FabricIngress.ingress_port_counter", "port": "1"}
    assert value(found, p4_packets, **ingress) == 1
    ecn = {"counter": "FabricEgress.ecn_mark_counter", "port": "2"}
    assert value(found, p4_packets, **ecn) == 1
    assert value(found, p4_bytes, **ecn) is None  # a packets-only counter
    assert value(found, "railfabric_softswitch_port_carrier", port="1") == 1


@pytest.fixture
def served_softswitch() -> Iterator[int]:
    """The installed daemon with --metrics, no interfaces; yields the metrics port."""
    port = _free_port()
    argv = [
        str(EXE),
        "--device-id", "1",
        "--grpc-addr", f"127.0.0.1:{_free_port()}",
        "--metrics", f"127.0.0.1:{port}",
        "--log-level", "warning",
        "--insecure",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_daemon_serves_metrics_with_the_flag(served_softswitch: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            text = scrape(served_softswitch)
        except OSError:
            assert time.monotonic() < deadline, "the softswitch did not serve metrics"
            time.sleep(0.1)
            continue
        found = samples(text)
        if value(found, "railfabric_softswitch_pipeline_loaded") is not None:
            break  # the switch's own families are registered once it runs
        time.sleep(0.1)
    promtool_check(text)
    assert value(found, "railfabric_softswitch_pipeline_loaded") == 0
    assert value(found, "railfabric_softswitch_rx_frames_total") == 0
    assert any(name == "railfabric_build_info" for name, _ in found)
    assert value(found, "railfabric_insecure") == 1  # served with --insecure
    assert value(found, "process_open_fds") is not None


def test_a_metrics_address_in_use_is_one_line_and_exit_1() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        done = subprocess.run(
            [str(EXE), "--device-id", "1", "--grpc-addr", f"127.0.0.1:{_free_port()}",
             "--metrics", address, "--insecure"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"railfabric-softswitch: error: --metrics {address}: address in use"
    ]


def test_a_bad_metrics_address_is_refused_naming_the_flag() -> None:
    done = subprocess.run(
        [str(EXE), "--device-id", "1", "--metrics", "9100", "--insecure"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "railfabric-softswitch: error: argument --metrics: '9100' is not HOST:PORT "
        "(e.g. 127.0.0.1:50051)"
    ]
