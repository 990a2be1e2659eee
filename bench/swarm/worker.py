"""One swarm process: its share of the simulated agents, driven by the coordinator.

    python -m bench.swarm.worker --socket PATH --fabric FILE --shard I --shards K
        [--agents N] --address HOST:PORT [--connect-timeout-s S] (--pki DIR | --insecure)

Started by `python -m bench.swarm`, never by hand. It computes the same plan as the
coordinator (bench/swarm/plan.py), keeps the agents of its shard, connects to the
coordinator's socket, says it is ready, then answers requests (bench/swarm/ipc.py):

- storm: start every agent's session at once;
- status: totals (agents holding state, resets by code, messages and bytes by kind);
- agents: per agent, when it got its first DesiredState and applied it;
- record {on}: start or stop logging every message received (cleared either way);
- take: the messages logged since the last take;
- port {switch, port, up}: that agent sends PortStatus now (its wall time; null without a
  session);
- stop: end every session and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bench.swarm import certs, ipc
from bench.swarm.agents import (
    CONNECT_TIMEOUT_S,
    Recorder,
    SimAgent,
    Tally,
    agent_rows,
    status_of,
)
from bench.swarm.plan import make_plan
from railfabric import pki

# The event loop's lag is sampled this often: a swarm process whose loop lags by seconds is
# the bottleneck, not the controller, and the report says so.
LAG_PERIOD_S = 0.05


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.swarm.worker")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--fabric", required=True)
    parser.add_argument("--agents", type=int)
    parser.add_argument("--shard", required=True, type=int)
    parser.add_argument("--shards", required=True, type=int)
    parser.add_argument("--address", required=True)
    parser.add_argument("--connect-timeout-s", type=float, default=CONNECT_TIMEOUT_S)
    parser.add_argument("--reports-s", type=float, default=0.0)
    secure = parser.add_mutually_exclusive_group(required=True)
    secure.add_argument("--pki", type=Path)
    secure.add_argument("--insecure", action="store_true")
    return parser


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        started = time.perf_counter()
        plan = make_plan(args.fabric, args.agents, args.shards, 0)
        self.load_s = time.perf_counter() - started
        self.shard = args.shard
        self.recorder = Recorder()
        self.resets = Tally()
        self.gaps = Tally()
        rng = random.Random(args.shard)
        ca = None if args.pki is None else (args.pki / pki.CA_CERT).read_bytes()
        self.agents = [
            SimAgent(
                spec,
                args.address,
                credentials=(
                    None
                    if args.pki is None or ca is None
                    else certs.switch_credentials(args.pki, spec.name, ca)
                ),
                recorder=self.recorder,
                connect_timeout_s=args.connect_timeout_s or None,
                resets=self.resets,
                gaps=self.gaps,
                rng=rng,
                reports_interval_s=args.reports_s,
            )
            for spec in plan.shard_agents(args.shard)
        ]
        self.by_name = {agent.name: agent for agent in self.agents}
        self.tasks: list[asyncio.Task[None]] = []
        # Agents whose task ended other than by cancellation: a bug here, said in status.
        self.crashed: list[str] = []
        # The longest the loop was late since the last `record` (a phase boundary), ms.
        self.lag_max_ms = 0.0

    async def watch_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_PERIOD_S)
            late = (loop.time() - started - LAG_PERIOD_S) * 1000
            self.lag_max_ms = max(self.lag_max_ms, late)

    def _ended(self, agent: SimAgent, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.crashed.append(f"{agent.name}: {task.exception()!r}")

    def storm(self) -> ipc.Message:
        started = time.time_ns()
        for agent in self.agents:
            task = asyncio.create_task(agent.run(), name=f"agent-{agent.name}")
            task.add_done_callback(partial(self._ended, agent))
            self.tasks.append(task)
        return {"started_ns": started}

    def answer(self, request: ipc.Message) -> ipc.Message:
        command = request.get("cmd")
        if command == "storm":
            return self.storm()
        if command == "status":
            status = status_of(self.agents, self.recorder, self.resets, self.gaps)
            return {**status, "crashed": self.crashed, "lag_max_ms": self.lag_max_ms}
        if command == "agents":
            return {"rows": agent_rows(self.agents)}
        if command == "record":
            self.recorder.on = bool(request["on"])
            self.recorder.take()
            self.lag_max_ms = 0.0
            return {}
        if command == "take":
            return {"rows": [received.row() for received in self.recorder.take()]}
        if command == "port":
            agent = self.by_name.get(request["switch"])
            if agent is None:
                return {"error": f"switch {request['switch']!r} is not in shard {self.shard}"}
            return {"wall_ns": agent.port_status(int(request["port"]), bool(request["up"]))}
        return {"error": f"unknown command {command!r}"}

    async def serve(self, socket: Path) -> None:
        reader, writer = await asyncio.open_unix_connection(socket, limit=ipc.LINE_LIMIT)
        self.tasks.append(asyncio.create_task(self.watch_lag(), name="loop-lag"))
        try:
            await ipc.send(
                writer,
                {"shard": self.shard, "agents": len(self.agents), "load_s": self.load_s},
            )
            while (request := await ipc.receive(reader)) is not None:
                if request.get("cmd") == "stop":
                    break
                await ipc.send(writer, self.answer(request))
        finally:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    worker = Worker(args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(worker.serve(args.socket))
    return 0


if __name__ == "__main__":
    sys.exit(main())
