"""`railctl diagnose` ranks root causes, against a real controller daemon over loopback gRPC
fed by fake agents over the public API: with a cable cut (its switches left not converged), a
NAK source localised on another link and a PFC storm on a third switch, the cut cable comes
first with the switches it keeps from converging grouped under it, the NAK source and the
storm are listed with their typed evidence, pages of one finding give the whole ranked list,
and the table shows the ranks."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import connect_every_switch, start
from tests.integration.controller.test_railctl_ports import arailctl, until
from tests.integration.controller.test_railctl_roce import TOR, K, nak_samples, report

pytestmark = pytest.mark.integration

S = 1_000_000_000
CUT = ("tor-r1-b1", 3)
CUT_ID = "link_down:tor-r1-b1:3--spine-p1-1:1"
STORM = ("tor-r2-b1", 1)


def evidence(finding: dict[str, Any]) -> dict[str, float]:
    return {e["name"]: e["value"] for e in finding["evidence"]}


async def test_diagnose_ranks_a_cut_cable_first_and_lists_naks_and_a_storm_with_evidence(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    samples = nak_samples()
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agents = await connect_every_switch(addr, admin)
        try:
            naks = {p: {K.ROCE_KIND_NAK_PSN_SEQUENCE: 100, K.ROCE_KIND_DATA: 10} for p in (1, 2)}
            for i in range(3):
                await agents[TOR].send(counters=report(i, naks, samples if i else []))
            await until(
                addr,
                ("alarms",),
                lambda d: any(a["kind"] == "roce_retransmission" for a in d["alarms"]),
                codes=(0, 3),
            )
            # A PFC storm on a host port of another ToR: the watchdog fired twice in 5 s.
            wall0 = time.time_ns()
            for i, storms in enumerate((0, 2)):
                msg = control_pb2.Counters(wall_ns=wall0 + i * 5 * S)
                msg.ports.add(port=STORM[1], pfc_watchdog_storms=storms, pfc_pause_tx=9 * storms)
                await agents[STORM[0]].send(counters=msg)
            # The cable is cut; the agents apply nothing more, so its ends stay not converged.
            await agents[CUT[0]].send(
                port_status=control_pb2.PortStatus(port=CUT[1], up=False, wall_ns=time.time_ns())
            )
            wanted = {CUT_ID, "pfc_storm:tor-r2-b1:1", "roce_retransmission:spine-p1-1:3"}
            data = await until(
                addr,
                ("diagnose",),
                lambda d: wanted <= {f["id"] for f in d["findings"]},
                codes=(3,),
            )
            findings = data["findings"]
            by_id = {f["id"]: f for f in findings}
            assert not data["healthy"]

            first = findings[0]
            assert (first["rank"], first["kind"], first["id"], first["explained_by"]) == (
                1,
                "link_down",
                CUT_ID,
                "",
            )
            assert first["far_end"] == {"switch_name": "spine-p1-1", "port": 1}
            assert first["affected"]["rails"] == [1] and first["affected"]["tors"] == [CUT[0]]
            assert {"state", "flaps", "down_for"} <= set(evidence(first))
            under = [f for f in findings if f["explained_by"] == CUT_ID]
            assert first["explains"] == len(under)
            # What it explains follows it, and its ends not converging are among them.
            assert findings[1 : 1 + len(under)] == under
            for name in (CUT[0], "spine-p1-1"):
                f = by_id.get(f"not_converged:{name}")
                assert f is None or f["explained_by"] == CUT_ID, f

            nak = by_id["roce_retransmission:spine-p1-1:3"]
            assert nak["explained_by"] == "" and nak["rank"] > 1
            assert nak["far_end"] == {"switch_name": TOR, "port": 3}
            assert evidence(nak)["nak_flows"] == 3 and evidence(nak)["of_flows"] == 3
            assert nak["window_ns"] == 10 * S
            assert nak["affected"]["named_pairs"]
            assert all(p.endswith(f"->{TOR}") for p in nak["affected"]["named_pairs"])

            storm = by_id["pfc_storm:tor-r2-b1:1"]
            assert storm["explained_by"] == "" and storm["severity"] == "SEVERITY_WARNING"
            assert evidence(storm)["pfc_storm"] == 2 and storm["window_ns"] == 5 * S
            assert storm["affected"]["rails"] == [2]
            # Root causes are numbered 1, 2, ... in the order they come.
            roots = [f["rank"] for f in findings if not f["explained_by"]]
            assert roots == list(range(1, len(roots) + 1))

            # Pages of one finding, over gRPC, are the same ranked list.
            whole = await admin.Diagnose(admin_pb2.DiagnoseRequest())
            request = admin_pb2.DiagnoseRequest(page_size=1)
            paged: list[admin_pb2.Finding] = []
            while True:
                reply = await admin.Diagnose(request)
                assert len(reply.findings) <= 1 and not reply.healthy
                paged.extend(reply.findings)
                if not reply.next_page_token:
                    break
                request.page_token = reply.next_page_token
            assert [f.id for f in paged] == [f.id for f in whole.findings]
            assert paged[0].evidence and paged[0].affected.tor_pairs > 0

            done = await arailctl(addr, "diagnose")
            assert done.returncode == 3, done.stderr
            lines = done.stdout.splitlines()
            assert lines[0].startswith("PROBLEMS FOUND: ") and "root causes" in lines[0]
            assert lines[1].split()[:6] == [
                "rank",
                "severity",
                "cause",
                "where",
                "evidence",
                "affected",
            ]
            assert lines[2].split()[:6] == [
                "1",
                "critical",
                "link_down",
                "tor-r1-b1:3",
                "-",
                "spine-p1-1:1",
            ], lines[2]
            assert "nak_flows=3" in done.stdout and "pfc_storm=2" in done.stdout
            done = await arailctl(addr, "diagnose", "--switch", STORM[0])
            assert done.returncode == 3 and "pfc_storm" in done.stdout
            assert "roce_retransmission" not in done.stdout, done.stdout
        finally:
            for agent in agents.values():
                await agent.close()
