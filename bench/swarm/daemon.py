"""The controller under test: the real `railfabric-controller` as a child process, pinned to
its own CPU, watched from /proc (resident memory, CPU seconds) and through gRPC health.

Pinning (bench/pinning.py): the controller gets the first CPU this process may use, the swarm
(and the coordinator) the others, so the load generator does not decide the result by taking
the controller's CPU."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.pinning import Pinning
from mininet_labs.processes import this_checkout_env
from railfabric import tls
from railfabric.grpcopts import channel_options

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STOP_WAIT_S = 10.0
# Health is polled this often; the channel retries the connection as often, so SERVING is
# seen within about this long of the server answering.
HEALTH_POLL_S = 0.05
_HEALTH_OPTIONS = channel_options(
    [
        ("grpc.initial_reconnect_backoff_ms", 50),
        ("grpc.min_reconnect_backoff_ms", 50),
        ("grpc.max_reconnect_backoff_ms", 100),
    ]
)
_LEVEL = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) (\S+): (.*)$")


class ControllerFailed(Exception):
    """The controller exited or never served; the text ends with its last log lines."""


def rss_mib(pid: int) -> float | None:
    """VmRSS of a process, MiB; None once it has exited."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None  # a zombie has no VmRSS


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process used so far (/proc/PID/stat); 0 once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name may hold spaces; the fields after it are fixed: utime is the 14th
    # field of the line, stime the 15th.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Controller:
    """`python -m controller.daemon.main ARGS`, in its own session (so every process it
    starts dies with it), its log in a file."""

    def __init__(self, args: Sequence[str], log_path: Path, pinning: Pinning) -> None:
        self.argv = [
            *pinning.prefix(pinning.measured),
            sys.executable,
            "-m",
            "controller.daemon.main",
            *args,
        ]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_ns = 0

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.started_ns = time.time_ns()
            # taskset execs the command: the pid is the controller's own.
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=this_checkout_env(),
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def rss_mib(self) -> float:
        rss = rss_mib(self.pid)
        if rss is None:
            raise self.failed("its memory cannot be read")
        return rss

    def cpu_s(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        """SIGTERM to its session, then SIGKILL after STOP_WAIT_S. Idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(STOP_WAIT_S)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def failed(self, what: str) -> ControllerFailed:
        code = self.exit_code()
        state = "is running" if code is None else f"exited with {code}"
        return ControllerFailed(f"{what}; the controller {state}. Its log ends:\n{self.log_tail()}")

    def log_summary(self, examples: int = 5) -> dict[str, object]:
        """Warnings and errors the controller logged: counts by level and logger, and the
        first few distinct messages (numbers blanked so repeats group)."""
        by_level: collections.Counter[str] = collections.Counter()
        seen: dict[str, int] = {}
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            match = _LEVEL.match(line)
            if match is None:
                continue
            level, logger, message = match.groups()
            by_level[level] += 1
            shape = re.sub(r"\d+(\.\d+)?", "N", f"{level} {logger}: {message}")[:200]
            seen[shape] = seen.get(shape, 0) + 1
        top = sorted(seen.items(), key=lambda item: -item[1])[:examples]
        return {
            "by_level": dict(by_level),
            "most_frequent": [{"count": count, "line": shape} for shape, count in top],
        }


async def wait_serving(
    controller: Controller, address: str, files: tls.TlsFiles | None, timeout_s: float
) -> int:
    """Poll grpc.health.v1 Check until the controller says SERVING; its wall time (ns).
    ControllerFailed when it exits first or does not serve within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    async with tls.aio_channel(address, files, _HEALTH_OPTIONS) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if controller.exit_code() is not None:
                raise controller.failed("the controller never served")
            if time.monotonic() > deadline:
                raise controller.failed(f"not SERVING within {timeout_s:g} s")
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.time_ns()
            except grpc.aio.AioRpcError:
                pass  # not listening yet: the intent is still being loaded
            await asyncio.sleep(HEALTH_POLL_S)
