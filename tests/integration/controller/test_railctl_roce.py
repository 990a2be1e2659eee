"""RoCE retransmission against a real controller daemon over loopback gRPC: every switch's
agent connected, tor-r1-b2 reports NAKs on both host ports with sampled NAKs of three flows
that share exactly one link (spine-p1-1 -> tor-r1-b2); `railctl alarms --json` names that
link's transmitting end, `railctl roce` shows the evidence, and clean RoCE traffic on another
ToR raises nothing."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeAlias

import pytest

from controller.daemon.core_planner import load_planner
from railfabric.fabric_counters import roce_index
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import LAB, connect_every_switch, start
from tests.integration.controller.test_railctl_ports import arailctl, until

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_800_000_000_000_000_000
K = control_pb2
Kind: TypeAlias = control_pb2.RoceKind.ValueType
SPINE = "spine-p1-1"
TOR = "tor-r1-b2"
# (requester NIC, responder NIC, responder's port on tor-r1-b2)
FLOWS = [("10.0.0.2", "10.0.0.18", 1), ("10.0.0.10", "10.0.0.19", 2), ("10.0.0.26", "10.0.0.18", 1)]


def via_spine(requester: str, responder: str) -> int:
    """A source port whose data flow requester -> responder crosses SPINE (with every link up,
    as the controller routes once every agent reported carrier)."""
    planner = load_planner(LAB)
    for sport in range(49152, 49152 + 512):
        reply = planner.predict_path(
            admin_pb2.PredictPathRequest(
                src_ip=requester, dst_ip=responder, protocol=17, sport=sport, dport=4791
            )
        )
        if any(h.switch_name == SPINE for h in reply.hops):
            return sport
    raise AssertionError(f"no flow {requester} -> {responder} crosses {SPINE}")


def report(
    i: int, ports: Mapping[int, Mapping[Kind, int]], samples: list[control_pb2.NakSample]
) -> control_pb2.Counters:
    msg = control_pb2.Counters(wall_ns=T0 + i * 2 * S, nak_samples=samples)
    for port, kinds in ports.items():
        msg.ports.add(port=port)
        for kind, per_report in kinds.items():
            msg.roce_cells.append(roce_index(port, 3, kind))
            msg.roce_packets.append(per_report * i)
    return msg


def nak_samples() -> list[control_pb2.NakSample]:
    """A sampled PSN-sequence NAK of each of FLOWS, as the ToR's agent reports them."""
    return [
        control_pb2.NakSample(
            port=port,
            src_ipv4=int(ipaddress.IPv4Address(responder)),
            dst_ipv4=int(ipaddress.IPv4Address(requester)),
            udp_sport=via_spine(requester, responder),
            dst_qp=0x12,
            kind=control_pb2.ROCE_KIND_NAK_PSN_SEQUENCE,
            syndrome=0x60,
        )
        for requester, responder, port in FLOWS
    ]


async def test_naks_on_flows_sharing_one_link_raise_the_alarm_on_it_and_clean_traffic_none(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    samples = nak_samples()
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agents = await connect_every_switch(addr, admin)
        try:
            clean = {p: {K.ROCE_KIND_DATA: 50_000, K.ROCE_KIND_ACK: 5_000} for p in (1, 2, 3, 4)}
            naks = {p: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 100, K.ROCE_KIND_DATA: 10} for p in (1, 2)}
            for i in range(3):
                await agents["tor-r1-b1"].send(counters=report(i, clean, []))
                await agents[TOR].send(counters=report(i, naks, samples if i else []))
            alarms = await until(
                addr,
                ("alarms",),
                lambda d: any(a["kind"] == "roce_retransmission" for a in d["alarms"]),
                codes=(0, 3),
            )
            roce = [a for a in alarms["alarms"] if a["kind"].startswith("roce_")]
            assert [(a["kind"], a["switch_name"], a["port"]) for a in roce] == [
                ("roce_retransmission", SPINE, 3)
            ], roce
            assert "3 of 3 NAK-ing flows" in roce[0]["message"]
            done = await arailctl(addr, "--json", "roce")
            assert done.returncode == 3, done.stderr  # a suspected link
            data = json.loads(done.stdout)
            assert [(s["end"], s["peer"], s["flows"]) for s in data["suspects"]] == [
                ({"switch_name": SPINE, "port": 3}, "tor-r1-b2:3", 3)
            ]
            by_port = {(p["switch_name"], p["port"]): p for p in data["ports"]}
            # 100 NAKs per 2 s report: 50/s on each host port; clean tor-r1-b1 has none.
            assert by_port[(TOR, 1)]["nak_psn_sequence_per_s"] == 50.0
            assert ("tor-r1-b1", 1) not in by_port  # no NAKs or CNPs there
            mine = await arailctl(addr, "--json", "roce", "--switch", "tor-r1-b1")
            rows = json.loads(mine.stdout)["ports"]
            assert {r["port"]: r["data_per_s"] for r in rows} == {p: 25_000.0 for p in (1, 2, 3, 4)}
            done = await arailctl(addr, "roce")
            assert "spine-p1-1:3  tor-r1-b2:3  3/3" in done.stdout, done.stdout
            wrong = await arailctl(addr, "roce", "--switch", "tor-r1-b9")
            assert wrong.returncode == 1
            assert "NOT_FOUND: switch_name: unknown switch 'tor-r1-b9'; did you mean" in (
                wrong.stderr
            ), wrong.stderr
        finally:
            for agent in agents.values():
                await agent.close()
