"""railctl's per-port commands against a real controller daemon over loopback gRPC: what an
agent reported (Hello ports, PortStatus, Counters) in `interfaces`, `counters`, `pfc` and `ecn`;
the `tables` round trip through the agent's session (answered, unanswered, session gone);
`--json` anywhere on the line; and quiet output into a pipe that closes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.codec import Codec
from agent.p4client import P4Target
from agent.translate import Op, RouteEntry, Update
from railfabric.fabric_counters import roce_index
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import control_pb2
from tests import pki
from tests.conftest import Netns, Processes
from tests.integration.agent.test_agent_softswitch import _wait_listening
from tests.integration.controller.test_controller_daemon import LAB, Agent, start

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
RAILCTL = str(BIN / "railctl")
# The railctl timestamp: date, milliseconds and zone.
STAMP = re.compile(r"\b20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC\b")
T0 = 1_800_000_000_000_000_000


def operator_env() -> dict[str, str]:
    """railctl's environment: this one's, and an operator's certificate."""
    return {**os.environ, **pki.railctl_env()}


def railctl(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAILCTL, "--controller", addr, *args],
        capture_output=True,
        env=operator_env(),
        text=True,
        timeout=60,
        check=False,
    )


async def arailctl(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    """railctl in the background, so the test's agent can answer what it asks."""
    proc = await asyncio.create_subprocess_exec(
        RAILCTL,
        "--controller",
        addr,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=operator_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode())


def as_json(done: subprocess.CompletedProcess[str], codes: tuple[int, ...] = (0,)) -> Any:
    """The answer of a `--json` run that exited with one of `codes`."""
    assert done.returncode in codes, done.stderr
    return json.loads(done.stdout)


def timeless(data: Any) -> Any:
    """`data` without its times (a link never observed is "since" now, a moving target)."""
    if isinstance(data, dict):
        return {k: timeless(v) for k, v in data.items() if not k.endswith("_wall_ns")}
    if isinstance(data, list):
        return [timeless(v) for v in data]
    return data


def port_counters(report_wall_ns: int, scale: int) -> control_pb2.Counters:
    """tor-r1-b1's counters at one report: port 1 busy, port 3 pausing, port 4 quiet."""
    return control_pb2.Counters(
        wall_ns=report_wall_ns,
        ports=[
            control_pb2.PortCounters(
                port=1,
                rx_packets=100 * scale,
                rx_bytes=10_000 * scale,
                tx_packets=50 * scale,
                tx_bytes=5_000 * scale,
                drops=7 * scale,
                drops_by_reason=[
                    control_pb2.DropCount(
                        reason=control_pb2.DROP_REASON_QUEUE_FULL, packets=5 * scale
                    ),
                    control_pb2.DropCount(reason=control_pb2.DROP_REASON_NO_ROUTE, packets=0),
                    control_pb2.DropCount(
                        reason=control_pb2.DROP_REASON_TTL_EXPIRED, packets=2 * scale
                    ),
                ],
                ecn_marks=11 * scale,
                queue_depth_bytes=1500,
                queue_watermark_bytes=9000 * scale,
            ),
            control_pb2.PortCounters(
                port=3, tx_packets=10, pfc_pause_tx=300 * scale, pfc_pause_rx=20, ecn_marks=1
            ),
            control_pb2.PortCounters(port=4),
        ],
        # Port 1's CNPs (class 6) and data (class 3).
        roce_cells=[
            roce_index(1, 3, control_pb2.ROCE_KIND_DATA),
            roce_index(1, 6, control_pb2.ROCE_KIND_CNP),
        ],
        roce_packets=[90 * scale, 40 * scale],
    )


async def until(
    addr: str,
    args: tuple[str, ...],
    ok: Callable[[Any], bool],
    within_s: float = 20,
    codes: tuple[int, ...] = (0,),
) -> Any:
    """`railctl --json ARGS` until `ok` holds for its answer (agent messages are inputs the
    controller takes in order, but asynchronously to the admin API); `codes`: the exit
    statuses that still answer (railctl roce exits 3 when a link is suspected)."""
    deadline = time.monotonic() + within_s
    while True:
        data = as_json(await arailctl(addr, "--json", *args), codes)
        if ok(data):
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"railctl {' '.join(args)}: {data}")
        await asyncio.sleep(0.1)


