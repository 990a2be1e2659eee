"""The lab's processes: controller, one switch target and one agent per switch, traffic tools.

Each child runs in its own session (its process group is killed as a unit) and gets SIGKILL
if the lab process dies (PR_SET_PDEATHSIG, via setpriv), so an interrupted lab leaves none behind.

Switch targets: `Softswitch` (railfabric-softswitch, the default) and `Bmv2`
(`simple_switch_grpc` with the compiled fabric.p4 pushed by the agent), both with the same
interface, which is what `--target` picks. A target also says what it models, so the lab and
the scenarios ask it rather than compare kinds: whether it finishes checksums hosts left to
offload, whether it has PFC, and whether (and at what rate) its queues can be congested.

bmv2 as it is (docs/bmv2.md): its own options go before `--`, the target's (`--grpc-server-addr`,
`--cpu-port`, `--priority-queues`) after it; `--thrift-port` exists only in a build with Thrift,
so the command line follows what the binary's `--help` lists (read once per binary). Queues
are paced only through Thrift (`simple_switch_CLI`, `set_queue_rate` in frames/s), after the
pipeline is pushed."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Protocol

from mininet_labs import certs
from mininet_labs.netlinks import LabError
from mininet_labs.traffic import LOSSLESS_PRIORITY
from railfabric.tls import TlsFiles

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
BMV2_JSON = REPO / "build" / "p4" / "fabric.json"
CPU_PORT = 255

# Port rates per target. softswitch serializes every port at its rate. bmv2 has no port rate,
# only a rate per priority queue in frames/s: the lab paces the lossless class's queue at the
# rate that the QoS scenarios' frames make. 5 Mb/s (600 frames/s) is what bmv2 sustains on
# 2 cores; at 20 Mb/s it runs out of CPU and loses frames before the queue (docs/bmv2.md).
SOFTSWITCH_PORT_RATE_MBPS = 20.0
BMV2_PORT_RATE_MBPS = 5.0
PACED_FRAME_BYTES = 1042  # the QoS scenarios' frames: 1,000-byte payload, UDP, IPv4, Ethernet
BMV2_PRIORITY_QUEUES = 8  # one per traffic class: standard_metadata.priority = traffic class
PACED_PRIORITY = LOSSLESS_PRIORITY  # the class the QoS scenarios congest (DSCP 26 -> TC 3)


# SIGKILL when the lab process dies, set by setpriv rather than a preexec_fn: a preexec_fn
# makes Python fork() (not vfork), and fork() with gRPC's threads running breaks the child.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]
# The switch targets run at this nice value: a switch's data plane is hardware that never
# waits for its control plane, and here 2 cores are shared by every switch, agent and the
# controller; the carrier polls and queues of the data plane go first.
DATA_PLANE_NICE = -5


# Ports the lab hands its daemons come from below the kernel's ephemeral range: a port the
# kernel chose for us (bind to 0) is free only until someone binds it, and between our probe
# and the daemon's bind any outgoing connection (the agents' gRPC and P4Runtime clients) may
# take it as its source port ("address in use"). Below the range only listeners compete.
_LOWEST_PORT = 10_000
_handed_out: set[int] = set()
_rng = random.Random()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on, outside the ephemeral range, not handed
    out before by this process."""
    high = _ephemeral_low()
    for _ in range(1_000):
        port = _rng.randrange(_LOWEST_PORT, high)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise LabError(f"no free TCP port on 127.0.0.1 between {_LOWEST_PORT} and {high}")


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


def this_checkout_env() -> dict[str, str]:
    """The environment with this checkout first on PYTHONPATH. The daemons are console
    scripts of the virtualenv, whose editable install imports the checkout it was made from:
    a lab (a benchmark) run from a clone of it would have measured the other checkout's code
    while saying it measured the clone's commit."""
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path}


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
        nice: int = 0,
    ) -> Child:
        full = [
            *DIE_WITH_PARENT,
            *(["nice", "-n", str(nice)] if nice else []),
            *(["ip", "netns", "exec", netns] if netns else []),
            *argv,
        ]
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
            env=this_checkout_env(),
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

    def stop_many(self, children: Sequence[Child], timeout: float = 5.0) -> None:
        """stop() for several children at once: each gets SIGTERM together, then `timeout`
        in all to end before the stragglers get stop()'s treatment."""
        alive = [c for c in children if c.proc.poll() is None]
        for c in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for c in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for c in list(children):
            self.stop(c, timeout=0.5)

    def stop_all(self) -> None:
        self.stop_many(list(self.children))


