"""`railctl lldp` and the cabling alarms against a real controller daemon over loopback gRPC:
an agent reports what its ports hear (a real lldpd frame, a NIC in the wrong rail, a switch, a
silent port); ListLldp, ListInterfaces and the alarms name the peers the same way."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.lldp import NeighborTable, build_lldp
from railfabric.v1 import control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import Agent, start
from tests.integration.controller.test_railctl_ports import arailctl, as_json, railctl

pytestmark = pytest.mark.integration

FRAMES = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "lldpd_1.0.16_frames.json").read_text()
)["frames"]
T0 = 1_800_000_000_000_000_000


def tor_r1_b1_hears() -> control_pb2.Neighbors:
    """Port 1: srv-b1-s1's lldpd as Debian installs it (system name 'vm', port id the NIC's
    MAC: srv-b1-s1/nic1, as planned); port 2: srv-b1-s2's rail-2 NIC (the plan has nic1
    there); port 3: spine-p1-1 port 1, as planned; port 4: nothing."""
    table = NeighborTable()
    table.receive(1, bytes.fromhex(FRAMES["default"]["frame"]), T0, 1)
    wrong_rail = FRAMES["lab"]["frame"].replace("6e696331", "6e696332")  # nic1 -> nic2
    wrong_rail = wrong_rail.replace("7372762d62312d7331", "7372762d62312d7332")  # s1 -> s2
    table.receive(2, bytes.fromhex(wrong_rail), T0, 1)
    table.receive(3, build_lldp("spine-p1-1", 1, 0x02AA00000001, 4), T0, 1)
    return table.report(1)


def lldp_json(done: subprocess.CompletedProcess[str]) -> Any:
    """`railctl --json lldp`: exit 3 when a port is miswired, with the answer all the same."""
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


async def until(
    addr: str, args: tuple[str, ...], ok: Callable[[Any], bool], within_s: float = 20
) -> Any:
    """`railctl --json ARGS` until `ok` holds (agent messages reach the core asynchronously
    to the admin API)."""
    deadline = time.monotonic() + within_s
    while not ok(data := lldp_json(await arailctl(addr, "--json", *args))):
        if time.monotonic() > deadline:
            raise AssertionError(f"railctl {' '.join(args)}: {data}")
        await asyncio.sleep(0.1)
    return data


async def test_lldp_lists_every_port_against_the_plan_and_alarms_name_the_wrong_nic(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    async with pki.channel(addr, pki.switch("tor-r1-b1")) as channel:
        agent = Agent(channel)
        ports = [control_pb2.PortInfo(port=p, ifname=f"rfa{p}", oper_up=True) for p in range(1, 5)]
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1", ports=ports))
        state = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=state.generation, digest=state.digest)
        )
        await agent.send(neighbors=tor_r1_b1_hears())
        data = await until(addr, ("lldp", "tor-r1-b1"), lambda d: d["ports"][0]["seen"] is not None)
        by_port = {p["port"]: p for p in data["ports"]}
        assert {p: row["status"] for p, row in by_port.items()} == {
            1: "LLDP_STATUS_OK",
            2: "LLDP_STATUS_MISWIRED",
            3: "LLDP_STATUS_OK",
            4: "LLDP_STATUS_SILENT",
        }
        p1 = by_port[1]
        nic1 = {"kind": "PEER_KIND_HOST", "name": "srv-b1-s1", "port": 0, "nic": "nic1"}
        assert p1["planned"] == p1["seen"] == nic1
        assert (p1["chassis_id"], p1["port_id"], p1["ttl_s"]) == (
            "06:00:00:01:00:01",
            "06:00:00:01:00:01",
            120,
        )
        assert p1["last_seen_wall_ns"] == T0
        assert by_port[2]["seen"] == {
            "kind": "PEER_KIND_HOST",
            "name": "srv-b1-s2",
            "port": 0,
            "nic": "nic2",
        }
        assert by_port[3]["seen"] == by_port[3]["planned"]
        assert by_port[4]["seen"] is None and by_port[4]["port_id"] == ""

        # The alarm: exactly one, on the port where the NIC is, naming where the plan has it.
        (alarm,) = as_json(railctl(addr, "alarms", "--json"))["alarms"]
        assert (alarm["id"], alarm["kind"], alarm["severity"]) == (
            "miswire:tor-r1-b1:2",
            "miswire",
            "SEVERITY_CRITICAL",
        )
        assert alarm["message"] == (
            "srv-b1-s2 nic2 is cabled to tor-r1-b1 port 2; the plan says tor-r2-b1 port 2"
        )

        # ListInterfaces names the heard peer with the same function.
        interfaces = as_json(railctl(addr, "interfaces", "tor-r1-b1", "--json"))["interfaces"]
        assert [i["lldp_peer"] for i in interfaces] == [
            nic1,
            by_port[2]["seen"],
            by_port[3]["seen"],
            None,
        ]

        # The table, exit 3 for the miswired port; every switch without a name.
        done = railctl(addr, "lldp", "tor-r1-b1")
        assert done.returncode == 3, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "4 ports: 2 ok, 1 miswired, 1 silent, 0 unplanned"
        assert lines[1].split()[:5] == ["switch", "port", "status", "planned", "heard"]
        assert lines[2].split()[:7] == [
            "tor-r1-b1",
            "1",
            "ok",
            "srv-b1-s1/nic1",
            "srv-b1-s1/nic1",
            "06:00:00:01:00:01",
            "06:00:00:01:00:01",
        ]
        assert lines[3].split()[:5] == [
            "tor-r1-b1",
            "2",
            "MISWIRED",
            "srv-b1-s2/nic1",
            "srv-b1-s2/nic2",
        ]
        assert lines[5].split()[:5] == ["tor-r1-b1", "4", "silent", "spine-p1-2:1", "-"]
        every = lldp_json(railctl(addr, "--json", "lldp"))["ports"]
        assert len(every) == 24  # 6 switches x 4 planned ports
        assert [(p["switch_name"], p["port"]) for p in every] == sorted(
            (p["switch_name"], p["port"]) for p in every
        )

        # Put right: the alarm clears, railctl exits 0.
        fixed = tor_r1_b1_hears()
        fixed.neighbors[1].system_name, fixed.neighbors[1].port_id = "srv-b1-s2", "nic1"
        await agent.send(neighbors=fixed)
        await until(addr, ("alarms",), lambda d: d["alarms"] == [])
        assert railctl(addr, "lldp", "tor-r1-b1").returncode == 0

        unknown = railctl(addr, "lldp", "tor-r1-b9")
        assert unknown.returncode == 1
        assert "NOT_FOUND" in unknown.stderr and "did you mean 'tor-r1-b2'" in unknown.stderr
