"""A running lab: its Mininet network (mininet_labs/network.py: servers, switches running a
target and its agent, cables, the controller), and the handles scenarios use (admin API,
switch counters, traffic tools). `with Lab(...) as lab:` tears everything down whatever
happens, SIGINT/SIGTERM included; a lab killed outright is cleaned up by its reaper.

The controller is one process with its state in SQLite under the run directory, or, with
`LabOptions(controllers=3)`, that many replicas sharing a 3-member etcd cluster whose members
keep their data and logs under the run directory too (docs/architecture.md §12): one leads,
every agent lists them all. The lab then supervises them as systemd would (a replica that
exits, deposed, is started again as a follower), and its admin channel, `controller_addr`
and railctl command lines reach whichever replica leads at the time."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import grpc
from finsy.proto import p4r, p4r_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mininet.net import Mininet
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import PORT_COUNTERS
from controller.fabric import Fabric, LatencyIntent, LldpIntent
from controller.intent import load_fabric, to_explicit_yaml
from mininet_labs import certs, lldpd
from mininet_labs.clean import clean
from mininet_labs.etcd import EtcdCluster, Writers
from mininet_labs.netlinks import PREFIX, LabError, Names, new_tag, unroutable
from mininet_labs.network import build_network
from mininet_labs.processes import (
    BIN,
    DATA_PLANE_NICE,
    REPO,
    Child,
    Processes,
    SwitchTarget,
    free_port,
    tail,
    wait_listening,
)
from mininet_labs.report import Table
from mininet_labs.topology import LabTopology
from mininet_labs.traffic import FlowSpec, Packet, read_records
from mininet_labs.waiting import wait_for
from railfabric import fabric_p4 as p4
from railfabric.ecmp import HashFields
from railfabric.p4format import EntityFormatter
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2

# The QoS formulas know speeds from 1G up; the lab's fabric declares 1G links and each target
# runs its ports (or its lossless queues) at the target's `port_rate_mbps`, slow enough for a
# software data plane to congest (processes.py). Byte thresholds (ECN Kmin/Kmax, PFC xoff/xon)
# are what the switch applies.
LAB_LINK_SPEED_MBPS = 1000
LAB_PORT = 4791  # receivers listen on the RoCEv2 port
# A server port silent this long raises an alarm: the servers' lldpd sends every second with a
# 10 s TTL, so only a server whose lldpd stopped (or a NIC that went elsewhere) is that quiet.
LAB_LLDP = LldpIntent(expect_servers=True, server_ttl_s=15)

COUNTERS = {
    "tx_packets": p4.EGRESS_PORT_COUNTER,
    "rx_packets": p4.INGRESS_PORT_COUNTER,
    "drops": p4.DROP_COUNTER,
    "ecn_marks": p4.ECN_MARK_COUNTER,
    "pfc_pause_tx": p4.PFC_PAUSE_TX_COUNTER,
    "pfc_pause_rx": p4.PFC_PAUSE_RX_COUNTER,
    "pfc_storms": p4.PFC_STORM_COUNTER,
}
# COUNTERS' keys that stand still once the traffic is drained, and the PortCounters field the
# agents report each in (packet counts move with LLDP all the time).
OBSERVED = {
    "drops": "drops",
    "ecn_marks": "ecn_marks",
    "pfc_pause_tx": "pfc_pause_tx",
    "pfc_pause_rx": "pfc_pause_rx",
    "pfc_storms": "pfc_watchdog_storms",
}
# Agents report counters this often in the lab (the daemon's default is 5 s).
AGENT_COUNTERS_INTERVAL_S = 1.0

# Controller replicas (LabOptions.controllers > 1) share an etcd cluster of this many members:
# the smallest that survives losing one.
ETCD_MEMBERS = 3
# The service whose health says SERVING on the leading replica only (NOT_SERVING on followers).
FABRIC_CONTROL = control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name
# A replica that exits is started again (as systemd's Restart= would) at most this many times
# in one lab: one that cannot start at all is a broken lab, not a supervisor's job.
REPLICA_RESTARTS = 10
# The lab's channels to replicas reconnect quickly after a replica is killed and started
# again at the same address (gRPC's default backoff grows to 120 s).
REPLICA_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


@dataclass(frozen=True)
class LabOptions:
    hold_down_s: float = 2.0
    # The lab cuts the same link every few seconds on purpose: a short damping half-life
    # keeps those deliberate cuts from being damped (damping has its own controller tests).
    damping_half_life_s: float = 1.0
    lldp_interval_s: float = 1.0
    keep_logs: bool = False
    # Controller processes. 1: one controller, its state in SQLite (--state-dir) under the run
    # directory. More: replicas on an etcd cluster of ETCD_MEMBERS members started with the
    # lab (a LabError when etcd is not installed), one of them elected leader on a lease of
    # `lease_ttl_s`.
    controllers: int = 1
    lease_ttl_s: int = 2
    # The controller's web view (--http HOST:PORT, plaintext: the lab's own loopback); None:
    # none. One controller only: replicas would each need an address of their own.
    http: str | None = None
    # Called with a line for each long step (building, starting, converging); None: quiet.
    progress: Callable[[str], None] | None = None
    # Seconds between the agents' Counters reports.
    counters_interval_s: float = AGENT_COUNTERS_INTERVAL_S
    # The latency probes' intent instead of the fabric file's (bench.telemetry compares
    # failover with probes off and on); None: the file's.
    latency: LatencyIntent | None = None


class Interrupted(BaseException):
    """SIGTERM/SIGINT while the lab runs: unwinds through every `finally`."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def lab_fabric(fabric: Fabric) -> Fabric:
    """The same fabric with every cable at the lab's declared speed, and servers expected to
    speak LLDP: every one runs lldpd (mininet_labs/lldpd.py)."""
    links = tuple(dataclasses.replace(x, speed_mbps=LAB_LINK_SPEED_MBPS) for x in fabric.links)
    nics = tuple(dataclasses.replace(n, speed_mbps=LAB_LINK_SPEED_MBPS) for n in fabric.nics)
    return dataclasses.replace(fabric, links=links, nics=nics, lldp=LAB_LLDP)


