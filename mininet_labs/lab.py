"""A running lab: its Mininet network (mininet_labs/network.py: servers, switches running a
target and its agent, cables, the controller), and the handles scenarios use (admin API,
switch counters, traffic tools). `with Lab(...) as lab:` tears everything down whatever
happens, SIGINT/SIGTERM included; a lab killed outright is cleaned up by its reaper."""

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
from mininet.net import Mininet
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import PORT_COUNTERS
from controller.fabric import Fabric, LldpIntent
from controller.intent import load_fabric, to_explicit_yaml
from mininet_labs import certs, lldpd
from mininet_labs.clean import clean
from mininet_labs.netlinks import PREFIX, LabError, Names, new_tag
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
from railfabric.v1 import admin_pb2, admin_pb2_grpc

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


@dataclass(frozen=True)
class LabOptions:
    hold_down_s: float = 2.0
    # The lab cuts the same link every few seconds on purpose: a short damping half-life
    # keeps those deliberate cuts from being damped (damping has its own controller tests).
    damping_half_life_s: float = 1.0
    lldp_interval_s: float = 1.0
    keep_logs: bool = False
    # Called with a line for each long step (building, starting, converging); None: quiet.
    progress: Callable[[str], None] | None = None


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
        self.topology = LabTopology(self.fabric, self.names)
        self.processes = Processes(self.run_dir)
        self.controller_addr = ""
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
        except BaseException:
            self.failed = True
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
        self.progress(f"starting the controller and {len(self.fabric.switches)} switches")
        self.net.start()
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
        self.controller_addr = f"127.0.0.1:{free_port()}"
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
            ],
        )  # fmt: skip
        assert controller.log is not None
        self._controller = controller
        wait_listening(self.controller_addr, 20, controller.proc, controller.log)

    def stop_controller(self) -> None:
        if self._controller is not None:
            self.processes.stop(self._controller)
            self._controller = None

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
                    "--controller", self.controller_addr,
                    "--target", addr,
                    "--device-id", str(self.device_id(name)),
                    "--port-map", ",".join(f"{p}={i}" for p, i in ports.items()),
                    "--p4info", str(DEFAULT_P4INFO),
                    "--election-id", "10",
                    "--lldp-interval", f"{o.lldp_interval_s:g}",
                    "--counters-interval", f"{AGENT_COUNTERS_INTERVAL_S:g}",
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
        for child in (self.agents.pop(name, None), self._switches.pop(name, None)):
            if child is not None:
                self.processes.stop(child)

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
