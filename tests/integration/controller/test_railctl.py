"""railctl against a live controller: every controller-backed command, tables and JSON."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import start

pytestmark = pytest.mark.integration

RAILCTL = str(Path(sys.executable).parent / "railctl")


def railctl(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAILCTL, "--controller", addr, *args],
        capture_output=True,
        env={**os.environ, **pki.railctl_env()},
        text=True,
        timeout=60,
        check=False,
    )


def test_railctl_reads_the_controller(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    addr = asyncio.run(start(processes, free_port(), tmp_path / "state"))

    done = railctl(addr, "--json", "switches")
    assert done.returncode == 0, done.stderr
    switches = json.loads(done.stdout)["switches"]
    assert {s["info"]["name"] for s in switches} >= {"tor-r1-b1", "spine-p1-2"}
    assert not any(s.get("connected") for s in switches)

    done = railctl(addr, "topology")
    assert (
        done.returncode == 0 and "fabric lab-2rail: 6 switches, 8 links, 8 host NICs" in done.stdout
    )

    done = railctl(addr, "routes", "tor-r1-b1")
    assert done.returncode == 0, done.stderr
    # No agent ever reported: the uplinks are unknown, so only the ToR's own NICs are routed
    # (10.0.0.16/29, the other block's rail-1 ToR, is not).
    assert "10.0.0.2/32" in done.stdout and "10.0.0.16/29" not in done.stdout

    done = railctl(addr, "routes", "tor-r1-b9")
    assert done.returncode == 1
    assert "NOT_FOUND" in done.stderr and "tor-r1-b9" in done.stderr

    # The path stops at the first ToR, which says why: its uplinks were never observed.
    done = railctl(addr, "--json", "path", "10.0.0.2", "10.0.0.18", "--sport", "49152")
    assert done.returncode == 1, done.stderr
    path = json.loads(done.stdout)
    assert path["delivered_to"] == "" and "tor-r1-b1 has no route" in path["error"]
    (hop,) = path["hops"]
    assert hop["switch_name"] == "tor-r1-b1" and hop["egress_port"] == 0
    avoided = {(a["port"], a["peer"]["switch_name"], a["state"]) for a in hop["avoided"]}
    assert avoided == {
        (3, "spine-p1-1", "LINK_STATE_UNKNOWN"),
        (4, "spine-p1-2", "LINK_STATE_UNKNOWN"),
    }
    assert all("has not reported port" in a["reason"] for a in hop["avoided"])
    done = railctl(addr, "path", "10.0.0.2", "10.0.0.18", "--sport", "49152")
    assert "spine-p1-1 has not reported port 1: no agent session" in done.stdout, done.stdout

    # No agent is connected: diagnose says so for every switch and exits 3.
    done = railctl(addr, "diagnose")
    assert done.returncode == 3
    assert "PROBLEMS FOUND" in done.stdout and "tor-r2-b2: no agent session" in done.stdout

    for command in ("links", "events", "alarms"):
        done = railctl(addr, "--json", command)
        assert done.returncode == 0, (command, done.stderr)
        json.loads(done.stdout)


def test_railctl_names_an_unreachable_controller() -> None:
    done = railctl("127.0.0.1:1", "switches")
    assert done.returncode == 1
    assert "127.0.0.1:1" in done.stderr and "UNAVAILABLE" in done.stderr
