"""Both daemons' /metrics as processes: a softswitch whose ports 1 and 2 are cabled to each
other (LLDP flows) and the agent programming it. The agent's per-port counters carry the
controller's peer names and equal what it reported to the controller from the same read; the
softswitch shows its pipeline and traffic manager; promtool finds nothing to say about
either scrape."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Netns, Processes
from tests.integration.agent.test_agent_softswitch import (
    _controller,
    _make_rig,
    _start_agent,
    _until,
    _wait_listening,
)
from tests.metrics_checks import promtool_check, samples, scrape, value
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.integration

SWITCH = "tor-r0-b0"
# tor_state's neighbours, as the agent labels its ports.
PEERS = {1: "spine-1:1", 2: "spine-2:1", 3: "srv-b0-s0/nic0"}


async def test_agent_and_softswitch_serve_their_metrics(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    rig = _make_rig(netns, processes, free_port, tmp_path, loop_1_2=True)
    # The same softswitch again, with --metrics.
    os.killpg(rig.softswitch.pid, signal.SIGKILL)
    rig.softswitch.wait(timeout=10)
    switch_port, agent_port = free_port(), free_port()
    log = (tmp_path / "softswitch.log").open("ab")
    argv = [*rig.softswitch_argv, "--metrics", f"127.0.0.1:{switch_port}"]
    processes.start(argv, stdout=log, stderr=log)
    _wait_listening(rig.target_addr)

    async with _controller(rig.controller_addr, tor_state(1)) as ctrl:
        _start_agent(rig, processes, tmp_path, extra=("--metrics", f"127.0.0.1:{agent_port}"))
        assert (await ctrl.next("applied")).applied.generation == 1

        def rx(port: int) -> int:
            return next((c.rx_packets for c in ctrl.counters.ports if c.port == port), 0)

        await _until(lambda: rx(1) > 0 and rx(2) > 0)
        # A scrape showing the read the controller got last (reads come every 0.5 s).
        async with asyncio.timeout(20):
            while True:
                text = await asyncio.to_thread(scrape, agent_port)
                found, reported = samples(text), ctrl.counters
                read_at = value(found, "railfabric_agent_counters_timestamp_seconds", switch=SWITCH)
                if read_at == reported.wall_ns / 1e9:
                    break
                await asyncio.sleep(0.1)
    promtool_check(text)
    assert {c.port for c in reported.ports} == set(PEERS)
    for c in reported.ports:
        labels = {"switch": SWITCH, "port": str(c.port), "peer": PEERS[c.port]}
        for field in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops"):
            assert value(found, f"railfabric_port_{field}_total", **labels) == getattr(c, field)
    assert value(found, "railfabric_agent_target_reachable", switch=SWITCH) == 1
    assert value(found, "railfabric_agent_applied_generation", switch=SWITCH) == 1
    assert value(found, "railfabric_agent_controller_connections_total", switch=SWITCH) == 1

    text = await asyncio.to_thread(scrape, switch_port)
    promtool_check(text)
    found = samples(text)
    assert value(found, "railfabric_softswitch_pipeline_loaded") == 1
    assert (value(found, "railfabric_softswitch_rx_frames_total") or 0) > 0
    # The agent's LLDPDUs leave through the traffic manager on ports 1 and 2.
    for port in ("1", "2"):
        assert (value(found, "railfabric_softswitch_tm_tx_packets_total", port=port) or 0) > 0
        ingress = {"counter": "FabricIngress.ingress_port_counter", "port": port}
        assert (value(found, "railfabric_softswitch_p4_packets_total", **ingress) or 0) > 0
    assert value(found, "railfabric_softswitch_kernel_drops_total", port="3", direction="rx") == 0
