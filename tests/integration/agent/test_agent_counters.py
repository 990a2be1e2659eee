"""The agent's Counters from a real softswitch process: drops by reason on the port fabric.p4
names (TTL and non-IPv4 drops on the ingress port, tail drops at a full egress queue on the
egress port) and the egress queue's depth and watermark. Run as softswitch (every reason,
bytes) and as bmv2 (`--target-kind bmv2` against the same softswitch: only the reasons bmv2's
program counts, the watermark in frames from the histogram, no depth): what bmv2 cannot report
is absent, never 0."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric.fabric_counters import PIPELINE_REASONS, DropReason
from railfabric.p4info import DEFAULT_P4INFO
from railfabric.v1 import control_pb2
from tests import pki
from tests.conftest import Netns, Processes
from tests.integration.agent.test_agent_softswitch import _controller, _until
from tests.integration.softswitch.fabric_helpers import Host, build_hosts, start_softswitch
from tests.unit.agent.samples import tor_state

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
RATE_MBPS = 2  # port 3 drains 250 frames of 1,000 bytes a second
BURST = 900  # frames: more than the 512 KiB egress buffer holds
HOST = "10.0.0.3"  # tor_state routes it to port 3


def frame(*, ttl: int = 64, size: int = 1000) -> bytes:
    pkt = Ether(dst="02:aa:00:00:00:01", src="02:00:00:00:10:01") / IP(dst=HOST, ttl=ttl) / UDP()
    return bytes(pkt) + bytes(size - len(pkt))


# 0x88B6 (IEEE local experimental): 0x88B5 is the link-probe ethertype, punted, not dropped.
NOT_IPV4 = bytes(Ether(dst="02:aa:00:00:00:01", type=0x88B6)) + bytes(60)


def start_agent(
    processes: Processes,
    tmp_path: Path,
    target: str,
    controller: str,
    *,
    ports: dict[int, str],
    kind: str,
) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"agent-{kind}.log").open("ab")
    return processes.start(
        [
            str(BIN / "railfabric-agent"),
            "--switch", "tor-r0-b0",
            "--controller", controller,
            "--target", target,
            "--device-id", "1",
            "--port-map", ",".join(f"{p}={n}" for p, n in ports.items()),
            "--p4info", str(DEFAULT_P4INFO),
            "--election-id", "10",
            "--target-kind", kind,
            "--counters-interval", "0.3",
            # TLS to the controller; the target is fabric_helpers' plaintext softswitch.
            *pki.flags(pki.switch("tor-r0-b0")), "--target-insecure",
        ],
        stdout=log,
        stderr=log,
    )  # fmt: skip


def send(host: Host, frames: list[bytes]) -> None:
    for data in frames:
        while True:
            try:
                host.send(data)
                break
            except BlockingIOError:
                pass


def reasons(counters: control_pb2.PortCounters) -> dict[DropReason, int]:
    return {DropReason(d.reason): d.packets for d in counters.drops_by_reason}


class Seen:
    """Every PortCounters the controller was sent, per port, as they arrive."""

    def __init__(self) -> None:
        self.reports: dict[int, list[control_pb2.PortCounters]] = {}
        self._last: control_pb2.Counters | None = None

    def take(self, counters: control_pb2.Counters) -> None:
        if counters is self._last or not counters.ports:
            return
        self._last = counters
        for port in counters.ports:
            self.reports.setdefault(port.port, []).append(port)

    def last(self, port: int) -> control_pb2.PortCounters:
        return self.reports[port][-1]


async def run(
    kind: str, netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> Seen:
    """Program the switch, send TTL-expired and non-IPv4 frames into port 1 and a burst to
    port 3 that overflows its queue; the reports until the queue has drained."""
    switch_ifs, hosts = build_hosts(netns, [1, 2, 3])
    try:
        target = await start_softswitch(
            processes, free_port(), switch_ifs, "--port-rate-mbps", str(RATE_MBPS)
        )
        controller = f"127.0.0.1:{free_port()}"
        seen = Seen()
        async with _controller(controller, tor_state(1)) as ctrl:

            async def record() -> None:  # every report (the servicer keeps only the last)
                while True:
                    seen.take(ctrl.counters)
                    await asyncio.sleep(0.02)

            recorder = asyncio.create_task(record(), name="test-counters-recorder")
            try:
                start_agent(processes, tmp_path, target, controller, ports=switch_ifs, kind=kind)
                assert (await ctrl.next("applied")).applied.generation == 1
                await _until(lambda: 3 in seen.reports)
                send(hosts[1], [frame(ttl=1)] * 5 + [NOT_IPV4] * 3)
                send(hosts[1], [frame() for _ in range(BURST)])
                await _until(lambda: reasons(seen.last(1)).get(DropReason.TTL_EXPIRED) == 5)
                # The queue drains at the port rate; then a report shows it empty.
                await asyncio.sleep(BURST / (RATE_MBPS * 125))
                await _until(
                    lambda: (
                        seen.last(3).tx_packets >= 500
                        and not seen.last(3).queue_watermark_bytes
                        and not seen.last(3).queue_watermark_packets
                    ),
                    within_s=30,
                )
            finally:
                recorder.cancel()
        return seen
    finally:
        for host in hosts.values():
            host.close()


async def test_softswitch_reports_every_reason_and_its_queue_in_bytes(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    seen = await run("softswitch", netns, processes, free_port, tmp_path)
    every = set(DropReason) - {DropReason.UNSPECIFIED}
    for port in (1, 2, 3):
        assert set(reasons(seen.last(port))) == every  # listed, at 0 when nothing dropped
    ingress, egress = reasons(seen.last(1)), reasons(seen.last(3))
    assert ingress[DropReason.TTL_EXPIRED] == 5
    assert ingress[DropReason.NOT_IPV4] >= 3  # and whatever else the kernel sent
    assert ingress[DropReason.QUEUE_FULL] == 0
    # 512 KiB hold 524 frames of 1,000 bytes: the rest of the burst was tail-dropped at port 3.
    assert egress[DropReason.QUEUE_FULL] > 200
    assert egress[DropReason.TTL_EXPIRED] == 0
    assert seen.last(3).drops >= egress[DropReason.QUEUE_FULL]
    reports = seen.reports[3]
    assert all(
        r.HasField("queue_depth_bytes") and r.HasField("queue_watermark_bytes") for r in reports
    )
    assert not any(r.HasField("queue_depth_packets") for r in reports)
    assert not any(r.HasField("queue_watermark_packets") for r in reports)
    highest = max(r.queue_watermark_bytes for r in reports)
    assert 400_000 < highest <= 512 * 1024
    assert max(r.queue_depth_bytes for r in reports) > 0
    # The watermark is the highest since the previous report: back to 0 once drained.
    last = reports[-1]
    assert (last.queue_depth_bytes, last.queue_watermark_bytes) == (0, 0)


async def test_bmv2_reports_only_what_its_program_counts(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    """The agent told the target is bmv2 asks only for what bmv2 can answer: the reasons its
    program sets (softswitch counted tail drops too: they are not reported) and the watermark
    in frames from the histogram counter; no register, no depth."""
    seen = await run("bmv2", netns, processes, free_port, tmp_path)
    for port in (1, 2, 3):
        assert set(reasons(seen.last(port))) == set(PIPELINE_REASONS)
    assert reasons(seen.last(1))[DropReason.TTL_EXPIRED] == 5
    assert DropReason.QUEUE_FULL not in reasons(seen.last(3))
    assert seen.last(3).drops > 0  # the total still counts them
    reports = seen.reports[3]
    assert all(r.HasField("queue_watermark_packets") for r in reports)
    for field in ("queue_depth_packets", "queue_depth_bytes", "queue_watermark_bytes"):
        assert not any(r.HasField(field) for r in reports), field
    assert max(r.queue_watermark_packets for r in reports) == 63  # 63 or more frames behind