class SwitchTarget(Protocol):
    """A switch program the lab can run, and what of fabric.p4's behaviour it models."""

    @property
    def kind(self) -> str: ...

    @property
    def port_rate_mbps(self) -> float:
        """The egress rate the QoS scenarios load (a port's on softswitch, a queue's on bmv2)."""

    @property
    def completes_partial_checksums(self) -> bool:
        """Does the target finish the L4 checksums hosts leave to TX offload (CHECKSUM_PARTIAL)?
        When it does not, the lab turns TX checksum offload off on every host NIC."""

    @property
    def supports_pfc(self) -> bool:
        """Does the target generate and honour PFC PAUSE frames (FabricEgress.pfc_config)?"""

    def unavailable(self) -> str | None:
        """Why this target cannot run here, or None."""

    def unpaced(self) -> str | None:
        """Why this target's queues cannot be congested at `port_rate_mbps`, or None."""

    def describe(self) -> str:
        """The target and the rates the lab gives it, for the report."""

    def argv(
        self,
        device_id: int,
        grpc_addr: str,
        ports: dict[int, str],
        thrift_port: int,
        tls: TlsFiles | None,
    ) -> list[str]:
        """The switch's command line (`thrift_port`: a free port, for targets that use one;
        `tls`: the switch's identity, which its P4Runtime server presents and demands of its
        clients; None serves plaintext)."""

    def agent_args(self) -> list[str]: ...

    def after_pipeline(self, thrift_port: int, ports: Iterable[int]) -> None:
        """Settings the switch takes once its agent has pushed the pipeline; LabError if not."""


@dataclass(frozen=True)
class Softswitch:
    port_rate_mbps: float = SOFTSWITCH_PORT_RATE_MBPS
    kind: ClassVar[str] = "softswitch"
    completes_partial_checksums: ClassVar[bool] = True  # softswitch/offload.py
    supports_pfc: ClassVar[bool] = True

    def unavailable(self) -> str | None:
        if not (BIN / "railfabric-softswitch").exists():
            return f"railfabric-softswitch is not installed in {BIN}"
        return None

    def unpaced(self) -> str | None:
        return None

    def describe(self) -> str:
        return f"softswitch, ports at {self.port_rate_mbps:g} Mb/s"

    def argv(
        self,
        device_id: int,
        grpc_addr: str,
        ports: dict[int, str],
        thrift_port: int,
        tls: TlsFiles | None,
    ) -> list[str]:
        argv = [str(BIN / "railfabric-softswitch"), "--device-id", str(device_id)]
        argv += ["--grpc-addr", grpc_addr, "--cpu-port", str(CPU_PORT)]
        argv += certs.flags(tls)
        argv += ["--port-rate-mbps", f"{self.port_rate_mbps:g}"]
        for port, ifname in ports.items():
            argv += ["-i", f"{port}@{ifname}"]
        return argv

    def agent_args(self) -> list[str]:
        return ["--target-kind", "softswitch"]

    def after_pipeline(self, thrift_port: int, ports: Iterable[int]) -> None:
        return None  # the port rate is on the command line


# -- bmv2 ------------------------------------------------------------------------------------

BMV2_BINARY = "simple_switch_grpc"
BMV2_CLI = "simple_switch_CLI"
NO_THRIFT = "bmv2 built without Thrift: no simple_switch_CLI to pace queues"
# bmv2's `--help` (src/bm_sim/options_parse.cpp, OptionsParser::parse): its own options, then
# this line, then the target's (boost::program_options, each option line "  [-x [ ]--name").
_TARGET_OPTIONS = "Target specific options:"
_OPTION_LINE = re.compile(r"^  (?:-[A-Za-z] \[ )?--([A-Za-z0-9][A-Za-z0-9-]*)", re.M)
# What the lab's command line uses, before and after `--`.
_NEEDED_BEFORE = ("interface", "device-id", "no-p4")
_NEEDED_AFTER = (
    "grpc-server-addr",
    "cpu-port",
    "priority-queues",
    # The lab's P4Runtime is mutual TLS, as every railfabric channel.
    "grpc-server-ssl",
    "grpc-server-cacert",
    "grpc-server-cert",
    "grpc-server-key",
    "grpc-server-with-client-auth",
)


