"""`railfabric-agent`: the switch agent daemon (docs/architecture.md §1, §7).

One asyncio process. Long-lived state (the writer's desired/installed state, port and LLDP
state) lives in `Agent`; the tasks that feed it run in one TaskGroup: a failing task cancels
its siblings, the group is restarted with a throttle, and the state carries over (the P4
stream reconnects, which makes the writer read back and reconcile)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from agent import phase
from agent.codec import Codec, P4InfoMismatch
from agent.counters import PortCounterReader
from agent.lldp import NeighborChange, NeighborTable, build_lldp
from agent.metrics import AgentMetrics
from agent.p4client import ON_DEMOTED, P4Target, PacketIn
from agent.ports import PortEvent, PortMonitor, parse_port_map
from agent.probes import Prober
from agent.roce import NakSamples, parse_nak
from agent.session import ControllerSession
from agent.tables import report as tables_report
from agent.translate import MatrixDestEntry, Pipeline, QosEntry, repair
from agent.writer import TARGET_LOST, Writer, server_ports
from railfabric import __version__, cli, latency, tls
from railfabric.collector import freeze_start_up
from railfabric.metrics import MetricsError
from railfabric.p4format import EntityFormatter
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import control_pb2

LOG = logging.getLogger("railfabric.agent")

TARGET_KINDS = {
    "softswitch": control_pb2.TARGET_KIND_SOFTSWITCH,
    "bmv2": control_pb2.TARGET_KIND_BMV2,
    "tofino": control_pb2.TARGET_KIND_TOFINO,
    "other": control_pb2.TARGET_KIND_OTHER,
}
ETH_TYPE_LLDP = b"\x88\xcc"
PROBE_ETH_TYPE = latency.PROBE_ETH_TYPE.to_bytes(2, "big")
ETH_TYPE_IPV4 = latency.ETH_TYPE_IPV4.to_bytes(2, "big")
PROBE_IP_PROTO = bytes([latency.PROBE_IP_PROTO])
# Seconds between looks at the state while the controller asks for no probes.
PROBE_IDLE_S = 1.0
# A round of probes is spread over this share of its interval (the rest is quiet).
PROBE_PACE_SHARE = 0.5
# What makes a port whose LLDP neighbour went silent usable again (not a shutdown LLDPDU).
HEARD = (NeighborChange.NEW, NeighborChange.CHANGED, NeighborChange.REFRESHED)
# Between two read-backs of the target (an entry deleted behind the agent's back is back within
# this plus one Write).
VERIFY_INTERVAL_S = 30.0
# The task group is restarted at most this often after a failure.
RESTART_THROTTLE_S = 2.0
# ReadTables requests waiting for the tables task; more are answered "busy" at once.
TABLE_REQUESTS = 8


def _interval(value: str) -> float:
    """Seconds between two periodic sends: a finite number > 0 (0 would spin)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite number of seconds > 0")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = cli.daemon_parser(
        "railfabric-agent",
        "Switch agent: programs a P4Runtime target from the controller's state.",
    )
    parser.add_argument("--switch", required=True, help="switch name in the fabric intent")
    parser.add_argument(
        "--controller",
        required=True,
        type=cli.addresses,
        help="controller address HOST:PORT, or every replica's: HOST:PORT,HOST:PORT,... (the "
        "agent follows the one that leads)",
    )
    parser.add_argument("--target", required=True, help="P4Runtime target address HOST:PORT")
    parser.add_argument("--device-id", type=int, required=True, help="P4Runtime device id")
    parser.add_argument("--port-map", required=True, help="PORT=IFNAME[,PORT=IFNAME...]")
    parser.add_argument("--netns", help="network namespace of the switch's interfaces")
    parser.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO, help="P4Info text file")
    parser.add_argument(
        "--device-config",
        help="target-specific pipeline blob pushed with the P4Info (bmv2 JSON); empty if unset",
    )
    parser.add_argument(
        "--election-id", type=int, default=1, help="P4Runtime election id (higher wins)"
    )
    parser.add_argument(
        "--on-demoted",
        choices=ON_DEMOTED,
        default="stand_down",
        help="when another P4Runtime client takes primary: stand_down (keep the stream, write "
        "nothing, raise mastership_lost) or fight (take it back with a higher election id)",
    )
    parser.add_argument(
        "--target-kind",
        choices=sorted(TARGET_KINDS),
        default="softswitch",
        help="kind of P4Runtime target, reported to the controller",
    )
    parser.add_argument(
        "--lldp-interval", type=_interval, default=1.0, help="seconds between LLDPDUs per port"
    )
    parser.add_argument(
        "--lldp-ttl", type=int, default=4, help="TTL advertised in LLDPDUs, seconds"
    )
    parser.add_argument(
        "--counters-interval", type=_interval, default=5.0, help="seconds between Counters"
    )
    parser.add_argument(
        "--verify-interval",
        type=_interval,
        default=VERIFY_INTERVAL_S,
        help="seconds between read-backs of the target that find and repair entries changed "
        "behind the agent's back",
    )
    parser.add_argument(
        "--metrics",
        type=cli.address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on this address (unset: no metrics)",
    )
    tls.add_flags(parser, "this switch", metrics=True)
    parser.add_argument(
        "--target-insecure",
        action="store_true",
        help="reach the P4Runtime target in plaintext (a target without TLS); the controller "
        "is still reached with TLS",
    )
    return parser