async def test_reported_ports_and_counters_in_interfaces_counters_pfc_and_ecn(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    async with pki.channel(addr, pki.switch("tor-r1-b1")) as channel:
        agent = Agent(channel)
        ports = [
            control_pb2.PortInfo(port=1, ifname="rfa1", oper_up=True),
            control_pb2.PortInfo(port=3, ifname="rfa3", oper_up=False),
            control_pb2.PortInfo(port=4, ifname="rfa4", oper_up=True),
        ]
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1", ports=ports))
        state = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=state.generation, digest=state.digest)
        )
        # One report: counters, no rates yet.
        await agent.send(counters=port_counters(T0, 1))
        first = await until(
            addr,
            ("counters", "tor-r1-b1"),
            lambda d: d["interfaces"][0]["counters"] is not None,
        )
        one = first["interfaces"][0]
        assert one["counters"]["rx_packets"] == 100 and one["rx_packets_per_s"] is None

        # The second report, 2 s of agent time later: rates over those 2 s. Port 3 comes up.
        await agent.send(counters=port_counters(T0 + 2_000_000_000, 3))
        await agent.send(port_status=control_pb2.PortStatus(port=3, up=True, wall_ns=T0))
        data = await until(
            addr,
            ("counters", "tor-r1-b1"),
            lambda d: (
                d["interfaces"][0]["rx_packets_per_s"] is not None
                and d["interfaces"][2]["oper"] == "OPER_STATE_UP"
            ),
        )
        by_port = {i["port"]: i for i in data["interfaces"]}
        assert sorted(by_port) == [1, 2, 3, 4]
        p1 = by_port[1]
        assert (p1["ifname"], p1["oper"], p1["speed_mbps"]) == ("rfa1", "OPER_STATE_UP", 100_000)
        assert p1["plan_peer"] == {
            "kind": "PEER_KIND_HOST",
            "name": "srv-b1-s1",
            "port": 0,
            "nic": "nic1",
        }
        assert p1["lldp_peer"] is None
        assert p1["counters_wall_ns"] == T0 + 2_000_000_000
        assert p1["rate_window_ns"] == 2_000_000_000
        # (300 - 100) packets and (30000 - 10000) bytes over 2 s.
        assert (p1["rx_packets_per_s"], p1["rx_bits_per_s"]) == (100.0, 80_000.0)
        assert (p1["tx_packets_per_s"], p1["tx_bits_per_s"]) == (50.0, 40_000.0)
        assert p1["cnp_per_s"] == 40.0  # (120 - 40) CNPs over 2 s
        assert by_port[3]["cnp_per_s"] == 0.0
        assert p1["roce"] == [  # the last report's, by class and kind
            {"traffic_class": 3, "kind": "ROCE_KIND_DATA", "packets": 270},
            {"traffic_class": 6, "kind": "ROCE_KIND_CNP", "packets": 120},
        ]
        assert by_port[3]["roce"] == []
        c1 = p1["counters"]
        assert (c1["rx_packets"], c1["drops"], c1["ecn_marks"]) == (300, 21, 33)
        assert c1["drops_by_reason"] == [
            {"reason": "DROP_REASON_QUEUE_FULL", "packets": 15},
            {"reason": "DROP_REASON_NO_ROUTE", "packets": 0},
            {"reason": "DROP_REASON_TTL_EXPIRED", "packets": 6},
        ]
        # Reported, and not reported by this target: explicit zero vs null.
        assert (c1["queue_depth_bytes"], c1["queue_watermark_bytes"]) == (1500, 27_000)
        assert (c1["queue_depth_packets"], c1["queue_watermark_packets"]) == (None, None)
        assert (c1["pfc_pause_tx"], c1["pfc_watchdog_storms"]) == (0, 0)
        # Never reported by the agent: unknown, no counters; planned speed and peer all the same.
        p2 = by_port[2]
        assert (p2["oper"], p2["ifname"], p2["counters"]) == ("OPER_STATE_UNKNOWN", "", None)
        assert p2["plan_peer"]["name"] == "srv-b1-s2" and p2["rx_packets_per_s"] is None
        p3 = by_port[3]
        assert p3["plan_peer"] == {
            "kind": "PEER_KIND_SWITCH",
            "name": "spine-p1-1",
            "port": 1,
            "nic": "",
        }
        assert p3["counters"]["pfc_pause_tx"] == 900 and p3["counters"]["drops_by_reason"] == []
        assert by_port[4]["counters"]["rx_packets"] == 0  # reported zero, shown as zero

        # --json after the command, --port, and the same shape as `interfaces SW --port`.
        only = as_json(railctl(addr, "counters", "tor-r1-b1", "--port", "1", "--json"))
        assert only == {"interfaces": [p1]}
        assert as_json(railctl(addr, "interfaces", "tor-r1-b1", "--port", "1", "--json")) == only
        every = as_json(railctl(addr, "interfaces", "--json"))["interfaces"]
        assert [(i["switch_name"], i["port"]) for i in every] == sorted(
            (i["switch_name"], i["port"]) for i in every
        )
        assert len(every) == 24  # 6 switches x 4 ports

        # The tables: dates with zones, n/a where the target does not count, "-" for not yet.
        done = railctl(addr, "counters", "tor-r1-b1")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert STAMP.search(lines[0]) and "rates over 2.00 s" in lines[0], lines[0]
        row1 = next(line.split() for line in lines if line.startswith("1 "))
        assert row1[:5] == ["1", "300", "30000", "150", "15000"] and row1[5:7] == ["100", "50"]
        assert row1[7:9] == ["80k", "40k"] and row1[-2:] == ["1.5kB", "27kB"]
        reasons = lines[lines.index("drops by reason") + 1 :]
        assert reasons[0].split()[:4] == ["port", "no_route", "ttl_expired", "acl"]
        assert reasons[1].split()[:4] == ["1", "0", "6", "n/a"]
        assert reasons[2].split()[:4] == ["2", "-", "-", "-"]  # no report: not yet
        assert reasons[3].split()[:4] == ["3", "n/a", "n/a", "n/a"]  # none counted
        done = railctl(addr, "interfaces", "tor-r1-b1")
        assert done.returncode == 0, done.stderr
        rows = {line.split()[1]: line for line in done.stdout.splitlines()[1:]}
        assert "srv-b1-s1/nic1" in rows["1"] and "queue_full 15, ttl_expired 6" in rows["1"]
        assert rows["2"].split()[2:4] == ["-", "unknown"]
        assert "spine-p1-1:1" in rows["3"]

        # Fabric summaries: the top talkers of pauses and marks.
        pfc = as_json(railctl(addr, "pfc", "--json"))
        assert pfc["totals"] == {"pfc_pause_tx": 900, "pfc_pause_rx": 20, "pfc_watchdog_storms": 0}
        assert pfc["ports_reporting"] == 3
        assert [(p["switch_name"], p["port"]) for p in pfc["top"]] == [("tor-r1-b1", 3)]
        assert pfc["top"][0]["pfc_watchdog_drops"] is None  # not counted by this target
        ecn = as_json(railctl(addr, "--json", "ecn", "--top", "1"))
        assert ecn["totals"] == {"ecn_marks": 34, "tx_packets": 160, "cnp_per_s": 40.0}
        assert [
            (p["port"], p["ecn_marks"], p["cnp_per_s"], p["queue_watermark_bytes"])
            for p in ecn["top"]
        ] == [(1, 33, 40.0, 27_000)]
        done = railctl(addr, "pfc")
        assert done.returncode == 0 and "900 pauses sent, 20 received" in done.stdout
        pfc_row = r"^tor-r1-b1\s+3\s+spine-p1-1:1\s+900\s+20\s+0\s+n/a\s+n/a\s+20\d\d-"
        assert re.search(pfc_row, done.stdout, re.M), done.stdout
        done = railctl(addr, "ecn")
        ecn_row = r"^tor-r1-b1\s+1\s+srv-b1-s1/nic1\s+33\s+150\s+22\.00%\s+40\.0\s+27kB\s"
        assert re.search(ecn_row, done.stdout, re.M), done.stdout

        # Wrong names say what there is.
        done = railctl(addr, "counters", "tor-r1-b1x")
        assert done.returncode == 1
        assert "NOT_FOUND: unknown switch 'tor-r1-b1x'; did you mean 'tor-r1-b1'?" in done.stderr
        done = railctl(addr, "counters", "tor-r1-b1", "--port", "9")
        assert done.returncode == 1
        assert "tor-r1-b1 has no port 9 (ports: 1, 2, 3, 4)" in done.stderr
        await agent.outbox.put(None)