@dataclass(frozen=True)
class Bmv2Build:
    """What one simple_switch_grpc binary accepts, from its `--help`: bmv2's own options
    (before `--`) and the target's (after it). Only a build with Thrift has `--thrift-port`."""

    own: frozenset[str]
    target: frozenset[str]

    @classmethod
    def from_help(cls, text: str) -> Bmv2Build:
        own, marker, target = text.partition(_TARGET_OPTIONS)
        return cls(
            frozenset(_OPTION_LINE.findall(own)),
            frozenset(_OPTION_LINE.findall(target)) if marker else frozenset(),
        )

    @property
    def thrift(self) -> bool:
        return "thrift-port" in self.own

    def missing(self) -> list[str]:
        """The options the lab needs that this build does not list, e.g. ['--cpu-port (after
        --)']."""
        out = [f"--{o}" for o in _NEEDED_BEFORE if o not in self.own]
        return out + [f"--{o} (after --)" for o in _NEEDED_AFTER if o not in self.target]

    def argv(
        self,
        binary: str,
        device_id: int,
        grpc_addr: str,
        ports: dict[int, str],
        thrift_port: int,
        *,
        tls: TlsFiles | None = None,
    ) -> list[str]:
        """`binary`'s command line: no program (the agent pushes it), bmv2's options before
        `--`, the target's after it; `--thrift-port` only when this build has Thrift. With
        `tls`, bmv2's gRPC server demands a client certificate signed by the CA: bmv2 checks
        only the CA, not which switch a certificate names (SECURITY.md)."""
        argv = [binary, "--device-id", str(device_id)]
        if self.thrift:
            # Distinct per switch, like device ids: several switches run on one machine.
            argv += ["--thrift-port", str(thrift_port)]
        for port, ifname in ports.items():
            argv += ["-i", f"{port}@{ifname}"]
        argv += ["--no-p4", "--", "--grpc-server-addr", grpc_addr]
        argv += ["--cpu-port", str(CPU_PORT), "--priority-queues", str(BMV2_PRIORITY_QUEUES)]
        if tls is not None:
            # simple_switch_grpc's own options (targets/simple_switch_grpc/main.cpp).
            argv += ["--grpc-server-ssl", "--grpc-server-with-client-auth"]
            argv += ["--grpc-server-cacert", str(tls.ca)]
            argv += ["--grpc-server-cert", str(tls.cert), "--grpc-server-key", str(tls.key)]
        return argv


