"""A simulated switch agent: the controller session of a real agent (agent/session.py,
agent/main.py, agent/writer.py) without a P4 target, speaking only railfabric.v1.

It opens one FabricControl.Session, says Hello (every port of its switch in the intent with
carrier, its applied generation and digest, a reachable target it is primary of), and answers
every DesiredState and StateDelta at once with Applied, as an agent whose target commits
instantly. A delta that does not start at the generation it holds is answered with a Hello on
the same stream (a snapshot request), as the real agent does. On carrier changes the
coordinator asks for, it sends PortStatus with both timestamps.

A stream that fails counts a *session reset* (its gRPC status code and details), waits a
backoff with full jitter and reconnects with a Hello naming what it holds."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from bench.swarm import reports
from bench.swarm.plan import AgentSpec
from railfabric.grpc_wakeups import drain_wakeups_or_warn
from railfabric.grpcopts import channel_options
from railfabric.v1 import control_pb2, control_pb2_grpc

AGENT_VERSION = "swarm-bench"
# The real agent's: channel_ready within 2 s or the try counts as a reset, and the next try
# starts a new connection and handshake (--connect-timeout-s 2 reproduces it).
AGENT_CONNECT_TIMEOUT_S = 2.0
# The swarm's default: no limit, gRPC retries the connection itself. One swarm process cannot
# finish 2,336 TLS handshakes within 2 s even against a server that does nothing else
# (measured on a shared 2-core machine): with the agent's limit every try was abandoned and
# started over, and the swarm, not the controller, would decide the storm.
CONNECT_TIMEOUT_S = 0.0
# Backoff between tries: from 0.1 s doubling to 5 s, uniform in [ceiling/2, ceiling].
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 5.0
# A session that stayed up this long starts the backoff over.
STABLE_S = 5.0
OUTBOX_SIZE = 256
VERIFY_INTERVAL_S = 30
# Details of at most this many resets are kept per status code (the count is exact).
RESET_EXAMPLES = 3

_CHANNEL_OPTIONS = channel_options(
    [
        # gRPC shares one TCP connection between channels with equal arguments; a real agent
        # is a process of its own with its own connection, so each channel gets its own pool.
        ("grpc.use_local_subchannel_pool", 1),
        # Without BDP probing a stream's receive window stays at 64 KiB: when a swarm process
        # falls behind, gRPC buffers that much per agent instead of growing windows to
        # megabytes (4,672 of them filled a 24 GiB machine in minutes).
        ("grpc.http2.bdp_probe", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]
)


# A message for the stream, and what to call once it is written (its wall time).
_Outgoing = tuple[control_pb2.AgentMessage, Callable[[int], None] | None]


@dataclass(slots=True)
class Received:
    """One ControllerMessage as an agent received it (kept while the recorder is on)."""

    switch: str
    kind: str
    generation: int
    size: int
    received_ns: int
    # When the Applied it caused was written to the stream; 0: none (yet).
    applied_ns: int = 0

    def row(self) -> list[object]:
        return [
            self.switch,
            self.kind,
            self.generation,
            self.size,
            self.received_ns,
            self.applied_ns,
        ]


@dataclass
class Recorder:
    """What every agent of a process received: totals always, each message while `on`."""

    on: bool = False
    log: list[Received] = field(default_factory=list)
    messages: Counter[str] = field(default_factory=Counter)
    size: Counter[str] = field(default_factory=Counter)
    last_received_ns: int = 0

    def take(self) -> list[Received]:
        taken, self.log = self.log, []
        return taken


@dataclass
class Tally:
    """Events of a process by kind (session resets by status code; delta gaps), with a few
    examples of their details."""

    by_code: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, code: str, details: str) -> None:
        self.by_code[code] += 1
        seen = self.examples.setdefault(code, [])
        if len(seen) < RESET_EXAMPLES and details not in seen:
            seen.append(details[:300])


class SimAgent:
    """One switch's session; run() until cancelled."""

    def __init__(
        self,
        spec: AgentSpec,
        address: str,
        *,
        credentials: grpc.ChannelCredentials | None,
        connect_timeout_s: float | None = None,
        recorder: Recorder,
        resets: Tally,
        gaps: Tally,
        rng: random.Random,
        reports_interval_s: float = 0.0,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.address = address
        self.credentials = credentials
        # None: wait for the channel as long as it takes (gRPC retries the connection itself).
        self.connect_timeout_s = connect_timeout_s
        self.recorder = recorder
        self.resets = resets
        self.gaps = gaps
        self.rng = rng
        self.carrier = {port: True for port, _ in spec.ports}
        self.macs = dict(spec.ports)
        self.generation = 0
        self.digest = ""
        self.first_state_ns = 0
        self.first_applied_ns = 0
        # Sessions tried (a retry is every try after the first) and opened.
        self.attempts = 0
        self.connections = 0
        self.resyncs = 0
        self.dropped = 0
        self._session_messages = 0
        self._outbox: asyncio.Queue[_Outgoing] | None = None
        # With --reports-s (0: none): seconds between Counters; what the agent reports, made
        # from its first state (bench/swarm/reports.py), and how many Counters it sent.
        self.reports_interval_s = reports_interval_s
        self._reports: tuple[control_pb2.Neighbors, control_pb2.Counters] | None = None
        self._holds = asyncio.Event()
        self.counters_sent = 0

    @property
    def holds_state(self) -> bool:
        return self.first_applied_ns > 0

    @property
    def in_session(self) -> bool:
        return self._outbox is not None

    def hello(self) -> control_pb2.Hello:
        now = time.time_ns()
        return control_pb2.Hello(
            switch_name=self.name,
            agent_version=AGENT_VERSION,
            target=control_pb2.TARGET_KIND_OTHER,
            ports=[
                control_pb2.PortInfo(
                    port=port, ifname=f"eth{port}", oper_up=self.carrier[port], mac=mac
                )
                for port, mac in self.spec.ports
            ],
            applied_generation=self.generation,
            applied_digest=self.digest,
            device_id=1,
            target_health=control_pb2.TargetHealth(
                reachable=True,
                primary=True,
                last_read_back_wall_ns=now,
                verify_interval_s=VERIFY_INTERVAL_S,
                wall_ns=now,
                primary_election_id="1",
                election_id="1",
            ),
        )

    def port_status(self, port: int, up: bool) -> int | None:
        """Report a carrier change of `port` now; its wall time, None without a session (the
        next Hello carries it)."""
        self.carrier[port] = up
        mono, wall = time.monotonic_ns(), time.time_ns()
        sent = self._send(
            control_pb2.AgentMessage(
                port_status=control_pb2.PortStatus(
                    port=port, up=up, monotonic_ns=mono, wall_ns=wall
                )
            )
        )
        return wall if sent else None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        ceiling = BACKOFF_INITIAL_S
        while True:
            started = loop.time()
            self._session_messages = 0
            try:
                await self._session()
                self._reset("OK", "stream closed by the controller", loop.time() - started)
            except grpc.aio.AioRpcError as err:
                self._reset(err.code().name, err.details() or "", loop.time() - started)
            except TimeoutError:
                self.resets.add(
                    "CONNECT_TIMEOUT", f"not connected within {self.connect_timeout_s} s"
                )
            finally:
                self._outbox = None
            if loop.time() - started > STABLE_S:
                ceiling = BACKOFF_INITIAL_S
            await asyncio.sleep(self.rng.uniform(ceiling / 2, ceiling))
            ceiling = min(BACKOFF_MAX_S, ceiling * 2)

    def _reset(self, code: str, details: str, lasted_s: float) -> None:
        # When and how far the session got tells a refused Hello from a stream lost later.
        self.resets.add(
            code,
            f"{details!r} after {lasted_s:.1f} s and {self._session_messages} messages "
            "on the session",
        )

    async def _session(self) -> None:
        self.attempts += 1
        if self.credentials is None:
            channel = grpc.aio.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        else:
            channel = grpc.aio.secure_channel(
                self.address, self.credentials, options=_CHANNEL_OPTIONS
            )
        # Thousands of sessions share this process's loop: without the drain, grpc.aio's
        # completions reach it one per turn once it falls behind, and the swarm would time
        # its own stall (railfabric/grpc_wakeups.py; idempotent, cheap once installed).
        drain_wakeups_or_warn(asyncio.get_running_loop())
        async with channel:
            stub = control_pb2_grpc.FabricControlStub(channel)
            async with asyncio.timeout(self.connect_timeout_s):
                await channel.channel_ready()
            call = stub.Session(None)
            try:
                await call.write(control_pb2.AgentMessage(hello=self.hello()))
            except asyncio.InvalidStateError:
                # The controller ended the stream before the Hello went out: its status.
                raise grpc.aio.AioRpcError(
                    await call.code(),
                    await call.initial_metadata(),
                    await call.trailing_metadata(),
                    await call.details(),
                    "",
                ) from None
            outbox: asyncio.Queue[_Outgoing] = asyncio.Queue(OUTBOX_SIZE)
            self._outbox = outbox
            self.connections += 1
            # One task writes, as in agent/session.py: PortStatus from the coordinator and
            # Applied from the reader share the stream.
            pump = asyncio.create_task(self._pump(call, outbox), name=f"outbox-{self.name}")
            report = None
            if self.reports_interval_s:
                report = asyncio.create_task(self._report(), name=f"reports-{self.name}")
            try:
                async for reply in call:
                    self._on_message(reply)
            finally:
                pump.cancel()
                if report is not None:
                    report.cancel()
                call.cancel()
                # A write to a stream that just ended raises InvalidStateError: the reader
                # has its status already.
                with contextlib.suppress(
                    asyncio.CancelledError, asyncio.InvalidStateError, grpc.aio.AioRpcError
                ):
                    await pump

    def _send(
        self, msg: control_pb2.AgentMessage, on_sent: Callable[[int], None] | None = None
    ) -> bool:
        outbox = self._outbox
        if outbox is None:
            return False
        if outbox.full():  # as the real agent: the oldest goes, the next Hello covers it
            with contextlib.suppress(asyncio.QueueEmpty):
                outbox.get_nowait()
                self.dropped += 1
        outbox.put_nowait((msg, on_sent))
        return True

    async def _report(self) -> None:
        """This session's reports: the neighbours once the agent holds state, then Counters
        every interval, the first after a random share of it (agents' periods are not in
        step)."""
        await self._holds.wait()
        assert self._reports is not None
        neighbors, counters = self._reports
        self._send(control_pb2.AgentMessage(neighbors=neighbors))
        interval = self.reports_interval_s
        await asyncio.sleep(self.rng.uniform(0, interval))
        while True:
            msg = control_pb2.AgentMessage()
            msg.counters.CopyFrom(counters)
            msg.counters.wall_ns = time.time_ns()
            if self._send(msg):
                self.counters_sent += 1
            await asyncio.sleep(interval)

    async def _pump(
        self,
        call: grpc.aio.StreamStreamCall[control_pb2.AgentMessage, control_pb2.ControllerMessage],
        outbox: asyncio.Queue[_Outgoing],
    ) -> None:
        while True:
            msg, on_sent = await outbox.get()
            await call.write(msg)
            if on_sent is not None:
                on_sent(time.time_ns())

    def _applied_sent(self, record: Received | None, snapshot: bool) -> Callable[[int], None]:
        def sent(wall_ns: int) -> None:
            if record is not None:
                record.applied_ns = wall_ns
            if snapshot and not self.first_applied_ns:
                self.first_applied_ns = wall_ns

        return sent

    def _on_message(self, msg: control_pb2.ControllerMessage) -> None:
        received = time.time_ns()
        self._session_messages += 1
        kind = msg.WhichOneof("msg") or ""
        size = msg.ByteSize()
        rec = self.recorder
        rec.messages[kind] += 1
        rec.size[kind] += size
        rec.last_received_ns = max(rec.last_received_ns, received)
        if kind == "desired_state":
            state = msg.desired_state
            self.generation, self.digest = state.generation, state.digest
            if not self.first_state_ns:
                self.first_state_ns = received
            if self.reports_interval_s and self._reports is None:
                self._reports = (reports.neighbors(state, received), reports.counters(state))
                self._holds.set()
        elif kind == "state_delta":
            delta = msg.state_delta
            if delta.from_generation != self.generation:
                # A gap in the chain: ask for a snapshot, as agent/writer.py does.
                self.resyncs += 1
                self.gaps.add(
                    "delta_gap",
                    f"{self.name} holds generation {self.generation}, got a delta "
                    f"{delta.from_generation}->{delta.to_generation}",
                )
                self._send(control_pb2.AgentMessage(hello=self.hello()))
                return
            self.generation, self.digest = delta.to_generation, delta.digest
        else:
            if kind == "read_tables":
                self._send(
                    control_pb2.AgentMessage(
                        tables=control_pb2.TablesReport(
                            request_id=msg.read_tables.request_id,
                            switch_name=self.name,
                            read_wall_ns=received,
                            error="a simulated agent (bench.swarm) has no P4 target",
                        )
                    )
                )
            return
        record = None
        if rec.on:
            record = Received(self.name, kind, self.generation, size, received)
            rec.log.append(record)
        applied = control_pb2.Applied(
            generation=self.generation,
            digest=self.digest,
            wall_ns=time.time_ns(),
            received_wall_ns=received,
        )
        self._send(
            control_pb2.AgentMessage(applied=applied),
            self._applied_sent(record, kind == "desired_state"),
        )


def status_of(
    agents: list[SimAgent], recorder: Recorder, resets: Tally, gaps: Tally
) -> dict[str, object]:
    """A process's summary for the coordinator (small: polled every 100 ms)."""
    return {
        "agents": len(agents),
        "holding": sum(a.holds_state for a in agents),
        "in_session": sum(a.in_session for a in agents),
        "attempts": sum(a.attempts for a in agents),
        "connections": sum(a.connections for a in agents),
        "resyncs": sum(a.resyncs for a in agents),
        "dropped": sum(a.dropped for a in agents),
        "counters_sent": sum(a.counters_sent for a in agents),
        # Agents that sent Counters twice: the controller holds two reports of theirs.
        "reported_twice": sum(a.counters_sent >= 2 for a in agents),
        "resets": dict(resets.by_code),
        "reset_examples": resets.examples,
        "gap_examples": gaps.examples.get("delta_gap", []),
        "messages": dict(recorder.messages),
        "bytes": dict(recorder.size),
        "last_received_ns": recorder.last_received_ns,
    }


def agent_rows(agents: list[SimAgent]) -> list[list[object]]:
    """Per agent: name, first DesiredState received, its Applied written (Unix ns; 0 =
    never), sessions opened."""
    return [[a.name, a.first_state_ns, a.first_applied_ns, a.connections] for a in agents]