def test_json_anywhere_on_the_line_and_timestamps_with_date_and_zone(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = asyncio.run(start(processes, free_port(), tmp_path / "state"))
    for command in ("links", "switches", "events", "alarms", "topology", "interfaces", "pfc"):
        before = railctl(addr, "--json", command)
        after = railctl(addr, command, "--json")
        assert before.returncode == after.returncode == 0, (command, before.stderr)
        if command != "events":  # the second run's listing has the first one's events too
            assert timeless(json.loads(before.stdout)) == timeless(json.loads(after.stdout))
    # Explicit false and zero fields: nobody is connected.
    switches = as_json(railctl(addr, "switches", "--json"))["switches"]
    assert all(s["connected"] is False and s["applied_generation"] == 0 for s in switches)
    # MACs and IPv4 as strings in the routes.
    state = as_json(railctl(addr, "routes", "tor-r1-b1", "--json"))
    assert state["ports"][0]["mac"] == "02:00:00:01:00:01"
    assert {r["prefix"] for r in state["routes"]} == {"10.0.0.2/32", "10.0.0.3/32"}
    assert any(n["peer_ipv4"] == "10.0.0.2" for n in state["neighbors"])
    # Offline and online `path`: one shape. No agent has reported a link, so the controller
    # routes nothing off the ToR; offline, its uplinks are down for the same answer.
    path = ["10.0.0.2", "10.0.0.18", "--sport", "49152", "--qp", "7"]
    online = railctl(addr, "path", *path, "--json")
    down = ["--down", "tor-r1-b1:3", "--down", "tor-r1-b1:4"]
    offline = railctl(addr, "--json", "path", str(LAB), *path, *down)
    assert online.returncode == offline.returncode == 1, (online.stderr, offline.stderr)
    live, planned = json.loads(online.stdout), json.loads(offline.stdout)
    assert (
        live["flow"]
        == planned["flow"]
        == {
            "src_ip": "10.0.0.2",
            "dst_ip": "10.0.0.18",
            "protocol": 17,
            "sport": 49152,
            "dport": 4791,
            "dst_qp": 7,
        }
    )
    assert live["error"] == planned["error"] == "tor-r1-b1 has no route to 10.0.0.18: dropped"
    assert live["delivered_to"] == planned["delivered_to"] == ""
    # The controller knows why it avoids the uplinks (nobody reported them); the same keys.
    assert [set(h) for h in live["hops"]] == [set(h) for h in planned["hops"]]
    assert [h["switch_name"] for h in live["hops"]] == [h["switch_name"] for h in planned["hops"]]
    assert {a["port"] for a in live["hops"][0]["avoided"]} == {3, 4}
    assert set(live["hops"][0]["avoided"][0]) == {"port", "peer", "state", "reason"}
    delivered = as_json(railctl(addr, "path", str(LAB), *path, "--json"))
    assert delivered["delivered_to"] == "srv-b2-s1/nic1" and delivered["error"] == ""
    assert set(delivered["hops"][0]) == {
        "switch_name", "ingress_port", "egress_port", "group_id", "live_members",
        "member_index", "hash", "avoided",
    }  # fmt: skip
    # Links never observed have no "since" (the dates of the others: the interfaces test).
    done = railctl(addr, "links")
    assert done.returncode == 0
    assert all(" unknown  -  " in line for line in done.stdout.splitlines()[1:]), done.stdout


async def test_tables_round_trip_through_the_agents_session(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    # No session: UNAVAILABLE, at once.
    done = await arailctl(addr, "tables", "spine-p1-1")
    assert done.returncode == 1
    assert "UNAVAILABLE" in done.stderr and "spine-p1-1 has no agent session" in done.stderr
    done = await arailctl(addr, "tables", "spine-p1-9")
    assert "NOT_FOUND" in done.stderr and "did you mean" in done.stderr

    async with pki.channel(addr, pki.switch("spine-p1-1")) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name="spine-p1-1"))
        state = (await agent.read()).desired_state
        await agent.send(
            applied=control_pb2.Applied(generation=state.generation, digest=state.digest)
        )

        # Answered: the report the agent sends, with its request id, is what railctl shows.
        asked = asyncio.create_task(arailctl(addr, "tables", "spine-p1-1", "--json"))
        request = (await agent.read()).read_tables
        assert request.request_id > 0
        entries = [
            control_pb2.InstalledEntry(
                table="FabricIngress.routing_v4",
                key="ipv4_dst=10.0.0.0/29",
                action="FabricIngress.set_next_id(next_id=1)",
                status=control_pb2.ENTRY_STATUS_MATCH,
            ),
            control_pb2.InstalledEntry(
                table="FabricIngress.routing_v4",
                key="ipv4_dst=10.0.0.8/29",
                status=control_pb2.ENTRY_STATUS_MISSING,
                wanted="FabricIngress.set_next_id(next_id=2)",
            ),
        ]
        # A stale answer first (a request that gave up): ignored.
        stale = control_pb2.TablesReport(request_id=request.request_id + 1000)
        await agent.send(tables=stale)
        await agent.send(
            tables=control_pb2.TablesReport(
                request_id=request.request_id,
                switch_name="spine-p1-1",
                read_wall_ns=T0,
                entries=entries,
            )
        )
        done = await asked
        assert done.returncode == 3, done.stderr  # a difference
        report = json.loads(done.stdout)
        assert report["request_id"] == request.request_id and report["read_wall_ns"] == T0
        next_1, next_2 = entries[0].action, entries[1].wanted
        assert [(e["key"], e["status"], e["action"], e["wanted"]) for e in report["entries"]] == [
            ("ipv4_dst=10.0.0.0/29", "ENTRY_STATUS_MATCH", next_1, ""),
            ("ipv4_dst=10.0.0.8/29", "ENTRY_STATUS_MISSING", "", next_2),
        ]

        # The table, differences only.
        asked = asyncio.create_task(arailctl(addr, "tables", "spine-p1-1", "--diff-only"))
        request = (await agent.read()).read_tables
        await agent.send(
            tables=control_pb2.TablesReport(
                request_id=request.request_id, switch_name="spine-p1-1", read_wall_ns=T0,
                entries=entries,
            )
        )  # fmt: skip
        done = await asked
        assert done.returncode == 3
        head, columns, row, *rest = done.stdout.splitlines()
        assert STAMP.search(head) and "2 entries, 1 match, 1 missing" in head, head
        assert columns.split() == ["table", "key", "status", "installed", "wanted"]
        assert row.split() == [
            "FabricIngress.routing_v4", "ipv4_dst=10.0.0.8/29", "MISSING", "-",
            "FabricIngress.set_next_id(next_id=2)",
        ]  # fmt: skip
        assert rest == []

        # The target could not be read: the agent's error, exit 1.
        asked = asyncio.create_task(arailctl(addr, "tables", "spine-p1-1"))
        request = (await agent.read()).read_tables
        await agent.send(
            tables=control_pb2.TablesReport(
                request_id=request.request_id, switch_name="spine-p1-1",
                error="reading the target back failed: not connected",
            )
        )  # fmt: skip
        done = await asked
        assert done.returncode == 1 and "not connected" in done.stdout

        # Unanswered: DEADLINE_EXCEEDED after the controller's 5 s.
        started = time.monotonic()
        done = await arailctl(addr, "tables", "spine-p1-1")
        assert done.returncode == 1 and "DEADLINE_EXCEEDED" in done.stderr, done.stderr
        assert "did not answer" in done.stderr and 4.5 < time.monotonic() - started < 8
        assert (await agent.read()).HasField("read_tables")

        # The session ends while the read waits: UNAVAILABLE, without waiting for the deadline.
        asked = asyncio.create_task(arailctl(addr, "tables", "spine-p1-1"))
        assert (await agent.read()).HasField("read_tables")
        started = time.monotonic()
        await agent.outbox.put(None)
        done = await asked
        assert done.returncode == 1 and "UNAVAILABLE" in done.stderr, done.stderr
        assert "session ended" in done.stderr and time.monotonic() - started < 4