@functools.cache
def _read_help(path: str, mtime_ns: int) -> str:
    try:
        done = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LabError(f"{path} --help: {err}") from err
    if done.returncode != 0:
        raise LabError(f"{path} --help exited with {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def bmv2_build(binary: str = BMV2_BINARY) -> Bmv2Build:
    """The options `binary` (on PATH) lists in its `--help`, read once per binary file."""
    path = shutil.which(binary)
    if path is None:
        raise LabError(f"{binary} (bmv2) is not on PATH")
    return Bmv2Build.from_help(_read_help(path, os.stat(path).st_mtime_ns))


def queue_rate_commands(pps: int, ports: Iterable[int]) -> list[str]:
    """simple_switch_CLI lines pacing the paced class's queue of each port at `pps` frames/s
    (`set_queue_rate <rate_pps> [<egress_port> [<priority>]]`, targets/simple_switch/
    sswitch_CLI.py). One queue per port, not all: bmv2's rate is per priority queue, and
    pacing best effort too would hold the 1,000 pps failover probe to the same rate."""
    return [f"set_queue_rate {pps} {port} {PACED_PRIORITY}" for port in sorted(ports)]


@dataclass(frozen=True)
class Bmv2:
    """bmv2 simple_switch_grpc, started without a program; the agent pushes P4Info + JSON.
    `build`: what the binary accepts (None: read from `simple_switch_grpc --help` on PATH)."""

    port_rate_mbps: float = BMV2_PORT_RATE_MBPS
    build: Bmv2Build | None = None
    kind: ClassVar[str] = "bmv2"
    # bmv2 forwards a CHECKSUM_PARTIAL frame as it is, and the receiver drops it.
    completes_partial_checksums: ClassVar[bool] = False
    supports_pfc: ClassVar[bool] = False  # it ignores FabricEgress.pfc_config

    def options(self) -> Bmv2Build:
        return self.build if self.build is not None else bmv2_build()

    @property
    def queue_rate_pps(self) -> int:
        """`port_rate_mbps` in the QoS scenarios' frames per second (bmv2 counts frames)."""
        return max(1, round(self.port_rate_mbps * 1e6 / 8 / PACED_FRAME_BYTES))

    def unavailable(self) -> str | None:
        if self.build is None and shutil.which(BMV2_BINARY) is None:
            return f"{BMV2_BINARY} (bmv2) is not on PATH"
        try:
            missing = self.options().missing()
        except LabError as err:
            return str(err)
        if missing:
            return f"{BMV2_BINARY}'s --help lists no {', '.join(missing)}"
        if not BMV2_JSON.exists():
            return f"{BMV2_JSON} is missing: run `make p4` (needs p4c-bm2-ss) first"
        return None

    def unpaced(self) -> str | None:
        if not self.options().thrift:
            return NO_THRIFT
        if shutil.which(BMV2_CLI) is None:
            return f"{BMV2_BINARY} has Thrift, but {BMV2_CLI} is not on PATH to pace queues"
        return None

    def describe(self) -> str:
        queues = f"bmv2, {BMV2_PRIORITY_QUEUES} priority queues per port"
        if (why := self.unpaced()) is not None:
            return f"{queues}, none paced ({why})"
        return (
            f"{queues}; priority {PACED_PRIORITY} (lossless class) paced at "
            f"{self.queue_rate_pps:,} frames/s = {self.port_rate_mbps:g} Mb/s of "
            f"{PACED_FRAME_BYTES:,}-byte frames"
        )

    def argv(
        self,
        device_id: int,
        grpc_addr: str,
        ports: dict[int, str],
        thrift_port: int,
        tls: TlsFiles | None,
    ) -> list[str]:
        return self.options().argv(BMV2_BINARY, device_id, grpc_addr, ports, thrift_port, tls=tls)

    def agent_args(self) -> list[str]:
        return ["--target-kind", "bmv2", "--device-config", str(BMV2_JSON)]

    def after_pipeline(self, thrift_port: int, ports: Iterable[int]) -> None:
        """Pace the lossless class's queues through Thrift; nothing without it (the ECN
        scenario is then skipped with `unpaced()`'s reason)."""
        if self.unpaced() is not None:
            return
        cli = shutil.which(BMV2_CLI) or BMV2_CLI
        argv = [cli, "--thrift-port", str(thrift_port)]
        lines = queue_rate_commands(self.queue_rate_pps, ports)
        try:
            done = subprocess.run(
                argv,
                input="\n".join(lines) + "\n",
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise LabError(f"{' '.join(argv)}: {err}") from err
        # The CLI prints "Error: ..." / "Invalid ..." for a refused command and goes on.
        refused = re.search(r"\b(Error|Invalid)\b", done.stdout)
        if done.returncode != 0 or refused:
            raise LabError(
                f"{' '.join(argv)} <<< {'; '.join(lines)}: exit {done.returncode}\n"
                f"{done.stdout.strip()}\n{done.stderr.strip()}"
            )


def make_target(kind: str, port_rate_mbps: float | None = None) -> SwitchTarget:
    """The target `kind` at `port_rate_mbps` (None: the target's default rate)."""
    if kind == "softswitch":
        return Softswitch(SOFTSWITCH_PORT_RATE_MBPS if port_rate_mbps is None else port_rate_mbps)
    if kind == "bmv2":
        return Bmv2(BMV2_PORT_RATE_MBPS if port_rate_mbps is None else port_rate_mbps)
    raise LabError(f"--target {kind!r}: expected softswitch or bmv2")