def tls_of(args: argparse.Namespace) -> tuple[tls.TlsFiles | None, tls.TlsFiles | None]:
    """(to the controller, to the target) from the flags: the switch's own identity for both,
    None where plaintext was asked for. TlsError names the flag or file that is wrong."""
    files = tls.files_from(args)
    if files is None:
        tls.warn_insecure("the agent")
        return None, None
    identity = files.identity()
    if identity != tls.Identity(tls.Kind.SWITCH, args.switch):
        raise tls.TlsError(
            f"--tls-cert {files.cert} names {identity}, not switch/{args.switch}; issue this "
            f"switch's own with 'railctl pki issue DIR --switch {args.switch}'"
        )
    if args.target_insecure:
        LOG.warning(
            "the P4Runtime target %s is reached in plaintext (--target-insecure)", args.target
        )
        return files, None
    return files, files


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.switch = args.switch
        self.port_map = parse_port_map(args.port_map)
        self.codec = Codec(load_p4info(args.p4info), str(args.p4info))
        device_config = Path(args.device_config).read_bytes() if args.device_config else b""
        self.target_kind = TARGET_KINDS[args.target_kind]
        self.device_id = args.device_id
        self.lldp_interval = args.lldp_interval
        self.lldp_ttl = args.lldp_ttl
        build_lldp(self.switch, 1, 0, self.lldp_ttl)  # refuse a name or TTL LLDP cannot carry
        self.counters_interval = args.counters_interval
        self.verify_interval = args.verify_interval
        self.metrics_address: str | None = args.metrics
        to_controller, to_target = tls_of(args)
        self.metrics_tls = tls.metrics_files(args, to_controller)
        self.metrics = AgentMetrics(self.switch, insecure=to_controller is None)
        # The last counter read (every --counters-interval), which metrics show.
        self.last_counters: control_pb2.Counters | None = None

        self.monitor = PortMonitor(self.port_map, args.netns)
        self.target = P4Target(
            args.target,
            args.device_id,
            args.election_id,
            self.codec,
            device_config=device_config,
            tls=to_target,
            on_demoted=args.on_demoted,
        )
        # What PortCounters holds for this kind of target (drop reasons, queue occupancy).
        self.port_counters = PortCounterReader(self.codec, self.target_kind, self.port_map)
        self.session = ControllerSession(
            args.controller, self.hello, self._from_controller, tls_files=to_controller
        )
        self.writer = Writer(
            self.target,
            self.codec,
            on_applied=lambda m: self._send(control_pb2.AgentMessage(applied=m)),
            on_port_status=lambda m: self._send(control_pb2.AgentMessage(port_status=m)),
            on_local_repair=lambda m: self._send(control_pb2.AgentMessage(local_repair=m)),
            request_snapshot=self.session.resend_hello,
            switch_name=self.switch,
            on_repair=self.metrics.repaired,
            on_read_back=lambda _: self._health_changed(),
        )
        self.target.on_change = self._health_changed
        self.neighbors = NeighborTable()
        # NAKs the target sampled to the CPU since the last counter report.
        self.nak_samples = NakSamples()
        self.prober = Prober(self._port_mac)
        self.carrier: dict[int, bool] = {}
        # Ports whose LLDP neighbour went silent while carrier stayed up (one-way failure).
        self.lldp_down: set[int] = set()
        self.effective: dict[int, bool] = {}
        # The target as last seen; kept current by the target-health task (sent to the
        # controller, shown in metrics).
        self.health = control_pb2.TargetHealth()
        # ReadTables request ids for the tables task (reads run beside the writer's writes).
        self.table_requests: asyncio.Queue[int] = asyncio.Queue(TABLE_REQUESTS)
        self.entity_formatter = EntityFormatter(self.codec.p4info, qualified=True)

    # -- glue -------------------------------------------------------------------------

    def hello(self) -> control_pb2.Hello:
        return control_pb2.Hello(
            switch_name=self.switch,
            agent_version=__version__,
            target=self.target_kind,
            ports=[
                control_pb2.PortInfo(
                    port=port,
                    ifname=ifname,
                    oper_up=self.effective.get(port, False),
                    mac=self._port_mac(port),
                )
                for port, ifname in sorted(self.port_map.items())
            ],
            applied_generation=self.writer.applied_generation,
            applied_digest=self.writer.applied_digest,
            device_id=self.device_id,
            target_health=self._health(),
        )

    def _health(self) -> control_pb2.TargetHealth:
        t, rb = self.target, self.writer.read_back
        return control_pb2.TargetHealth(
            reachable=t.reachable,
            primary=t.primary.is_set(),
            error=t.last_error,
            last_read_back_wall_ns=rb.wall_ns,
            missing=rb.missing,
            unexpected=rb.unexpected,
            modified=rb.modified,
            repaired_wall_ns=rb.repaired_wall_ns,
            verify_interval_s=math.ceil(self.verify_interval),
            wall_ns=time.time_ns(),
            primary_election_id=(
                "" if t.primary_election_id is None else str(t.primary_election_id)
            ),
            election_id=str(t.election_id),
            reconciling=t.primary.is_set() and self.writer.reconciling,
        )

    def _health_changed(self) -> None:
        """Tell the controller when the target's health changed, and after every read-back
        (which moves last_read_back_wall_ns): a silent agent means nothing changed."""
        health = self._health()
        self.health, was = health, self.health
        was.wall_ns = health.wall_ns
        if was != health:
            self._send(control_pb2.AgentMessage(target_health=health))

    def _send(self, msg: control_pb2.AgentMessage) -> None:
        self.session.send(msg)

    async def _from_controller(self, msg: control_pb2.ControllerMessage) -> None:
        if msg.WhichOneof("msg") == "read_tables":
            self._read_tables(msg.read_tables.request_id)
            return
        await self.writer.controller_message(msg)

    def _read_tables(self, request_id: int) -> None:
        """Queue a ReadTables for the tables task (never behind the writer's states)."""
        try:
            self.table_requests.put_nowait(request_id)
        except asyncio.QueueFull:
            busy = control_pb2.TablesReport(
                request_id=request_id,
                switch_name=self.switch,
                read_wall_ns=time.time_ns(),
                error=f"busy: {TABLE_REQUESTS} table reads already queued",
            )
            self._send(control_pb2.AgentMessage(tables=busy))

    def wanted(self) -> Pipeline | None:
        """What the writer installs: the desired pipeline with the down ports' members out."""
        desired = self.writer.desired()
        return None if desired is None else repair(desired, self.writer.excluded())

    def matrix_classes(self) -> list[int]:
        """The traffic matrix classes this switch counts (a ToR's; none elsewhere)."""
        desired = self.writer.desired()  # local repair never touches the matrix
        if desired is None:
            return []
        return sorted(
            {e.dst_class for e in desired.entries.values() if isinstance(e, MatrixDestEntry)}
        )

    def roce_classes(self) -> list[int]:
        """The traffic classes the switch's QoS map gives (best effort, 0, always): the ones
        whose RoCEv2 counts are read."""
        desired = self.writer.desired()
        classes = {0}
        if desired is not None:
            classes.update(
                e.traffic_class for e in desired.entries.values() if isinstance(e, QosEntry)
            )
        return sorted(classes)

    def _port_mac(self, port: int) -> int:
        held = self.writer.held
        if held is not None:
            for cfg in held.ports:
                if cfg.port == port and cfg.mac:
                    return cfg.mac
        return self.monitor.macs.get(port, 0)

    async def _set_effective(self, event: PortEvent) -> None:
        """Tell the writer when carrier-and-LLDP state of a port changes."""
        up = self.carrier.get(event.port, False) and event.port not in self.lldp_down
        if self.effective.get(event.port) == up and not event.initial:
            return
        self.effective[event.port] = up
        await self.writer.port_event(
            PortEvent(
                event.port,
                event.ifname,
                up,
                event.monotonic_ns,
                event.wall_ns,
                event.initial,
                event.mac,
            )
        )

    async def on_carrier(self, event: PortEvent) -> None:
        self.carrier[event.port] = event.up
        if not event.up:
            self.neighbors.forget([event.port])
            self.lldp_down.discard(event.port)
        await self._set_effective(event)

    async def on_packet_in(self, packet: PacketIn) -> None:
        eth_type = packet.payload[12:14]
        if eth_type == PROBE_ETH_TYPE or (
            eth_type == ETH_TYPE_IPV4 and packet.payload[23:24] == PROBE_IP_PROTO
        ):
            # An answer to one of ours (the far data plane answered it), or stray.
            self.prober.receive(packet.payload, packet.port, time.monotonic_ns())
            return
        if eth_type != ETH_TYPE_LLDP:
            sample = parse_nak(packet.payload, packet.port, time.time_ns())
            if sample is not None:
                self.nak_samples.add(sample)
            return
        change = self.neighbors.receive(
            packet.port, packet.payload, time.time_ns(), time.monotonic_ns()
        )
        if change in HEARD and packet.port in self.lldp_down:
            LOG.info("port %d: LLDP heard again", packet.port)
            self.lldp_down.discard(packet.port)
            await self._set_effective(self._synthetic(packet.port))

    def one_way_failures(self, mono_ns: int) -> list[int]:
        """Ports, not yet taken down, whose switch neighbour went silent with carrier up."""
        servers = self._server_ports()
        return [
            port
            for port in self.neighbors.expired(mono_ns)
            if port not in self.lldp_down and self.carrier.get(port) and port not in servers
        ]

    def _server_ports(self) -> frozenset[int]:
        """Ports the controller's plan cables to a server NIC. A server that stops speaking
        LLDP (lldpd stopped, busy, or never installed) says nothing about the link, so their
        silence never takes a port down; only a switch peer's silence is a one-way failure."""
        return server_ports(self.writer.held)

    def _synthetic(self, port: int) -> PortEvent:
        return PortEvent(
            port, self.port_map[port], True, time.monotonic_ns(), time.time_ns(), False
        )

    # -- periodic tasks ---------------------------------------------------------------

    async def lldp_loop(self) -> None:
        while True:
            if self.target.primary.is_set():
                for port in sorted(self.port_map):
                    if not self.carrier.get(port):
                        continue
                    frame = build_lldp(self.switch, port, self._port_mac(port), self.lldp_ttl)
                    try:
                        await self.target.packet_out(frame, port)
                    except TARGET_LOST:
                        break  # the P4 stream reconnects by itself
                now = time.monotonic_ns()
                for port in self.one_way_failures(now):
                    LOG.warning("port %d: LLDP neighbour expired with carrier up", port)
                    self.lldp_down.add(port)
                    event = self._synthetic(port)
                    await self._set_effective(event)
                self._send(control_pb2.AgentMessage(neighbors=self.neighbors.report(now)))
            await asyncio.sleep(self.lldp_interval)

    async def probe_loop(self) -> None:
        """Send a round of latency probes every Probing.interval_ms, each stamped just before
        it goes out, spread over PROBE_PACE_SHARE of the round: a round sent at once is a burst
        of packet-outs and answers that a link event arriving with it waits behind (failover's
        tail grew with it in bench.telemetry). Rounds start on this switch's own tick
        (agent/phase.py), not with every other agent's."""
        while True:
            self.prober.configure(self.writer.held)
            interval = self.prober.interval_s
            if interval is not None and self.target.primary.is_set():
                self.prober.expire(time.monotonic_ns())
                round_ = self.prober.plan(lambda port: self.effective.get(port, False))
                gap = interval * PROBE_PACE_SHARE / max(1, len(round_))
                for i, planned in enumerate(round_):
                    if i:
                        await asyncio.sleep(gap)
                    frame = self.prober.request(planned, time.monotonic_ns())
                    try:
                        await self.target.packet_out(frame, planned.port)
                    except TARGET_LOST:
                        break  # the P4 stream reconnects by itself; the rest time out
            await asyncio.sleep(
                phase.until_next(f"{self.switch}/probes", interval or PROBE_IDLE_S, time.time())
            )

    async def counters_loop(self) -> None:
        """Read and report the counters every --counters-interval, on this switch's own tick
        of it (agent/phase.py): agents started together do not all read at once."""
        while True:
            await asyncio.sleep(
                phase.until_next(f"{self.switch}/counters", self.counters_interval, time.time())
            )
            # Read without a controller too: metrics show the counters (sending is a no-op).
            if not self.target.primary.is_set():
                continue
            try:
                counters = await self.target.read_port_counters(self.port_counters)
            except Exception as err:  # a failed poll is retried next period
                LOG.warning("counter read failed: %s", err)
                continue
            msg = control_pb2.Counters(wall_ns=time.time_ns())
            for port in sorted(self.port_map):
                msg.ports.append(control_pb2.PortCounters(port=port, **counters.get(port, {})))
            try:
                telemetry = await self.target.read_telemetry(
                    self.codec, self.matrix_classes(), self.port_map, self.roce_classes()
                )
            except Exception as err:  # as the port counters: tried again next period
                LOG.warning("traffic matrix and RoCE counts read failed: %s", err)
                telemetry = None
            if telemetry is not None:
                msg.matrix_packets.extend(telemetry.matrix.packets)
                msg.matrix_bytes.extend(telemetry.matrix.octets)
                msg.roce_cells.extend(telemetry.roce.cells)
                msg.roce_packets.extend(telemetry.roce.packets)
            self.nak_samples.take(msg)
            self.prober.take(msg, time.monotonic_ns())
            self.last_counters = msg
            self._send(control_pb2.AgentMessage(counters=msg))

    async def tables_loop(self) -> None:
        while True:
            request_id = await self.table_requests.get()
            report = await tables_report(
                self.target,
                self.codec,
                self.wanted(),
                request_id=request_id,
                switch_name=self.switch,
                formatter=self.entity_formatter,
            )
            self._send(control_pb2.AgentMessage(tables=report))

    async def verify_loop(self) -> None:
        while True:
            await asyncio.sleep(self.verify_interval)
            self.writer.verify()

    async def _session(self) -> None:
        # The first Hello must carry the ports' real state.
        await self.monitor.initial_done.wait()
        await self.session.run()

    def tasks(self) -> dict[str, Callable[[], Coroutine[Any, Any, None]]]:
        return {
            "writer": self.writer.run,
            "port-monitor": lambda: self.monitor.run(self.on_carrier),
            "p4-stream": lambda: self.target.run(self.writer.target_ready, self.on_packet_in),
            "controller-session": self._session,
            "lldp": self.lldp_loop,
            "counters": self.counters_loop,
            "probes": self.probe_loop,
            "verify": self.verify_loop,
            "tables": self.tables_loop,
        }

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                async with asyncio.TaskGroup() as group:
                    for name, start in self.tasks().items():
                        group.create_task(start(), name=name)
            except* Exception as failed:
                for err in failed.exceptions:
                    LOG.error("task failed, restarting all: %r", err, exc_info=err)
            await asyncio.sleep(max(0.0, RESTART_THROTTLE_S - (loop.time() - started)))


