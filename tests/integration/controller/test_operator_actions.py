"""Operator actions against a real controller over mutual TLS, with railctl as an operator
would run it: drains (refused to a reader, refused when they would cut a ToR pair unless
forced, kept across a restart, visible in links, diagnose, events and metrics), `railctl diff`
of an intent file, and a reload that withdraws too many routes refused until forced."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from controller.intent import load_fabric, to_explicit_yaml
from railfabric import tls
from railfabric.v1 import admin_pb2, admin_pb2_grpc, state_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, Agent, serving

pytestmark = pytest.mark.integration

RAILCTL = str(Path(sys.executable).parent / "railctl")
KEY = "tor-r1-b1:3--spine-p1-1:1"
# The lab's cables, as `railctl expand` writes them: the four of spine-p1-1.
SPINE1_CABLES = [
    f"- {{a: '{tor}:3', b: 'spine-p1-1:{port}', speed: 100G, length_m: 10.0}}\n"
    for port, tor in enumerate(["tor-r1-b1", "tor-r2-b1", "tor-r1-b2", "tor-r2-b2"], start=1)
]


def launch(
    processes: Processes, port: int, tmp_path: Path, fabric: Path = LAB, *extra: str
) -> subprocess.Popen[bytes]:
    return processes.start(
        [
            CONTROLLER,
            "--fabric",
            str(fabric),
            "--listen",
            f"127.0.0.1:{port}",
            "--state-dir",
            str(tmp_path / "state"),
            "--hold-down-s",
            "0.2",
            *pki.controller_flags(),
            *extra,
        ],
        stdout=(tmp_path / "controller.log").open("ab"),
        stderr=subprocess.STDOUT,
    )


@asynccontextmanager
async def fabric_of_agents(addr: str) -> AsyncIterator[dict[str, Agent]]:
    """One agent per switch, each on a channel with its own switch certificate, every port
    up and every state applied."""
    async with AsyncExitStack() as stack, pki.channel(addr) as admin_channel:
        admin = admin_pb2_grpc.FabricAdminStub(admin_channel)
        topo = await admin.GetTopology(admin_pb2.GetTopologyRequest())
        agents = {}
        for sw in topo.switches:
            channel = await stack.enter_async_context(pki.channel(addr, pki.switch(sw.name)))
            agents[sw.name] = Agent(channel)
            await agents[sw.name].hello_with_every_port(admin, sw.name)
        await settle(agents)
        try:
            yield agents
        finally:
            for agent in agents.values():
                await agent.outbox.put(None)


async def settle(agents: dict[str, Agent]) -> None:
    """Apply what the controller sends until no agent is sent anything more (a drain's
    held deltas leave once the others applied)."""
    for _ in range(10):
        before = [agent.state for agent in agents.values()]
        for agent in agents.values():
            await agent.apply_all(quiet_s=0.3)
        if [agent.state for agent in agents.values()] == before:
            return
    raise AssertionError("the controller kept sending states")


async def railctl(addr: str, *args: str, who: tls.TlsFiles | None = None) -> tuple[int, str, str]:
    env = {**os.environ, **pki.railctl_env(who)}
    proc = await asyncio.create_subprocess_exec(
        RAILCTL,
        "--controller",
        addr,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def ports_for(state: state_pb2.DesiredState | None, prefix_address: int) -> set[int]:
    """The egress ports of the switch's route for a ToR's /29."""
    assert state is not None
    groups = {g.id: {nh.port for nh in g.next_hops} for g in state.groups}
    return {
        port
        for r in state.routes
        if r.prefix.address == prefix_address and r.prefix.length == 29
        for port in groups[r.group_id]
    }


TOR_R1_B1_PREFIX = (10 << 24) | 0  # 10.0.0.0/29


async def test_a_reader_may_look_but_not_drain_or_reload(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    launch(processes, port, tmp_path)
    addr = f"127.0.0.1:{port}"
    await serving(addr)
    for args in (["drain", "tor-r1-b1:3"], ["undrain", "spine-p1-1"], ["reload", "--force"]):
        code, _, err = await railctl(addr, *args, who=pki.reader())
        assert code == 1, err
        assert "PERMISSION_DENIED" in err and "is for operator; the peer is reader/" in err
    code, out, err = await railctl(addr, "drains", who=pki.reader())
    assert (code, out.strip()) == (0, "no drained links"), err
    code, out, err = await railctl(addr, "diff", str(LAB), who=pki.reader())
    assert code == 0 and "no change" in out, err
    log = (tmp_path / "controller.log").read_text()
    assert "refused /railfabric.v1.FabricAdmin/Drain" in log


async def test_an_operators_drain_moves_routes_shows_everywhere_and_survives_a_restart(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    addr = f"127.0.0.1:{port}"
    metrics = ["--metrics", f"127.0.0.1:{metrics_port}"]
    launch(processes, port, tmp_path, LAB, *metrics)
    await serving(addr)
    async with fabric_of_agents(addr) as agents:
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {3, 4}
        code, out, err = await railctl(addr, "drain", "tor-r1-b1:3", "--reason", "optic swap")
        assert code == 0, err
        assert "drained tor-r1-b1:3 - spine-p1-1:1 (by operator/tests: optic swap)" in out
        await settle(agents)
        # Every ToR now reaches tor-r1-b1 through spine-p1-2 only; spine-p1-1 has no way down.
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {4}
        assert ports_for(agents["spine-p1-1"].state, TOR_R1_B1_PREFIX) == set()
        held = agents["tor-r1-b1"].state
        assert held is not None and 3 not in {nh.port for g in held.groups for nh in g.next_hops}

        code, out, err = await railctl(addr, "--json", "links", "--down")
        (link,) = json.loads(out)["links"]
        assert link["state"] == "LINK_STATE_UP"  # as observed; the drain is its own field
        assert link["reason"].startswith("drained by operator/tests at ")
        assert link["reason"].endswith(" UTC: optic swap")
        assert link["drain"]["who"] == "operator/tests" and link["drain"]["target"] == "tor-r1-b1:3"
        code, out, _ = await railctl(addr, "links")
        assert "drained (up)" in out and "drained by operator/tests" in out
        code, out, _ = await railctl(addr, "--json", "diagnose")
        findings = [f for f in json.loads(out)["findings"] if f["kind"] == "drained"]
        assert len(findings) == 1 and findings[0]["severity"] == "SEVERITY_INFO"
        assert "railctl undrain tor-r1-b1:3" in findings[0]["message"]
        code, out, _ = await railctl(addr, "--json", "events", "--limit", "100")
        drained = [e for e in json.loads(out)["events"] if e["kind"] == "drain"]
        assert drained[0]["drain"]["who"] == "operator/tests"
        assert drained[0]["drain"]["reason"] == "optic swap"
        text = await asyncio.to_thread(scrape, metrics_port)
        assert "railfabric_drained_links 1.0" in text

        # Again: a clear error that names who drained it.
        code, _, err = await railctl(addr, "drain", "spine-p1-1:1")
        assert code == 1 and "ALREADY_EXISTS" in err and "drained by operator/tests" in err
        code, _, err = await railctl(addr, "drain", "spine-p1-9")
        assert code == 1 and "NOT_FOUND" in err and "did you mean" in err

    processes.kill_all()
    launch(processes, port, tmp_path, LAB, *metrics)
    await serving(addr)
    code, out, err = await railctl(addr, "--json", "drains")
    (d,) = json.loads(out)["drains"]
    assert (d["link"], d["who"], d["reason"]) == (KEY, "operator/tests", "optic swap"), err
    async with fabric_of_agents(addr) as agents:
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {4}
        assert ports_for(agents["spine-p1-1"].state, TOR_R1_B1_PREFIX) == set()
        code, out, err = await railctl(addr, "undrain", "tor-r1-b1:3", "--reason", "fixed")
        assert code == 0 and "returned to routing tor-r1-b1:3 - spine-p1-1:1" in out, err
        await settle(agents)
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {3, 4}
        code, _, err = await railctl(addr, "undrain", "tor-r1-b1:3")
        assert code == 1 and "FAILED_PRECONDITION" in err and "is not drained" in err
    assert "railfabric_drained_links 0.0" in await asyncio.to_thread(scrape, metrics_port)


async def test_a_drain_that_would_cut_a_tor_pair_is_refused_unless_forced(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    addr = f"127.0.0.1:{port}"
    launch(processes, port, tmp_path)
    await serving(addr)
    async with fabric_of_agents(addr) as agents:
        code, _, err = await railctl(addr, "drain", "spine-p1-1")
        assert code == 0, err
        await settle(agents)
        code, _, err = await railctl(addr, "drain", "spine-p1-2")
        assert code == 1 and "FAILED_PRECONDITION" in err
        assert "draining spine-p1-2 would leave tor-r1-b1 without a path to tor-r2-b1" in err
        assert "--force" in err
        code, out, _ = await railctl(addr, "--json", "drains")
        assert {d["target"] for d in json.loads(out)["drains"]} == {"spine-p1-1"}
        code, out, err = await railctl(addr, "drain", "spine-p1-2", "--force")
        assert code == 0 and "(forced past the what-if check)" in out, err
        await settle(agents)
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == set()


async def test_diff_shows_what_an_intent_file_would_change(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    addr = f"127.0.0.1:{port}"
    launch(processes, port, tmp_path)
    await serving(addr)
    text = to_explicit_yaml(load_fabric(LAB))
    new = tmp_path / "new.yaml"
    new.write_text(text.replace(SPINE1_CABLES[0], ""))
    async with fabric_of_agents(addr):
        code, out, err = await railctl(addr, "diff", str(new), who=pki.reader())
        assert code == 3, err  # it differs
        assert f"links:    +0, -1 ({KEY})" in out
        assert "spine-p1-1" in out and "-10.0.0.0/29" in out
        assert "~10.0.0.0/29 3,4 -> 4" in out
        code, out, err = await railctl(addr, "--json", "diff", str(new))
        assert code == 3, err
        reply = json.loads(out)
        assert reply["links_removed"] == [KEY] and reply["routes_withdrawn"] == 1
        spine = next(s for s in reply["switches"] if s["switch_name"] == "spine-p1-1")
        assert spine["removed"] == [{"prefix": "10.0.0.0/29", "old_ports": [1], "new_ports": []}]
    # Nothing changed: the running intent still has the cable.
    code, out, _ = await railctl(addr, "--json", "topology")
    assert len(json.loads(out)["links"]) == 8
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("rails: 2", "rails: 2\nrialz: 3"))
    code, _, err = await railctl(addr, "diff", str(bad))
    assert code == 1 and "INVALID_ARGUMENT" in err and f"{bad}:" in err and "rialz" in err


async def test_a_reload_withdrawing_too_many_routes_is_refused_until_forced(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    fabric = tmp_path / "fabric.yaml"
    text = to_explicit_yaml(load_fabric(LAB))
    fabric.write_text(text)
    port = free_port()
    addr = f"127.0.0.1:{port}"
    proc = launch(processes, port, tmp_path, fabric, "--reload-max-withdraw", "0.1")
    await serving(addr)
    async with fabric_of_agents(addr) as agents:
        # Without spine-p1-1's four cables, it withdraws all four ToR prefixes: 4 of 28.
        cut = text
        for cable in SPINE1_CABLES:
            cut = cut.replace(cable, "")
        fabric.write_text(cut)
        proc.send_signal(signal.SIGHUP)
        refused = await wait_event(addr, "intent_refused")
        assert "withdraws 4 of the 28 installed routes (14%)" in refused.message
        assert "--reload-max-withdraw 0.1" in refused.message
        assert "railctl reload --force" in refused.message
        log = (tmp_path / "controller.log").read_text()
        assert "ERROR" in log and "reload refused, still serving the previous intent" in log

        code, _, err = await railctl(addr, "reload")
        assert code == 1 and "FAILED_PRECONDITION" in err and "withdraws 4 of the 28" in err
        code, out, _ = await railctl(addr, "--json", "topology")
        assert len(json.loads(out)["links"]) == 8  # still the previous intent

        code, out, err = await railctl(addr, "reload", "--force")
        assert code == 0, err
        assert "reloaded fabric lab-2rail (forced past --reload-max-withdraw)" in out
        assert "links:    +0, -4" in out
        await settle(agents)
        code, out, _ = await railctl(addr, "--json", "topology")
        assert len(json.loads(out)["links"]) == 4
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {4}

        # A reload within the guard just happens, and says what changed.
        fabric.write_text(text)
        code, out, err = await railctl(addr, "reload")
        assert code == 0 and "reloaded fabric lab-2rail\n" in out, err
        # The cables are new to the controller: unknown until their agents report them.
        async with pki.channel(addr) as channel:
            admin = admin_pb2_grpc.FabricAdminStub(channel)
            for name, agent in agents.items():
                await agent.hello_with_every_port(admin, name)
        await settle(agents)
        assert ports_for(agents["tor-r2-b1"].state, TOR_R1_B1_PREFIX) == {3, 4}


async def wait_event(addr: str, kind: str) -> admin_pb2.Event:
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        for _ in range(100):
            events = (await admin.ListEvents(admin_pb2.ListEventsRequest(limit=50))).events
            found = [e for e in events if e.kind == kind]
            if found:
                return found[-1]
            await asyncio.sleep(0.1)
    raise AssertionError(f"no {kind} event")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())
