"""The lab's processes: controller, one switch target and one agent per switch, traffic tools.

Each child runs in its own session (its process group is killed as a unit) and gets SIGKILL
if the lab process dies (PR_SET_PDEATHSIG, via setpriv), so an interrupted lab leaves none behind.

Switch targets: `Softswitch` (railfabric-softswitch, the default) and `Bmv2`
(`simple_switch_grpc` with the compiled fabric.p4 pushed by the agent), both with the same
interface, which is what `--target` picks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from mininet_labs.netlinks import LabError

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
BMV2_JSON = REPO / "build" / "p4" / "fabric.json"


# SIGKILL when the lab process dies, set by setpriv rather than a preexec_fn: a preexec_fn
# makes Python fork() (not vfork), and fork() with gRPC's threads running breaks the child.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(addr: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{proc.args!r} exited with {proc.returncode}:\n{tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 0.2):
            return
        time.sleep(0.05)
    raise LabError(f"nothing listens on {addr} after {timeout:.0f} s:\n{tail(log)}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None


class Processes:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        netns: str | None = None,
        stdout_pipe: bool = False,
        stdin_pipe: bool = False,
    ) -> Child:
        full = [*DIE_WITH_PARENT, *(["ip", "netns", "exec", netns] if netns else []), *argv]
        log = self.log_dir / f"{name}.log"
        out: IO[bytes] | int
        logfile = log.open("ab")
        out = subprocess.PIPE if stdout_pipe else logfile
        proc = subprocess.Popen(
            full,
            stdout=out,
            stderr=logfile,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
        logfile.close()
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def stop(self, child: Child, timeout: float = 5.0) -> None:
        proc = child.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        else:
            # The leader is gone; make sure nothing else of its group survives.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for stream in (proc.stdout, proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if child in self.children:
            self.children.remove(child)

    def stop_all(self) -> None:
        alive = [c for c in self.children if c.proc.poll() is None]
        for c in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for c in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for c in list(self.children):
            self.stop(c, timeout=0.5)


class SwitchTarget(Protocol):
    @property
    def kind(self) -> str: ...

    def unavailable(self) -> str | None:
        """Why this target cannot run here, or None."""

    def argv(self, device_id: int, grpc_addr: str, ports: dict[int, str]) -> list[str]: ...

    def agent_args(self) -> list[str]: ...


@dataclass(frozen=True)
class Softswitch:
    port_rate_mbps: float
    kind: str = "softswitch"

    def unavailable(self) -> str | None:
        if not (BIN / "railfabric-softswitch").exists():
            return f"railfabric-softswitch is not installed in {BIN}"
        return None

    def argv(self, device_id: int, grpc_addr: str, ports: dict[int, str]) -> list[str]:
        argv = [str(BIN / "railfabric-softswitch"), "--device-id", str(device_id)]
        argv += ["--grpc-addr", grpc_addr, "--cpu-port", "255"]
        argv += ["--port-rate-mbps", f"{self.port_rate_mbps:g}"]
        for port, ifname in ports.items():
            argv += ["-i", f"{port}@{ifname}"]
        return argv

    def agent_args(self) -> list[str]:
        return ["--target-kind", "softswitch"]


@dataclass(frozen=True)
class Bmv2:
    """bmv2 simple_switch_grpc, started without a program; the agent pushes P4Info + JSON.
    bmv2 has no port-rate model here, so the QoS scenarios measure little on it."""

    kind: str = "bmv2"

    def unavailable(self) -> str | None:
        if shutil.which("simple_switch_grpc") is None:
            return "simple_switch_grpc (bmv2) is not on PATH"
        if not BMV2_JSON.exists():
            return f"{BMV2_JSON} is missing: run `make p4` (needs p4c-bm2-ss) first"
        return None

    def argv(self, device_id: int, grpc_addr: str, ports: dict[int, str]) -> list[str]:
        # Distinct device ids and thrift ports: bmv2's notification socket is per device id.
        argv = ["simple_switch_grpc", "--device-id", str(device_id)]
        argv += ["--thrift-port", str(free_port())]
        for port, ifname in ports.items():
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--no-p4", "--", "--grpc-server-addr", grpc_addr, "--cpu-port", "255"]
        return argv

    def agent_args(self) -> list[str]:
        return ["--target-kind", "bmv2", "--device-config", str(BMV2_JSON)]


def make_target(kind: str, port_rate_mbps: float) -> SwitchTarget:
    if kind == "softswitch":
        return Softswitch(port_rate_mbps)
    if kind == "bmv2":
        return Bmv2()
    raise LabError(f"--target {kind!r}: expected softswitch or bmv2")
