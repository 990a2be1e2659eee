"""Version skew: an agent built from the previous release's proto (tests/integration/
controller/compat/v0_1, copied from the release before this one) works with this controller.
The rule it checks is in proto/README.md."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from railfabric.v1 import admin_pb2, admin_pb2_grpc
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import Agent, start

pytestmark = pytest.mark.integration

COMPAT = Path(__file__).resolve().parent / "compat"
OLD_PROTOS = COMPAT / "v0_1"


def _build_old_stubs(out: Path) -> None:
    """Compile the previous release's .proto files into `out`/railfabric/v1."""
    for package in (out / "railfabric", out / "railfabric" / "v1"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    protos = sorted(str(p.relative_to(OLD_PROTOS)) for p in OLD_PROTOS.rglob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{OLD_PROTOS}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *protos,
        ],
        check=True,
        timeout=120,
    )


async def test_an_agent_of_the_previous_release_gets_state_and_deltas(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    stubs = tmp_path / "old"
    _build_old_stubs(stubs)
    addr = await start(processes, free_port(), tmp_path / "state")
    # The rest of the fabric runs this release's agents, so the old agent's links come up
    # (a link is up only when both ends report carrier) and its cut changes routes.
    channel = pki.channel(addr)
    admin = admin_pb2_grpc.FabricAdminStub(channel)
    others = [s.name for s in (await admin.GetTopology(admin_pb2.GetTopologyRequest())).switches]
    current = {name: Agent.of(addr, name) for name in others if name != "tor-r1-b1"}
    for name, a in current.items():
        await a.hello_with_every_port(admin, name)
    for a in current.values():
        await a.apply_all()
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(COMPAT / "old_agent.py"),
        addr,
        "tor-r1-b1",
        "4",
        "3",
        # The certificate is not part of the protocol: the old agent speaks TLS as its switch.
        *pki.flags(pki.switch("tor-r1-b1")),
        cwd=stubs,
        env={"PYTHONPATH": str(stubs), "PATH": "/usr/bin:/bin"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with pki.channel(addr) as channel:
            admin = admin_pb2_grpc.FabricAdminStub(channel)
            deadline = time.monotonic() + 30
            while True:
                links = await admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True))
                switches = await admin.ListSwitches(admin_pb2.ListSwitchesRequest())
                (tor,) = [s for s in switches.switches if s.info.name == "tor-r1-b1"]
                down = [f"{ln.a.switch_name}:{ln.a.port}" for ln in links.links]
                if "tor-r1-b1:3" in down and tor.converged and tor.desired_generation > 1:
                    break
                assert time.monotonic() < deadline, (down, tor)
                await asyncio.sleep(0.2)
    finally:
        raw_out, raw_err = await asyncio.wait_for(agent.communicate(b""), timeout=30)
        for a in current.values():
            await a.close()
        await channel.close(None)
    out, err = raw_out.decode(), raw_err.decode()
    lines = [json.loads(line) for line in out.splitlines()]
    assert str(stubs) in lines[0]["stubs"], "the old agent must run on the old stubs"
    kinds = [line["kind"] for line in lines[1:]]
    assert kinds[0] == "desired_state" and "state_delta" in kinds, (kinds, err)
    assert "Traceback" not in err, err