async def _serve(agent: Agent) -> None:
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    # `systemctl reload` (kill -HUP): nothing to read now, as the certificates are read at each
    # connection; unhandled, SIGHUP would end the agent.
    loop.add_signal_handler(
        signal.SIGHUP, LOG.info, "SIGHUP: TLS files are read again at the next connection"
    )
    served = None
    if agent.metrics_address:
        agent.metrics.watch(loop, agent)
        served = agent.metrics.serve(agent.metrics_address, agent.metrics_tls)
    # A cut's burst set off a full collection in every agent at once, each walking start-up's
    # ~110,000 objects (40-55 ms): on 2 cores, carrier detection waited 140 ms behind them
    # (bench.telemetry's failover tail). Frozen, they are out of those scans.
    freeze_start_up()
    # After everything that can refuse the start: a refused start is one line.
    LOG.info("running, P4Info from %s", agent.codec.origin)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await agent.run()
    finally:
        if served is not None:
            served.close()


def _setup_logging(level: str, log_format: str, switch: str) -> None:
    """railfabric's one logging setup, each text line naming the switch (labs and hosts run
    many agents side by side); json lines have the fields every daemon's have."""
    cli.setup_logging(level, log_format)
    if log_format == "json":
        return
    tagged = logging.Formatter(cli.LOG_FORMAT.replace("%(name)s", f"{switch} %(name)s", 1))
    for handler in logging.getLogger().handlers:
        handler.setFormatter(tagged)


def main(argv: Sequence[str] | None = None) -> int:
    args = cli.parse_args(build_parser(), argv)
    _setup_logging(args.log_level, args.log_format, args.switch)
    try:
        agent = Agent(args)
    except (P4InfoMismatch, ValueError, OSError, tls.TlsError) as err:
        print(f"railfabric-agent: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    try:
        asyncio.run(_serve(agent))
    except MetricsError as err:
        print(f"railfabric-agent: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
