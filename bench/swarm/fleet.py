"""The swarm processes as the coordinator sees them: started pinned (bench/swarm/daemon.py),
each in its own session so it can be killed with whatever it started, reached over one Unix
socket (bench/swarm/ipc.py), and stopped on every way out."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.pinning import Pinning
from bench.swarm import ipc
from bench.swarm.daemon import cpu_seconds, rss_mib
from bench.swarm.plan import Plan
from mininet_labs.processes import this_checkout_env

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 300.0
STOP_WAIT_S = 5.0
# A swarm process above this share of the machine's memory stops the run: it is holding what
# its agents cannot read fast enough, and the machine is shared.
MEMORY_SHARE = 0.2


class SwarmFailed(Exception):
    """A swarm process died or refused a request; the text says which and why."""


@dataclass
class Totals:
    """The processes' status answers added up."""

    agents: int = 0
    holding: int = 0
    in_session: int = 0
    attempts: int = 0
    connections: int = 0
    resyncs: int = 0
    dropped: int = 0
    counters_sent: int = 0
    reported_twice: int = 0
    last_received_ns: int = 0
    lag_max_ms: float = 0.0
    resets: Counter[str] = field(default_factory=Counter)
    reset_examples: dict[str, list[str]] = field(default_factory=dict)
    gap_examples: list[str] = field(default_factory=list)
    messages: Counter[str] = field(default_factory=Counter)
    size: Counter[str] = field(default_factory=Counter)
    crashed: list[str] = field(default_factory=list)

    def add(self, status: ipc.Message) -> None:
        for name in ("agents", "holding", "in_session", "attempts", "connections"):
            setattr(self, name, getattr(self, name) + int(status[name]))
        self.resyncs += int(status["resyncs"])
        self.dropped += int(status["dropped"])
        self.counters_sent += int(status["counters_sent"])
        self.reported_twice += int(status["reported_twice"])
        self.last_received_ns = max(self.last_received_ns, int(status["last_received_ns"]))
        self.lag_max_ms = max(self.lag_max_ms, float(status["lag_max_ms"]))
        self.resets.update(status["resets"])
        for code, examples in status["reset_examples"].items():
            kept = self.reset_examples.setdefault(code, [])
            kept += [e for e in examples if e not in kept][: 3 - len(kept)]
        self.gap_examples += status["gap_examples"][: 3 - len(self.gap_examples)]
        self.messages.update(status["messages"])
        self.size.update(status["bytes"])
        self.crashed += status["crashed"]


def _memory_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024
    return float("inf")


class _Process:
    def __init__(self, shard: int, argv: list[str], log_path: Path) -> None:
        self.shard = shard
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
                env=this_checkout_env(),
            )
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.load_s = 0.0
        self.lock = asyncio.Lock()

    def died(self, what: str) -> SwarmFailed:
        code = self.proc.poll()
        state = "is running" if code is None else f"exited with {code}"
        try:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            tail = ""
        return SwarmFailed(
            f"swarm process {self.shard} {what}; it {state}. Its output ends:\n{tail}"
        )

    async def ask(self, request: ipc.Message) -> ipc.Message:
        assert self.reader is not None and self.writer is not None
        async with self.lock:
            try:
                await ipc.send(self.writer, request)
                reply = await ipc.receive(self.reader)
            except (ConnectionError, OSError):
                reply = None
        if reply is None:
            raise self.died(f"went away during {request.get('cmd')!r}")
        if "error" in reply:
            raise SwarmFailed(f"swarm process {self.shard}: {reply['error']}")
        return reply

    def kill(self) -> None:
        """SIGTERM to its session, SIGKILL after STOP_WAIT_S. Idempotent."""
        if self.writer is not None:
            self.writer.close()
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_WAIT_S)


class Fleet:
    """The K swarm processes of one run."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "swarm.sock"
        self.processes: list[_Process] = []
        self._server: asyncio.Server | None = None
        self._memory_limit_mib = _memory_mib() * MEMORY_SHARE

    async def start(
        self,
        plan: Plan,
        address: str,
        pki: Path | None,
        pinning: Pinning,
        connect_timeout_s: float,
        *,
        reports_s: float = 0.0,
    ) -> None:
        """Start every process and wait until each loaded the fabric and connected."""
        arrived: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        arrived = asyncio.Queue()

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await arrived.put((reader, writer))

        self._server = await asyncio.start_unix_server(connected, self.socket, limit=ipc.LINE_LIMIT)
        for shard in range(plan.shards):
            argv = [
                *pinning.prefix(pinning.load),
                sys.executable,
                "-m",
                "bench.swarm.worker",
                "--socket",
                str(self.socket),
                "--fabric",
                plan.fabric_file,
                "--agents",
                str(len(plan.agents)),
                "--shard",
                str(shard),
                "--shards",
                str(plan.shards),
                "--address",
                address,
                "--connect-timeout-s",
                str(connect_timeout_s),
                "--reports-s",
                str(reports_s),
                *(["--insecure"] if pki is None else ["--pki", str(pki)]),
            ]
            self.processes.append(_Process(shard, argv, self.workdir / f"swarm-{shard}.log"))
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = {p.shard: p for p in self.processes}
        while waiting:
            for p in waiting.values():
                if p.proc.poll() is not None:
                    raise p.died("exited before it was ready")
            if time.monotonic() > deadline:
                raise next(iter(waiting.values())).died(f"not ready in {READY_TIMEOUT_S:g} s")
            try:
                reader, writer = await asyncio.wait_for(arrived.get(), 0.5)
            except TimeoutError:
                continue
            hello = await ipc.receive(reader)
            if hello is None:
                continue
            p = waiting.pop(int(hello["shard"]))
            p.reader, p.writer, p.load_s = reader, writer, float(hello["load_s"])

    def cpu_s(self) -> float:
        """CPU seconds the swarm processes used so far."""
        return sum(cpu_seconds(p.proc.pid) for p in self.processes)

    @property
    def load_s(self) -> float:
        return max((p.load_s for p in self.processes), default=0.0)

    async def ask_all(self, request: ipc.Message) -> list[ipc.Message]:
        return list(await asyncio.gather(*(p.ask(request) for p in self.processes)))

    async def ask(self, shard: int, request: ipc.Message) -> ipc.Message:
        return await self.processes[shard].ask(request)

    async def totals(self) -> Totals:
        totals = Totals()
        for status in await self.ask_all({"cmd": "status"}):
            totals.add(status)
        if totals.crashed:
            raise SwarmFailed(f"simulated agents failed: {'; '.join(totals.crashed[:3])}")
        for p in self.processes:
            rss = rss_mib(p.proc.pid) or 0.0
            if rss > self._memory_limit_mib:
                raise SwarmFailed(
                    f"swarm process {p.shard} grew to {rss:,.0f} MiB (limit {MEMORY_SHARE:.0%} "
                    "of the machine): its agents cannot keep up with what they receive, so the "
                    "load generator, not the controller, is the bottleneck (event loop lag so "
                    f"far {totals.lag_max_ms:,.0f} ms)"
                )
        return totals

    async def rows(self, command: str) -> list[list[Any]]:
        """Every process's `rows` answer to `command`, concatenated."""
        out: list[list[Any]] = []
        for reply in await self.ask_all({"cmd": command}):
            out += reply["rows"]
        return out

    def stop(self) -> None:
        """Kill every process and close the socket; safe on any path, twice."""
        for p in self.processes:
            p.kill()
        if self._server is not None:
            self._server.close()