@dataclass
class Sender:
    child: Child
    flows: list[FlowSpec]


class Burster:
    """A `traffic burst` process: sends one flow's datagrams on request."""

    def __init__(self, child: Child) -> None:
        self.child = child

    def send(self, flow: FlowSpec, count: int) -> int:
        stdin, stdout = self.child.proc.stdin, self.child.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{flow} {count}\n".encode())
        stdin.flush()
        line = stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "sent":
            log = tail(self.child.log) if self.child.log else ""
            raise LabError(f"{self.child.name} stopped answering:\n{log}")
        return int(line[1])


class _LeaderChannel(grpc.Channel):
    """The lab's admin channel when the controller has replicas: each call goes to the replica
    that leads (never to a follower, which would answer some reads from its warm copy of the
    store and not the leader's own view). A call that ends UNAVAILABLE (the leader died, or
    stepped down) is made once more at the leader found then (health SERVING; found while an
    election runs). The admin API is unary calls only."""

    def __init__(self, lab: Lab) -> None:
        self._lab = lab

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[..., Any] | None = None,
        response_deserializer: Callable[..., Any] | None = None,
        **_options: Any,
    ) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
        return _ToLeader(self._lab, method, request_serializer, response_deserializer)

    def _unary_only(self, method: str) -> LabError:
        return LabError(f"{method}: the lab's channel to the leading replica carries unary calls")

    def unary_stream(
        self, method: str, *args: Any, **kwargs: Any
    ) -> grpc.UnaryStreamMultiCallable[Any, Any]:
        raise self._unary_only(method)

    def stream_unary(
        self, method: str, *args: Any, **kwargs: Any
    ) -> grpc.StreamUnaryMultiCallable[Any, Any]:
        raise self._unary_only(method)

    def stream_stream(
        self, method: str, *args: Any, **kwargs: Any
    ) -> grpc.StreamStreamMultiCallable[Any, Any]:
        raise self._unary_only(method)

    def subscribe(self, callback: Callable[..., None], try_to_connect: bool = False) -> None:
        raise LabError("the lab's channel to the leading replica has no connectivity of its own")

    def unsubscribe(self, callback: Callable[..., None]) -> None:
        pass

    def close(self) -> None:
        pass  # the channels to the replicas are the lab's (Lab._stop_replicas closes them)

    def __enter__(self) -> _LeaderChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _ToLeader(grpc.UnaryUnaryMultiCallable):  # type: ignore[type-arg]
    """One admin method, called on the replica that leads (see _LeaderChannel)."""

    def __init__(
        self,
        lab: Lab,
        method: str,
        request_serializer: Callable[..., Any] | None,
        response_deserializer: Callable[..., Any] | None,
    ) -> None:
        self._lab = lab
        self._method = method
        self._codec = (request_serializer, response_deserializer)

    def _at(self, addr: str) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
        return self._lab._replica_channel(addr).unary_unary(self._method, *self._codec)

    def _retried(self, call: Callable[[grpc.UnaryUnaryMultiCallable[Any, Any]], Any]) -> Any:
        addr = self._lab._last_leader()
        try:
            return call(self._at(addr))
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        self._lab._forget_leader(addr)
        return call(self._at(self._lab.find_leader()))

    def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return self._retried(lambda at: at(request, *args, **kwargs))

    def with_call(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return self._retried(lambda at: at.with_call(request, *args, **kwargs))

    def future(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return self._at(self._lab._last_leader()).future(request, *args, **kwargs)


class Lab:
    def __init__(
        self, fabric_path: Path, target: SwitchTarget, options: LabOptions | None = None
    ) -> None:
        self.fabric_path = fabric_path
        self.target = target
        self.options = options or LabOptions()
        self.names = Names(new_tag())
        self.run_dir = Path("/tmp") / self.names.tag
        self.fabric = lab_fabric(load_fabric(fabric_path))
        if self.options.latency is not None:
            self.fabric = dataclasses.replace(self.fabric, latency=self.options.latency)
        self.topology = LabTopology(self.fabric, self.names)
        self.processes = Processes(self.run_dir)
        if self.options.controllers < 1:
            raise LabError(f"{self.options.controllers} controllers: a lab needs at least one")
        if self.options.http and self.options.controllers > 1:
            raise LabError("LabOptions.http: the web view is served by one controller")
        # Every controller process's address (one, or one per replica).
        self._controller_addrs: list[str] = []
        self.switch_addr: dict[str, str] = {}
        # Where each switch's agent serves /metrics (kept across agent restarts).
        self.agent_metrics: dict[str, str] = {}
        self.thrift_port: dict[str, int] = {}
        self.agents: dict[str, Child] = {}
        self._channels: list[grpc.Channel] = []
        self._admin: admin_pb2_grpc.FabricAdminStub | None = None
        self._p4: dict[str, p4r_grpc.P4RuntimeStub] = {}
        self._counter_ids: dict[str, int] = {}
        self._old_handlers: dict[int, Any] = {}
        self._controller: Child | None = None
        # With replicas: the etcd cluster, each replica's process (None while it is down), the
        # leader last seen, the lab's channel to each replica, and what the supervisor did.
        self.etcd: EtcdCluster | None = None
        self._replicas: list[Child | None] = []
        self._leader: str | None = None
        self._replica_channels: dict[str, grpc.Channel] = {}
        self.replica_restarts: list[str] = []
        self._switches: dict[str, Child] = {}
        self._lldpd: dict[str, tuple[lldpd.ServerLldpd, Child]] = {}
        self.net: Mininet | None = None
        self.failed = False
        self._reaper: subprocess.Popen[bytes] | None = None

    # -- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> Lab:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, _interrupt)
        # If this process is killed outright (no teardown), the reaper cleans up by tag.
        self._reaper = subprocess.Popen(
            [
                str(BIN / "python"),
                "-m",
                "mininet_labs.clean",
                "--reap",
                str(os.getpid()),
                self.names.tag,
            ],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
        )
        try:
            self.start()
        except BaseException as err:
            # Keep the logs of a lab that broke, not of one stopped while it started.
            self.failed = not isinstance(err, Interrupted)
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and not isinstance(exc, Interrupted):
            self.failed = True  # keep the logs of a lab that broke, not of one stopped
        self.close()

    def start(self) -> None:
        reason = self.target.unavailable()
        if reason is not None:
            raise LabError(f"--target {self.target.kind}: {reason}")
        reason = lldpd.unavailable()
        if reason is not None:
            raise LabError(reason)
        # Before the lab makes an interface: an lldpd of the machine must not speak on them.
        for done in lldpd.guard_foreign_lldpd(self.topology.root_interfaces()):
            self.progress(done)
        self.run_dir.mkdir(parents=True)
        # Every channel of the lab is mutual TLS, with certificates made for this run.
        self.certs = certs.LabCerts(self.run_dir / "pki")
        self._write_fabric()
        if not self.target.completes_partial_checksums and shutil.which("ethtool") is None:
            raise LabError(
                "ethtool is not on PATH: the lab needs it to turn TX checksum offload off on "
                "the host NICs, since this target forwards partial checksums as they are "
                "(install ethtool; scripts/setup.sh does)"
            )
        self.progress(
            f"building the Mininet network: {len(self.topology.hosts)} servers, "
            f"{len(self.fabric.switches)} switches, {len(self.topology.cables)} cables"
        )
        self.net = build_network(self)
        # Now, not at the first cut, which would count the opening in its detection.
        self.topology.open_wire()
        self.progress(f"starting the controller and {len(self.fabric.switches)} switches")
        self.net.start()
        channel: grpc.Channel
        if self.replicated:
            self._wait_replicas()
            channel = _LeaderChannel(self)
        else:
            channel = self.certs.sync_channel(self.controller_addr)
            self._channels.append(channel)
        self._admin = admin_pb2_grpc.FabricAdminStub(channel)
        self.wait_converged(timeout_s=60)
        for name in self._switches:
            self.target.after_pipeline(self.thrift_port[name], self.topology.switch_ports(name))

    def progress(self, text: str) -> None:
        """A progress line for a long step (LabOptions.progress), for scenarios too."""
        if self.options.progress is not None:
            self.options.progress(text)

    # -- processes, started and stopped by the Mininet nodes (network.py) ----------------

    def start_controller(self) -> None:
        if self.replicated:
            self._start_replicas()
            return
        self._controller_addrs = [f"127.0.0.1:{free_port()}"]
        o = self.options
        controller = self.processes.start(
            "controller",
            [
                str(BIN / "railfabric-controller"),
                "--fabric", str(self.fabric_file),
                "--listen", self.controller_addr,
                "--state-dir", str(self.run_dir / "state"),
                "--hold-down-s", f"{o.hold_down_s:g}",
                "--damping-half-life-s", f"{o.damping_half_life_s:g}",
                *certs.flags(self.certs.controller()),
                *(["--http", o.http] if o.http else []),
            ],
        )  # fmt: skip
        assert controller.log is not None
        self._controller = controller
        wait_listening(self.controller_addr, 20, controller.proc, controller.log)

    def stop_controller(self) -> None:
        if self._controller is not None:
            self.processes.stop(self._controller)
            self._controller = None
        self._stop_replicas()

    # -- controller replicas (LabOptions.controllers > 1) --------------------------------

    @property
    def replicated(self) -> bool:
        """Does this lab run controller replicas on etcd (rather than one controller)?"""
        return self.options.controllers > 1

    @property
    def controller_addrs(self) -> tuple[str, ...]:
        """Every controller process's address, in replica order (what each agent is given)."""
        return tuple(self._controller_addrs)

    @property
    def controller_addr(self) -> str:
        """The controller's address: with replicas, the one that leads now (waiting while an
        election runs); "" before the lab starts."""
        if not self.replicated or not self._controller_addrs:
            return self._controller_addrs[0] if self._controller_addrs else ""
        return self.leader()

    def _start_replicas(self) -> None:
        o = self.options
        self.progress(
            f"starting a {ETCD_MEMBERS}-member etcd cluster and {o.controllers} controller "
            f"replicas (lease {o.lease_ttl_s} s)"
        )
        # LabError when etcd is not installed or a member does not come up.
        # Mutual TLS with the lab's CA (etcds://), as every other channel of the lab.
        # Each replica reaches it at a loopback address of its own (cut_off_from_etcd).
        cluster = EtcdCluster(
            ETCD_MEMBERS,
            self.run_dir / "etcd",
            pki=self.certs.directory,
            also_on=tuple(self.names.etcd_host(i) for i in range(o.controllers)),
            # etcd's authentication on, as in production: only the controllers' certificate
            # reads and writes the store (a switch's is refused).
            writers=Writers(f"/{self.names.tag}", (str(self.certs.CONTROLLER),)),
        )
        self.etcd = cluster.__enter__()  # stopped by _stop_replicas (and close)
        self._controller_addrs = [f"127.0.0.1:{free_port()}" for _ in range(o.controllers)]
        self._replicas = [None] * o.controllers
        for i in range(o.controllers):
            self.start_replica(i, wait=False)

    def _wait_replicas(self) -> None:
        for addr, child in zip(self._controller_addrs, self._replicas, strict=True):
            assert child is not None and child.log is not None
            wait_listening(addr, 20, child.proc, child.log)
        self.find_leader(timeout_s=30)

    def replica_argv(self, i: int) -> list[str]:
        """Replica `i`'s command line: the etcd store (its prefix the lab's tag), its own
        address (which followers send agents to: --listen names a host), the lease."""
        assert self.etcd is not None
        o = self.options
        return [
            str(BIN / "railfabric-controller"),
            "--fabric", str(self.fabric_file),
            "--listen", self._controller_addrs[i],
            "--store", f"{self.etcd.url_on(self.names.etcd_host(i))}/{self.names.tag}",
            "--lease-ttl-s", str(o.lease_ttl_s),
            "--hold-down-s", f"{o.hold_down_s:g}",
            "--damping-half-life-s", f"{o.damping_half_life_s:g}",
            *certs.flags(self.certs.controller()),
        ]  # fmt: skip

    def start_replica(self, i: int, *, wait: bool = True) -> None:
        """Start replica `i` (again, after `kill_replica`: a follower while another leads);
        with `wait`, until it answers health (as a follower or the leader)."""
        if self._replicas[i] is not None:
            return
        child = self.processes.start(f"controller-{i}", self.replica_argv(i))
        self._replicas[i] = child
        if wait:
            addr = self._controller_addrs[i]
            wait_for(
                f"controller replica {i} ({addr}) to answer health",
                lambda: None if self._alive(child) and self.serving(addr) is None else True,
                timeout_s=30,
                every_s=0.02,
            )
            self._check_alive()

    def kill_replica(self, i: int) -> None:
        """SIGKILL replica `i` (a crash: no resignation, its lease expires) and reap it."""
        child = self._replicas[i]
        if child is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        child.proc.wait(timeout=10)
        self.processes.stop(child)
        self._replicas[i] = None
        addr = self._controller_addrs[i]
        if self._leader == addr:
            self._leader = None
        # A fresh channel for its next process: the old one waits out a reconnect backoff.
        channel = self._replica_channels.pop(addr, None)
        if channel is not None:
            channel.close()

    @contextlib.contextmanager
    def cut_off_from_etcd(self, i: int) -> Iterator[None]:
        """Replica `i` reaches no etcd member while inside (a partition: the others still do);
        LabError when the route that does it cannot be added."""
        with unroutable(self.names.etcd_host(i)):
            yield

    def replica_of(self, addr: str) -> int:
        return self._controller_addrs.index(addr)

    def replica_running(self, i: int) -> bool:
        child = self._replicas[i]
        return child is not None and self._alive(child)

    @staticmethod
    def _alive(child: Child) -> bool:
        return child.proc.poll() is None

    def _replica_channel(self, addr: str) -> grpc.Channel:
        channel = self._replica_channels.get(addr)
        if channel is None:
            channel = self.certs.sync_channel(addr, REPLICA_CHANNEL_OPTIONS)
            self._replica_channels[addr] = channel
        return channel

    def admin_at(self, addr: str) -> admin_pb2_grpc.FabricAdminStub:
        """The admin API of replica `addr` itself, wherever the leadership is (a follower
        answers the store's reads from its warm copy, and refuses the rest with UNAVAILABLE
        naming the leader)."""
        return admin_pb2_grpc.FabricAdminStub(self._replica_channel(addr))

    def serving(self, addr: str, timeout_s: float = 0.5) -> bool | None:
        """Does replica `addr` lead (its FabricControl health SERVING)? False: it follows
        (NOT_SERVING); None: no answer."""
        stub = health_pb2_grpc.HealthStub(self._replica_channel(addr))
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=FABRIC_CONTROL), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def find_leader(
        self, timeout_s: float | None = None, among: Sequence[str] | None = None
    ) -> str:
        """The replica (of `among`, every one by default) whose health says SERVING, polled
        until one does; LabError after `timeout_s` (default: the lease and 15 s)."""
        candidates = list(self._controller_addrs if among is None else among)
        timeout = self.options.lease_ttl_s + 15.0 if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()  # restarts a replica that exited, as its supervisor would
            for addr in candidates:
                if self.replica_running(self.replica_of(addr)) and self.serving(addr):
                    self._leader = addr
                    return addr
            if time.monotonic() > deadline:
                raise LabError(
                    f"no controller replica of {', '.join(candidates)} leads after {timeout:g} s"
                )
            time.sleep(0.01)

    def leader(self) -> str:
        """The replica that leads now: the last one seen, if it still says so; else the one
        found (waiting while an election runs)."""
        if self._leader is not None and self.serving(self._leader):
            return self._leader
        self._leader = None
        return self.find_leader()

    def _forget_leader(self, addr: str) -> None:
        if self._leader == addr:
            self._leader = None

    def _last_leader(self) -> str:
        """The leader last seen, found when none is known (the admin channel's first try)."""
        return self._leader if self._leader is not None else self.find_leader()

    def _supervise(self) -> None:
        """Start again a replica that exited (a deposed leader exits 3, one that lost a race
        to fence the store 1: their supervisor restarts them as followers)."""
        for i, child in enumerate(self._replicas):
            if child is None or self._alive(child):
                continue
            code = child.proc.returncode
            log = tail(child.log) if child.log else ""
            self.processes.stop(child)
            self._replicas[i] = None
            if len(self.replica_restarts) >= REPLICA_RESTARTS:
                raise LabError(
                    f"controller replica {i} exited with {code} after {REPLICA_RESTARTS} "
                    f"restarts:\n{log}"
                )
            self.replica_restarts.append(f"replica {i} exited with {code}; started again")
            self.progress(self.replica_restarts[-1])
            if self._leader == self._controller_addrs[i]:
                self._leader = None
            self.start_replica(i, wait=False)

    def _stop_replicas(self) -> None:
        """Followers first, then the leader (which resigns: nobody is left to take over and
        recompute), then the etcd cluster."""
        running = [(i, child) for i, child in enumerate(self._replicas) if child is not None]
        for leading in (False, True):
            self.processes.stop_many(
                [c for i, c in running if (self._controller_addrs[i] == self._leader) is leading]
            )
        self._replicas = [None] * len(self._replicas)
        for channel in self._replica_channels.values():
            channel.close()
        self._replica_channels.clear()
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None

    def start_target(self, name: str) -> None:
        """Start switch `name`'s P4Runtime target (its agent follows in start_agent)."""
        addr = f"127.0.0.1:{free_port()}"
        ports = self.topology.switch_ports(name)
        self.thrift_port[name] = free_port()
        self._switches[name] = self.processes.start(
            f"switch-{name}",
            self.target.argv(
                self.device_id(name), addr, ports, self.thrift_port[name], self.certs.switch(name)
            ),
            nice=DATA_PLANE_NICE,
        )
        self.switch_addr[name] = addr

    def start_agent(self, name: str) -> None:
        """Once switch `name`'s target listens, start its agent."""
        child, addr, o = self._switches[name], self.switch_addr[name], self.options
        assert child.log is not None
        wait_listening(addr, 20, child.proc, child.log)
        ports = self.topology.switch_ports(name)
        self.agents[name] = self.processes.start(
                f"agent-{name}",
                [
                    str(BIN / "railfabric-agent"),
                    "--switch", name,
                    "--controller", ",".join(self.controller_addrs),
                    "--target", addr,
                    "--device-id", str(self.device_id(name)),
                    "--port-map", ",".join(f"{p}={i}" for p, i in ports.items()),
                    "--p4info", str(DEFAULT_P4INFO),
                    "--election-id", "10",
                    "--lldp-interval", f"{o.lldp_interval_s:g}",
                    "--counters-interval", f"{o.counters_interval_s:g}",
                    "--metrics", self.agent_metrics.setdefault(name, f"127.0.0.1:{free_port()}"),
                    *certs.flags(self.certs.switch(name)),
                    *self.target.agent_args(),
                ],
            )  # fmt: skip

    def start_lldpd(self, host: str) -> None:
        """Start server `host`'s lldpd in its namespace; return once it speaks on every NIC."""
        nics = tuple(hp.ifname for hp in self.topology.host_ports if hp.nic.host == host)
        server = lldpd.ServerLldpd(host, nics, self.run_dir)
        server.write_config()
        child = self.processes.start(server.name, server.argv(), netns=self.names.host_ns(host))
        self._lldpd[host] = (server, child)
        assert child.log is not None
        server.wait_ready(lambda: child.proc.poll() is None, child.log)

    def stop_lldpd(self, host: str) -> None:
        running = self._lldpd.pop(host, None)
        if running is not None:
            self.processes.stop(running[1])

    def lldpdus_sent(self) -> dict[str, int]:
        """LLDPDUs the servers' lldpd sent so far, by NIC full name (srv-b1-s1/nic1): the
        frames a ToR's server port receives besides the servers' traffic."""
        return {
            f"{host}/{nic}": n
            for host, (server, _) in self._lldpd.items()
            for nic, n in server.transmitted().items()
        }

    def stop_switch(self, name: str) -> None:
        """Stop switch `name`'s agent, then its target."""
        self.stop_switches([name])

    def stop_switches(self, names: Sequence[str]) -> None:
        """Stop these switches' agents (together), then their targets (together)."""
        for group in (self.agents, self._switches):
            children = [group.pop(name) for name in names if name in group]
            self.processes.stop_many(children)

    def close(self) -> None:
        # A second Ctrl-C must not cut the teardown short.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        if self.net is not None:
            self.net.stop()
            self.net = None
        self.processes.stop_all()
        self._stop_replicas()  # the etcd cluster, if net.stop did not get to it
        self.topology.close()
        # Whatever a build that failed half-way made: namespaces and links by the lab's tag.
        clean(self.names.tag, logs=False)
        defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
        for sig, default in defaults.items():
            signal.signal(sig, self._old_handlers.pop(sig, default))
        if self.run_dir.exists() and not self.failed and not self.options.keep_logs:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._reaper is not None:
            self._reaper.terminate()  # torn down already: nothing left for it
            self._reaper.wait(timeout=5)
            self._reaper = None

    def device_id(self, switch: str) -> int:
        """P4Runtime device id, distinct across concurrent labs: bmv2's notification socket
        (/tmp/bmv2-<device-id>-notifications.ipc) is shared by every switch on the machine."""
        return (int(self.names.tag[len(PREFIX) :], 16) % 1000) * 1000 + self.topology.ordinal[
            switch
        ]

    # -- controller ----------------------------------------------------------------------

    @property
    def admin(self) -> admin_pb2_grpc.FabricAdminStub:
        if self._admin is None:
            raise LabError("the lab is not running")
        return self._admin

    def railctl_argv(self, *args: str) -> list[str]:
        """A railctl command line against the lab's controller, as the lab's operator."""
        identity = certs.flags(self.certs.operator())
        return [str(BIN / "railctl"), "--controller", self.controller_addr, *identity, *args]

    def wait_converged(self, timeout_s: float) -> None:
        """Every agent connected and applied its state, every link up."""
        deadline = time.monotonic() + timeout_s
        why = shown = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                switches = self.admin.ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=5)
                links = self.admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True), timeout=5)
            except grpc.RpcError as err:
                why = f"admin API: {err.code().name} {err.details()}"
            else:
                waiting = [s.info.name for s in switches.switches if not s.converged]
                down = [
                    f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}"
                    for x in links.links
                ]
                status = (
                    f"{len(switches.switches) - len(waiting)}/{len(self.fabric.switches)} "
                    f"switches converged, {len(down)} links not up"
                )
                if status != shown:
                    self.progress(status)
                    shown = status
                if not waiting and not down:
                    return
                why = f"not converged: {waiting}; links not up: {down}"
            time.sleep(0.1)
        raise LabError(f"the fabric did not converge in {timeout_s:.0f} s ({why})")

    def _check_alive(self) -> None:
        self._supervise()
        for child in self.processes.children:
            if child.name.startswith(("controller", "switch-", "agent-", "lldpd-")) and (
                child.proc.poll() is not None
            ):
                log = tail(child.log) if child.log else ""
                raise LabError(f"{child.name} exited with {child.proc.returncode}:\n{log}")

    @property
    def fabric_file(self) -> Path:
        return self.run_dir / "fabric.yaml"

    def _write_fabric(self) -> None:
        self.fabric_file.write_text(
            f"# {self.fabric_path} with every cable at {LAB_LINK_SPEED_MBPS} Mb/s (lab)\n"
            + to_explicit_yaml(self.fabric)
        )

    def set_ecmp_hash(self, fields: HashFields, timeout_s: float = 60) -> None:
        """Reload the controller (SIGHUP) with `ecmp.hash: fields` and wait until every
        switch applied the state that carries it."""
        if self.fabric.ecmp_hash is fields:
            return
        self.fabric = dataclasses.replace(self.fabric, ecmp_hash=fields)
        self._write_fabric()
        since = time.time_ns()
        if self.replicated:  # followers reload nothing: the leader decides
            leader = self._replicas[self.replica_of(self.leader())]
            assert leader is not None
            leader.proc.send_signal(signal.SIGHUP)
        else:
            assert self._controller is not None
            self._controller.proc.send_signal(signal.SIGHUP)
        kinds = (admin_pb2.EVENT_KIND_INTENT_RELOADED, admin_pb2.EVENT_KIND_INTENT_REFUSED)
        deadline = time.monotonic() + timeout_s
        while not (done := self.events(limit=10, types=kinds, after_wall_ns=since)):
            if time.monotonic() > deadline:
                raise LabError(f"the controller did not reload {self.fabric_file} after SIGHUP")
            self._check_alive()
            time.sleep(0.05)
        if done[-1].type == admin_pb2.EVENT_KIND_INTENT_REFUSED:
            raise LabError(f"the controller refused ecmp.hash {fields.value}: {done[-1].message}")
        self.wait_converged(timeout_s)

    def events(
        self,
        limit: int = 1000,
        types: Sequence[admin_pb2.EventKind.ValueType] = (),
        after_wall_ns: int = 0,
    ) -> list[admin_pb2.Event]:
        """The controller's newest events, oldest first: at most `limit`, only of `types`
        (all when empty), only after `after_wall_ns` (Unix ns; 0 = no bound). Figures are in
        each event's typed `detail`, never in its `message`."""
        request = admin_pb2.ListEventsRequest(
            limit=limit, types=list(types), after_wall_ns=after_wall_ns
        )
        return list(self.admin.ListEvents(request).events)

    def link_state(self, key: str) -> int:
        for x in self.admin.ListLinks(admin_pb2.ListLinksRequest()).links:
            if f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}" == key:
                return int(x.state)
        raise LabError(f"the controller knows no link {key}")

    def predict(self, flow: FlowSpec) -> admin_pb2.PredictPathResponse:
        return self.admin.PredictPath(
            admin_pb2.PredictPathRequest(
                src_ip=flow.src,
                dst_ip=flow.dst,
                protocol=17,
                sport=flow.sport,
                dport=flow.dport,
                dst_qp=flow.dst_qp,
            )
        )

    # -- switch counters (P4Runtime Read, works on softswitch and bmv2 alike) ------------

    def counters(self, switch: str, ports: Sequence[int]) -> dict[int, dict[str, int]]:
        if not self._counter_ids:
            info = load_p4info(DEFAULT_P4INFO)
            by_name = {c.preamble.name: c.preamble.id for c in info.counters}
            self._counter_ids = {key: by_name[name] for key, name in COUNTERS.items()}
        stub = self._p4_stub(switch)
        device_id = self.device_id(switch)
        out: dict[int, dict[str, int]] = {p: {} for p in ports}
        request = p4r.ReadRequest(device_id=device_id)
        for counter_id in self._counter_ids.values():
            for port in ports:
                request.entities.add().counter_entry.CopyFrom(
                    p4r.CounterEntry(counter_id=counter_id, index=p4r.Index(index=port))
                )
        names = {v: k for k, v in self._counter_ids.items()}
        for response in stub.Read(request, timeout=10):
            for entity in response.entities:
                entry = entity.counter_entry
                key = names[entry.counter_id]
                data = entry.data
                out[entry.index.index][key] = int(data.packet_count)
        return out

    def _p4_stub(self, switch: str) -> p4r_grpc.P4RuntimeStub:
        stub = self._p4.get(switch)
        if stub is None:
            # The lab reads as its operator, never as the switch's agent.
            channel = self.certs.sync_channel(self.switch_addr[switch])
            self._channels.append(channel)
            stub = self._p4[switch] = p4r_grpc.P4RuntimeStub(channel)
        return stub

    def read_tables(self, switch: str) -> Table:
        """Every table entry, ECMP member and group the switch's target holds, read back over
        P4Runtime (default entries of the keyless tables too), named as in the P4Info."""
        info = load_p4info(DEFAULT_P4INFO)
        request = p4r.ReadRequest(device_id=self.device_id(switch))
        for table in info.tables:
            request.entities.add().table_entry.table_id = table.preamble.id
            if not table.match_fields:  # keyless: only its default entry exists
                request.entities[-1].table_entry.is_default_action = True
        for profile in info.action_profiles:
            request.entities.add().action_profile_member.action_profile_id = profile.preamble.id
            request.entities.add().action_profile_group.action_profile_id = profile.preamble.id
        formatter = EntityFormatter(info)
        rows = [
            formatter(entity)
            for response in self._p4_stub(switch).Read(request, timeout=10)
            for entity in response.entities
        ]
        return Table(("object", "key", "action"), tuple(rows))

    def observed_counters(
        self, ports: Sequence[tuple[str, int]], after_wall_ns: int, timeout_s: float = 15.0
    ) -> dict[tuple[str, int], dict[str, int]]:
        """The same counters as the controller holds them from its agents' reports (what
        `railctl interfaces`, diagnose and the agents' /metrics show), from reports read after
        `after_wall_ns`: the lab's figures and the operators' must be one truth."""
        switches = sorted({sw for sw, _ in ports})

        def fresh() -> dict[tuple[str, int], admin_pb2.Interface] | None:
            got: dict[tuple[str, int], admin_pb2.Interface] = {}
            for sw in switches:
                reply = self.admin.ListInterfaces(
                    admin_pb2.ListInterfacesRequest(switch_name=sw), timeout=5
                )
                for i in reply.interfaces:
                    if i.counters_wall_ns <= after_wall_ns:
                        return None
                    got[(i.switch_name, i.port)] = i
            return got

        found = wait_for("agents' counter reports after the traffic", fresh, timeout_s, 0.2)
        return {
            port: {key: getattr(found[port].counters, field) for key, field in OBSERVED.items()}
            for port in ports
        }

    def scraped_counters(
        self, ports: Sequence[tuple[str, int]], after_wall_ns: int, timeout_s: float = 15.0
    ) -> dict[tuple[str, int], dict[str, int]]:
        """The same counters as the switches' agents export them on /metrics (what
        Prometheus scrapes), from counter reads after `after_wall_ns`."""
        names = {key: PORT_COUNTERS[field][0] + "_total" for key, field in OBSERVED.items()}
        out: dict[tuple[str, int], dict[str, int]] = {}
        for sw in sorted({sw for sw, _ in ports}):

            def scrape(sw: str = sw) -> dict[tuple[str, int], dict[str, int]] | None:
                url = f"http://{self.agent_metrics[sw]}/metrics"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    text = reply.read().decode()
                got: dict[tuple[str, int], dict[str, int]] = {}
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        stamp = sample.name == "railfabric_agent_counters_timestamp_seconds"
                        if stamp and sample.value * 1e9 <= after_wall_ns:
                            return None
                        for key, name in names.items():
                            if sample.name == name:
                                port = (sw, int(sample.labels["port"]))
                                got.setdefault(port, {})[key] = int(sample.value)
                return got or None

            out |= wait_for(f"{sw}'s agent metrics after the traffic", scrape, timeout_s, 0.2)
        return {port: out[port] for port in ports}

    def probe_outcomes(self) -> dict[str, int]:
        """The latency probes of every switch's agent so far, by outcome (sent, answered,
        lost, ...), summed from their /metrics: the sample of a run with probing on."""
        total: dict[str, int] = {}
        for addr in sorted(self.agent_metrics.values()):
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as reply:
                text = reply.read().decode()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "railfabric_agent_probes_total":
                        outcome = sample.labels["outcome"]
                        total[outcome] = total.get(outcome, 0) + int(sample.value)
        return total

    def counters_at(
        self, ports: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, int]]:
        """counters() for (switch, port) pairs on any switches."""
        by_switch: dict[str, list[int]] = {}
        for sw, port in ports:
            by_switch.setdefault(sw, []).append(port)
        out: dict[tuple[str, int], dict[str, int]] = {}
        for sw, numbers in by_switch.items():
            for port, values in self.counters(sw, numbers).items():
                out[(sw, port)] = values
        return out

    @contextlib.contextmanager
    def slow_cable(self, key: str, delay_ms: float, loss: float = 0.0) -> Iterator[None]:
        """Cable `key` delays every frame by `delay_ms` each way (and drops the fraction
        `loss` of them) for the block: its tc patch is replaced by mininet_labs.delay_line in
        the wire namespace, and put back afterwards."""
        cable = self.topology.unpatch(key)
        argv = [str(BIN / "python"), "-m", "mininet_labs.delay_line", cable.wire_a, cable.wire_b]
        argv += ["--delay-ms", f"{delay_ms:g}", "--loss", f"{loss:g}"]
        child = None
        try:
            child = self.processes.start(
                f"delay-{key}", argv, netns=self.names.wire_ns, stdout_pipe=True
            )
            self._wait_ready(child)
            yield
        finally:
            if child is not None:
                self.processes.stop(child)
            self.topology.repatch([key])

    # -- traffic -------------------------------------------------------------------------

    def _python(self, *args: str) -> list[str]:
        return [str(BIN / "python"), "-m", "mininet_labs.traffic", "--lab", self.names.tag, *args]

    @contextlib.contextmanager
    def receiver(self, host: str, name: str) -> Iterator[Path]:
        """A recording receiver in `host`'s namespace for the block; its file afterwards."""
        out = self.run_dir / f"{name}.bin"
        child = self.processes.start(
            name,
            self._python("recv", "--port", str(LAB_PORT), "--out", str(out)),
            netns=self.names.host_ns(host),
            stdout_pipe=True,
        )
        try:
            self._wait_ready(child)
            yield out
        finally:
            self.processes.stop(child)

    def records(self, path: Path) -> list[Packet]:
        return read_records(path)

    def start_sender(
        self,
        host: str,
        name: str,
        flows: Sequence[FlowSpec],
        *,
        rate_pps: float,
        count: int = 0,
        duration_s: float = 0.0,
        size: int = 64,
        pfc_iface: str | None = None,
    ) -> Sender:
        args = ["send", "--rate", f"{rate_pps:g}", "--size", str(size)]
        args += ["--count", str(count), "--duration", f"{duration_s:g}"]
        if pfc_iface:
            args += [
                "--pfc-iface",
                pfc_iface,
                "--pfc-rate-mbps",
                f"{self.target.port_rate_mbps:g}",
            ]
        for f in flows:
            args += ["--flow", str(f)]
        child = self.processes.start(
            name, self._python(*args), netns=self.names.host_ns(host), stdout_pipe=True
        )
        self._wait_ready(child)
        return Sender(child, list(flows))

    def finish_sender(self, sender: Sender, timeout_s: float = 120) -> dict[str, Any]:
        """Wait for the sender to end (or stop it) and return its summary."""
        proc = sender.child.proc
        try:
            proc.wait(timeout=timeout_s)
        except Exception:
            proc.terminate()
        assert proc.stdout is not None
        out = proc.stdout.read().decode(errors="replace").strip().splitlines()
        self.processes.stop(sender.child)
        if not out:
            log = tail(sender.child.log) if sender.child.log else ""
            raise LabError(f"{sender.child.name} printed no summary:\n{log}")
        summary: dict[str, Any] = json.loads(out[-1])
        return summary

    def stop_sender(self, sender: Sender) -> dict[str, Any]:
        sender.child.proc.terminate()
        return self.finish_sender(sender, timeout_s=10)

    def _wait_ready(self, child: Child) -> None:
        assert child.proc.stdout is not None
        line = child.proc.stdout.readline()
        if line.strip() != b"ready":
            log = tail(child.log) if child.log else ""
            raise LabError(f"{child.name} did not start:\n{log}")

    @contextlib.contextmanager
    def burster(self, host: str, name: str, rate_pps: float = 2000) -> Iterator[Burster]:
        child = self.processes.start(
            name,
            self._python("burst", "--rate", f"{rate_pps:g}"),
            netns=self.names.host_ns(host),
            stdout_pipe=True,
            stdin_pipe=True,
        )
        try:
            self._wait_ready(child)
            yield Burster(child)
        finally:
            self.processes.stop(child)

    def agent_log(self, switch: str) -> str:
        log = self.agents[switch].log
        return log.read_text(errors="replace") if log else ""