@pytest.mark.parametrize(
    "args", [["interfaces"], ["--json", "interfaces"], ["counters", "tor-r1-b1", "--json"]]
)
def test_into_head_through_a_real_pipe_is_quiet(
    args: list[str], processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    """`railctl interfaces | head -1`: one line, exit 0 (the pipeline's), no traceback."""
    addr = asyncio.run(start(processes, free_port(), tmp_path / "state"))
    done = subprocess.run(
        f"set -o pipefail; {RAILCTL} --controller {addr} {' '.join(args)} | head -1",
        shell=True,
        executable="/bin/bash",
        env=operator_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr == "" and len(done.stdout.splitlines()) == 1, done
    # railctl itself: 0 when head read all it needed, 1 when the pipe closed on it first.
    assert done.returncode in (0, 1)
    plain = subprocess.run(
        f"{RAILCTL} --controller {addr} {' '.join(args)} | head -1",
        shell=True,
        executable="/bin/bash",
        env=operator_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert plain.returncode == 0 and plain.stderr == ""
    # The reader already gone (head exited before railctl wrote): every write fails.
    read, write = os.pipe()
    os.close(read)
    try:
        closed = subprocess.run(
            [RAILCTL, "--controller", addr, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            env=operator_env(),
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert closed.returncode == 1 and closed.stderr == "", closed.stderr


async def _switch_converged(addr: str, name: str) -> None:
    await until(
        addr,
        ("switches",),
        lambda d: any(
            s["info"]["name"] == name and s["connected"] and s["converged"] for s in d["switches"]
        ),
        within_s=30,
    )


@contextlib.asynccontextmanager
async def _intruder(addr: str) -> AsyncIterator[P4Target]:
    """Another P4Runtime client (with the switch's certificate: the softswitch takes writes
    from no other) with a higher election id than the agent's: it takes the switch over (the
    agent, now a backup, cannot repair what this one changes)."""
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    target = P4Target(addr, 1, 1000, codec, tls=pki.switch("tor-r1-b1"))

    async def nothing(*_: object) -> None:
        return None

    task = asyncio.create_task(target.run(nothing, nothing), name="test-intruder")
    try:
        async with asyncio.timeout(10):
            await target.primary.wait()
        yield target
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_tables_and_counters_through_a_real_agent_and_softswitch(
    netns: Netns, processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    wire = netns.add("wire")
    switch_links = {p: f"rf{netns.tag}s{p}" for p in (1, 2, 3, 4)}
    for port, name in switch_links.items():
        netns.veth(name, None, f"rf{netns.tag}w{port}", wire)
    target = f"127.0.0.1:{free_port()}"
    argv = [str(BIN / "railfabric-softswitch"), "--device-id", "1", "--grpc-addr", target]
    argv += pki.flags(pki.switch("tor-r1-b1"))
    for port, name in switch_links.items():
        argv += ["-i", f"{port}@{name}"]
    log = (tmp_path / "softswitch.log").open("wb")
    processes.start(argv, stdout=log, stderr=log)
    await asyncio.to_thread(_wait_listening, target)
    agent_log = (tmp_path / "agent.log").open("wb")
    processes.start(
        [
            str(BIN / "railfabric-agent"),
            "--switch", "tor-r1-b1",
            "--controller", addr,
            "--target", target,
            "--device-id", "1",
            "--port-map", ",".join(f"{p}={n}" for p, n in switch_links.items()),
            "--election-id", "10",
            "--lldp-interval", "0.5",
            "--counters-interval", "0.5",
            *pki.flags(pki.switch("tor-r1-b1")),
        ],
        stdout=agent_log,
        stderr=agent_log,
    )  # fmt: skip
    await _switch_converged(addr, "tor-r1-b1")

    # Everything the agent installed reads back as wanted.
    done = await arailctl(addr, "--json", "tables", "tor-r1-b1")
    assert done.returncode == 0, (done.stderr, (tmp_path / "agent.log").read_text())
    report = json.loads(done.stdout)
    assert report["switch_name"] == "tor-r1-b1" and report["error"] == ""
    assert report["read_wall_ns"] > 0 and report["entries"]
    assert {e["status"] for e in report["entries"]} == {"ENTRY_STATUS_MATCH"}
    routes = {e["key"]: e for e in report["entries"] if e["table"] == "FabricIngress.routing_v4"}
    route = routes["ipv4_dst=10.0.0.2/32"]
    assert route["action"].startswith("FabricIngress.set_next_id(next_id=")
    tables = {e["table"] for e in report["entries"]}
    assert {"FabricIngress.ecmp_selector", "FabricIngress.ecmp_selector member"} <= tables
    assert any(e["key"] == "(default)" for e in report["entries"])  # hash_config, pfc_watchdog

    # The agent's counters: every port, its interface, carrier up; rates from the 2nd report.
    data = await until(
        addr,
        ("counters", "tor-r1-b1"),
        lambda d: all(i["rx_packets_per_s"] is not None for i in d["interfaces"]),
    )
    assert [(i["port"], i["ifname"], i["oper"]) for i in data["interfaces"]] == [
        (p, switch_links[p], "OPER_STATE_UP") for p in (1, 2, 3, 4)
    ]
    assert all(i["counters_wall_ns"] > T0 // 2 for i in data["interfaces"])

    # An entry deleted behind the agent's back (by a client that took the switch over).
    async with _intruder(target) as intruder:
        installed, _ = await intruder.read_pipeline()
        entry = installed.entries[("route", 0x0A000002, 32)]
        assert isinstance(entry, RouteEntry)
        codec = intruder.codec
        assert await intruder.write([codec.encode_update(Update(Op.DELETE, entry))]) == []

        done = await arailctl(addr, "tables", "tor-r1-b1", "--diff-only", "--json")
        assert done.returncode == 3, done.stderr
        diff = json.loads(done.stdout)["entries"]
        assert diff == [
            {
                "table": "FabricIngress.routing_v4",
                "key": "ipv4_dst=10.0.0.2/32",
                "action": "",
                "status": "ENTRY_STATUS_MISSING",
                "wanted": route["action"],
            }
        ]
        done = await arailctl(addr, "tables", "tor-r1-b1")
        assert done.returncode == 3
        assert re.search(
            r"^FabricIngress\.routing_v4\s+ipv4_dst=10\.0\.0\.2/32\s+MISSING\s+-\s+"
            r"FabricIngress\.set_next_id",
            done.stdout,
            re.M,
        ), done.stdout
        assert f"{len(report['entries']) - 1} match, 1 missing" in done.stdout
