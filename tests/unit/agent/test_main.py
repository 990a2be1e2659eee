"""The daemon's command line: bad input is refused with a message naming it, and a good one
builds an agent whose first Hello describes the switch."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agent.lldp import build_lldp
from agent.main import Agent, _serve, build_parser, main
from railfabric import __version__
from railfabric.p4info import DEFAULT_P4INFO
from railfabric.v1 import control_pb2, state_pb2
from tests import pki

pytestmark = pytest.mark.unit

BASE = [
    "--switch", "tor-r0-b0",
    "--controller", "127.0.0.1:50051",
    "--target", "127.0.0.1:9559",
    "--device-id", "3",
    "--p4info", str(DEFAULT_P4INFO),
    *pki.flags(pki.switch("tor-r0-b0")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--port-map", "1=a,1=b"], "--port-map: port 1 is mapped twice"),
        (["--port-map", "1=a", "--p4info", "/nonexistent.txt"], "/nonexistent.txt: cannot read"),
        (["--port-map", "1=a", "--lldp-ttl", "0"], "LLDP TTL 0 s"),
        (["--port-map", "1=a", "--election-id", "0"], "election id must be > 0"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BASE, *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ([], "TLS needs --tls-ca, --tls-cert, --tls-key"),
        (
            pki.flags(pki.switch("tor-r0-b1")),
            "names switch/tor-r0-b1, not switch/tor-r0-b0; issue this switch's own",
        ),
        (pki.flags(pki.operator()), "names operator/tests, not switch/tor-r0-b0"),
        (["--insecure", "--metrics-tls"], "--metrics-tls needs the daemon's TLS files"),
    ],
)
def test_an_agent_speaks_only_as_the_switch_its_certificate_names(
    tls: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [a for a in BASE if not a.startswith("--tls") and "/railfabric-test-pki-" not in a]
    assert main([*base, "--port-map", "1=a", *tls]) == 2
    assert message in capsys.readouterr().err


def test_hello_describes_the_switch_before_anything_is_applied() -> None:
    agent = Agent(build_parser().parse_args([*BASE, "--port-map", "2=eth2,1=eth1"]))
    hello = agent.hello()
    assert hello.switch_name == "tor-r0-b0"
    assert hello.agent_version == __version__
    assert hello.target == control_pb2.TARGET_KIND_SOFTSWITCH
    assert hello.device_id == 3
    assert (hello.applied_generation, hello.applied_digest) == (0, "")
    assert [(p.port, p.ifname, p.oper_up) for p in hello.ports] == [
        (1, "eth1", False),
        (2, "eth2", False),
    ]


def test_only_a_switch_neighbours_silence_is_a_one_way_failure() -> None:
    """A server's lldpd going quiet (stopped, busy, never there) must not take its port down:
    the plan says which ports are servers'."""
    agent = Agent(build_parser().parse_args([*BASE, "--port-map", "1=eth1,2=eth2,3=eth3"]))
    mac, s = 0x02AA00000001, 1_000_000_000
    for port in (1, 2, 3):
        agent.carrier[port] = True
        agent.neighbors.receive(port, build_lldp(f"peer-{port}", 9, mac, 4), 0, 0)
    assert agent.one_way_failures(10 * s) == [1, 2, 3]  # no plan yet: every port
    agent.writer.held = state_pb2.DesiredState(
        neighbors=[
            state_pb2.Neighbor(port=1, kind=state_pb2.PEER_KIND_HOST, peer_name="srv-1/nic1"),
            state_pb2.Neighbor(port=2, kind=state_pb2.PEER_KIND_SWITCH, peer_name="spine-1"),
        ]
    )
    assert agent.one_way_failures(10 * s) == [2, 3]
    agent.carrier[3] = False
    agent.lldp_down.add(2)
    assert agent.one_way_failures(10 * s) == []


def test_start_up_objects_are_frozen_out_of_the_collectors_full_scans() -> None:
    """Before its tasks run, the agent freezes what start-up built: a full collection then
    walks only what came after, not ~110,000 objects (40-55 ms of CPU), which made every
    agent stall at once inside a cable cut's failover (bench.telemetry's tail)."""
    agent = Agent(build_parser().parse_args([*BASE, "--port-map", "1=eth1"]))
    seen: dict[str, int] = {}

    async def run() -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["codec_scanned"] = any(o is agent.codec for o in gc.get_objects())

    agent.run = run  # type: ignore[method-assign]
    gc.unfreeze()
    try:
        asyncio.run(_serve(agent))
    finally:
        gc.unfreeze()
    assert seen["frozen"] > 10_000
    assert not seen["codec_scanned"]
