"""The wheel, installed the way deploy/README.md installs it, runs the fabric: `python -m
build` makes it (with the P4Info, and the bmv2 JSON when there is one, as package data), a
fresh venv outside the source tree gets it, and that venv's controller (from a --config file),
softswitch and agent, started outside the source tree, program one switch that `railctl`
from the same venv shows converged, with the P4Info the installed package holds."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Netns, Processes

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# What the build does not need: the venv, caches, tests; build/ is setuptools' own.
NOT_BUILT = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
    "tests", "out",
)  # fmt: skip
SWITCH = "tor-r1-b1"
PORTS = (1, 2, 3, 4)
WAIT_S = 60.0


def run(*argv: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # type: ignore[call-overload]
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, check=False, **kwargs
    )
    assert done.returncode == 0, f"{' '.join(map(str, argv))}:\n{done.stdout}\n{done.stderr}"
    result: subprocess.CompletedProcess[str] = done
    return result


def build_wheel(tmp_path: Path) -> tuple[Path, bool]:
    """Build the wheel from a copy of the tree (setuptools writes beside the sources); the
    wheel, and whether its bmv2 JSON is a stand-in (`make p4` has not built one here)."""
    probe = subprocess.run(
        [sys.executable, "-m", "build", "--version"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"python -m build cannot run ({probe.stderr.strip()}): pip install -e .[dev]")
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=NOT_BUILT)
    bmv2_json = src / "railfabric" / "p4" / "fabric.json"
    stand_in = not bmv2_json.exists()
    if stand_in:
        bmv2_json.write_text(json.dumps({"program": "a stand-in for make p4's bmv2 JSON"}))
    # No isolation: the build backend is this venv's setuptools, so no network is needed.
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp_path / "dist", src)
    (wheel,) = (tmp_path / "dist").glob("railfabric-*.whl")
    return wheel, stand_in


def make_venv(tmp_path: Path, wheel: Path) -> Path:
    """A fresh venv with the wheel installed; its dependencies are this venv's (a .pth file),
    so nothing is downloaded."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    site = Path(
        run(
            venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"
        ).stdout.strip()
    )
    (site / "railfabric-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    run(*pip, "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", wheel)
    return venv


def wait_listening(addr: str, log: Path) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            with socket.create_connection((host, int(port)), 0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing listens on {addr}:\n{log.read_text()}") from None
            time.sleep(0.1)


def test_the_installed_wheel_runs_a_switch(
    tmp_path: Path, netns: Netns, processes: Processes, free_port: Callable[[], int]
) -> None:
    wheel, stand_in = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as whl:
        shipped = whl.read("railfabric/p4/fabric.p4info.txt")
        assert shipped == (REPO / "p4" / "fabric.p4info.txt").read_bytes()
        assert "railfabric/p4/fabric.json" in whl.namelist()
    venv = make_venv(tmp_path, wheel)
    bin_dir = venv / "bin"
    work = tmp_path / "work"  # every process runs here, outside the source tree
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    probe = run(
        bin_dir / "python",
        "-c",
        "import railfabric, railfabric.p4info as p;"
        "print(railfabric.__file__); print(p.DEFAULT_P4INFO); print(p.packaged_bmv2_json())",
        cwd=work,
        env=env,
    )
    package, p4info, bmv2_json = (Path(line) for line in probe.stdout.split())
    for path in (package, p4info, bmv2_json):
        assert path.is_relative_to(venv) and not path.is_relative_to(REPO), path
    assert p4info.is_file() and not p4info.is_symlink()
    assert bmv2_json.read_text() == (
        json.dumps({"program": "a stand-in for make p4's bmv2 JSON"})
        if stand_in
        else (REPO / "railfabric" / "p4" / "fabric.json").read_text()
    )

    # The switch's four ports, cabled to a namespace that stands for the rest of the fabric.
    wire = netns.add("wire")
    ifnames = {p: f"rf{netns.tag}s{p}" for p in PORTS}
    for port, name in ifnames.items():
        netns.veth(name, None, f"rf{netns.tag}w{port}", wire)

    fabric = work / "lab-2rail.yaml"
    shutil.copy(REPO / "examples" / "lab-2rail.yaml", fabric)
    controller = f"127.0.0.1:{free_port()}"
    config = work / "controller.yaml"
    config.write_text(f"fabric: {fabric}\nlisten: {controller}\nstore: 'memory:'\ninsecure: true\n")
    target = f"127.0.0.1:{free_port()}"
    logs = {name: work / f"{name}.log" for name in ("controller", "softswitch", "agent")}

    def start(name: str, *argv: str) -> None:
        with logs[name].open("wb") as log:
            processes.start(
                [str(bin_dir / f"railfabric-{name}"), *argv],
                stdout=log,
                stderr=log,
                cwd=work,
                env=env,
            )

    start("controller", "--config", str(config))
    start(
        "softswitch", "--device-id", "1", "--grpc-addr", target, "--insecure",
        *(arg for p, n in ifnames.items() for arg in ("-i", f"{p}@{n}")),
    )  # fmt: skip
    wait_listening(controller, logs["controller"])
    wait_listening(target, logs["softswitch"])
    start(
        "agent", "--switch", SWITCH, "--controller", controller, "--target", target,
        "--device-id", "1", "--port-map", ",".join(f"{p}={n}" for p, n in ifnames.items()),
        "--insecure",
    )  # fmt: skip

    deadline = time.monotonic() + WAIT_S
    while True:
        done = subprocess.run(
            [str(bin_dir / "railctl"), "--controller", controller, "--insecure", "--json",
             "switches"],
            capture_output=True, text=True, timeout=60, check=False, cwd=work, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        (status,) = (s for s in json.loads(done.stdout)["switches"] if s["info"]["name"] == SWITCH)
        if status["converged"]:
            break
        if time.monotonic() > deadline:
            agent_log = logs["agent"].read_text()
            raise AssertionError(f"{SWITCH} did not converge: {status}\n{agent_log}")
        time.sleep(0.2)
    assert status["connected"] and status["applied_generation"] == status["desired_generation"]
    assert status["target"]["reachable"]

    agent_log = logs["agent"].read_text()
    assert f"running, P4Info from {p4info}\n" in agent_log, agent_log
    for name, log in logs.items():
        assert "Traceback" not in log.read_text(), f"{name}:\n{log.read_text()}"
