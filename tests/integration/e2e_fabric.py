"""Helpers of the end-to-end fabric tests (test_fabric_e2e.py) on a running `mininet_labs.lab.Lab`:
the switches' real forwarding state read back over P4Runtime and decoded with the agent's own
codec, the egress ports that state gives a destination, restarts of the lab's processes with
their original command lines, a sequence-numbered probe, and the controller's typed view (events
by EventKind with their figures in `detail`, SwitchStatus counters): no figure is parsed back
from text."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import grpc
from finsy.proto import p4r, p4r_grpc

from agent.codec import Codec
from agent.translate import GroupEntry, MemberEntry, NextEntry, Pipeline, RouteEntry, translate
from controller.export import desired_state
from controller.fabric import Nic, ipv4_str
from controller.intent import load_fabric
from controller.routing import FabricRouting, LinkEvent
from mininet_labs.lab import LAB_PORT, Lab
from mininet_labs.processes import DIE_WITH_PARENT, Child, wait_listening
from mininet_labs.traffic import FlowSpec
from railfabric import tls
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import admin_pb2, state_pb2

# -- the switches' real state ---------------------------------------------------------------


class SwitchReader:
    """Reads every entry the agent owns back from a switch (a wildcard P4Runtime Read, open to
    the lab's operator) and decodes it with the agent's codec."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.codec = Codec(load_p4info(DEFAULT_P4INFO))
        self._stubs: dict[tuple[str, bool], p4r_grpc.P4RuntimeStub] = {}
        self._channels: list[grpc.Channel] = []

    def stub(self, switch: str, *, as_switch: bool = False) -> p4r_grpc.P4RuntimeStub:
        """A stub to the switch's target as the lab's operator (who may read), or with
        `as_switch` as the switch itself (the certificate its agents have, which may write)."""
        stub = self._stubs.get((switch, as_switch))
        if stub is None:
            addr = self.lab.switch_addr[switch]
            if as_switch:
                credentials = tls.channel_credentials(self.lab.certs.switch(switch))
                channel = grpc.secure_channel(addr, credentials)
            else:
                channel = self.lab.certs.sync_channel(addr)
            self._channels.append(channel)
            stub = self._stubs[(switch, as_switch)] = p4r_grpc.P4RuntimeStub(channel)
        return stub

    def device_id(self, switch: str) -> int:
        return self.lab.device_id(switch)

    def pipeline(self, switch: str) -> Pipeline:
        """As the agent reads it: tables and action profiles, then clone sessions (a request
        of their own, agent/p4client.py read_pipeline)."""
        entities: list[p4r.Entity] = []
        for wanted in (self.codec.read_requests(), self.codec.replication_read_requests()):
            request = p4r.ReadRequest(device_id=self.device_id(switch), entities=wanted)
            for reply in self.stub(switch).Read(request, timeout=10):
                entities.extend(reply.entities)
        pipeline, _ = self.codec.decode_all(entities)
        return pipeline

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def __enter__(self) -> SwitchReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def egress_ports(pipeline: Pipeline, dst: int) -> frozenset[int]:
    """The ports a switch holding `pipeline` can send a packet for `dst` out of: longest
    prefix match, next entry, group, the members' ports. Empty when nothing matches."""
    best: RouteEntry | None = None
    for route in pipeline.of_type(RouteEntry):
        assert isinstance(route, RouteEntry)
        mask = ((1 << route.length) - 1) << (32 - route.length)
        if dst & mask == route.address and (best is None or route.length > best.length):
            best = route
    if best is None:
        return frozenset()
    nxt = pipeline.entries.get(("next", best.next_id))
    if not isinstance(nxt, NextEntry):
        return frozenset()
    group = pipeline.entries.get(("group", nxt.group_id))
    if not isinstance(group, GroupEntry):
        return frozenset()
    ports = set()
    for ref in group.members:
        member = pipeline.entries.get(("member", ref.member_id))
        assert isinstance(member, MemberEntry), f"group {group.group_id}: no member {ref}"
        ports.add(member.port)
    return frozenset(ports)


def forwarding(state: state_pb2.DesiredState) -> dict[tuple[int, int], frozenset[int]]:
    """(address, length) -> the egress ports of its group: what a DesiredState forwards,
    free of group ids (which an incremental and a fresh computation may number differently).
    A route whose group the state lacks maps to no ports."""
    ports = {g.id: frozenset(h.port for h in g.next_hops) for g in state.groups}
    out: dict[tuple[int, int], frozenset[int]] = {}
    for route in state.routes:
        key = (route.prefix.address, route.prefix.length)
        assert key not in out, f"{state.switch_name}: {key} routed twice"
        out[key] = ports.get(route.group_id, frozenset())
    return out


Forwarding = dict[tuple[int, int], frozenset[int]]


def forwarding_differences(got: Forwarding, want: Forwarding) -> list[str]:
    """The prefixes `got` forwards otherwise than `want` (the controller's against a fresh
    computation's)."""
    return [
        f"{ipv4_str(address)}/{length}: controller {sorted(got.get((address, length), ()))}, "
        f"fresh {sorted(want.get((address, length), ()))}"
        for address, length in sorted(set(got) | set(want))
        if got.get((address, length)) != want.get((address, length))
    ]


def fresh_forwarding(lab: Lab, down: Iterable[str] = ()) -> dict[str, Forwarding]:
    """What every switch forwards by a computation from scratch over the fabric the lab's
    controller serves, with the cables `down` (link keys) down."""
    events = [
        LinkEvent(end, port, False)
        for key in down
        for end, port in (
            (lab.topology.cables[key].link.a, lab.topology.cables[key].link.a_port),
            (lab.topology.cables[key].link.b, lab.topology.cables[key].link.b_port),
        )
    ]
    fresh = FabricRouting(load_fabric(lab.run_dir / "fabric.yaml"), down=events)
    return {sw.name: forwarding(desired_state(fresh, sw.name)) for sw in lab.fabric.switches}


def settled_states(
    lab: Lab, reader: SwitchReader
) -> tuple[dict[str, state_pb2.DesiredState], dict[str, Pipeline]] | None:
    """The controller's desired states and the switches' read-back state, taken while no
    generation moved and every switch had applied the one read; None when that was not so
    (poll it)."""
    try:
        before = switch_status(lab)
        states = desired_states(lab)
        held = {name: reader.pipeline(name) for name in states}
        after = switch_status(lab)
    except grpc.RpcError:
        return None
    for name, state in states.items():
        for s in (before[name], after[name]):
            if not (
                s.connected
                and s.converged
                and s.desired_generation == s.applied_generation == state.generation
            ):
                return None
    return states, held


def routing_problems(
    states: dict[str, state_pb2.DesiredState],
    held: dict[str, Pipeline],
    want: dict[str, Forwarding],
) -> list[str]:
    """Where the controller's desired states forward otherwise than `want` (a fresh
    computation), and where a switch holds other entries than its desired state; empty when
    neither."""
    problems = [
        f"{name}: {d}"
        for name, state in states.items()
        for d in forwarding_differences(forwarding(state), want[name])
    ]
    for name, state in states.items():
        pipeline, untranslated = translate(state)
        problems += [f"{name}: cannot translate: {p}" for p in untranslated]
        problems += [f"{name} holds {d}" for d in pipeline_differences(held[name], pipeline)]
    return problems


def pipeline_differences(got: Pipeline, want: Pipeline) -> list[str]:
    """What `got` holds that `want` does not, and the other way round (empty when equal)."""
    out = []
    for key in sorted(set(got.entries) | set(want.entries), key=repr):
        g, w = got.entries.get(key), want.entries.get(key)
        if g != w:
            out.append(f"{key}: holds {g}, wants {w}")
    return out


def groups_watching(pipeline: Pipeline, port: int) -> list[int]:
    """Ids of the groups that still hold a member on `port`."""
    return [
        g.group_id
        for g in pipeline.of_type(GroupEntry)
        if isinstance(g, GroupEntry) and any(m.watch_port == port for m in g.members)
    ]


# -- processes ------------------------------------------------------------------------------


def argv_of(child: Child) -> list[str]:
    """The command line the lab started `child` with (without the die-with-parent prefix)."""
    args = [str(a) for a in child.proc.args]  # type: ignore[union-attr]
    assert args[: len(DIE_WITH_PARENT)] == DIE_WITH_PARENT, args
    return args[len(DIE_WITH_PARENT) :]


def restart_agent(lab: Lab, switch: str) -> Child:
    """Stop the switch's agent (SIGTERM) and start it again with the same arguments."""
    old = lab.agents[switch]
    argv = argv_of(old)
    lab.processes.stop(old)
    new = lab.processes.start(old.name, argv)
    lab.agents[switch] = new
    return new


def controller_child(lab: Lab) -> Child:
    return next(c for c in lab.processes.children if c.name == "controller")


def restart_controller(lab: Lab) -> Child:
    """Stop the controller and start it again with the same arguments (same --state-dir and
    --listen address, so the agents find it again)."""
    old = controller_child(lab)
    argv = argv_of(old)
    lab.processes.stop(old)
    new = lab.processes.start(old.name, argv)
    assert new.log is not None
    wait_listening(lab.controller_addr, 20, new.proc, new.log)
    return new


def log_size(child: Child) -> int:
    return child.log.stat().st_size if child.log is not None and child.log.exists() else 0


def log_since(child: Child, offset: int) -> str:
    """What `child`'s log file (shared by restarts of the same name) gained after `offset`."""
    if child.log is None or not child.log.exists():
        return ""
    with child.log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


# -- controller -----------------------------------------------------------------------------


def events_since(
    lab: Lab, wall_ns: int, types: Iterable[admin_pb2.EventKind.ValueType] = ()
) -> list[admin_pb2.Event]:
    """The controller's events at or after `wall_ns`, oldest first; only of `types` when given
    (filtered here too, whatever the server did with the request's filter)."""
    kinds = tuple(types)
    return [
        e
        for e in lab.events(limit=5000, types=kinds, after_wall_ns=wall_ns)
        if e.wall_ns >= wall_ns and (not kinds or e.type in kinds)
    ]


def converged_event(
    events: Iterable[admin_pb2.Event], link: str, usable: bool
) -> admin_pb2.Event | None:
    """The first CONVERGED event for `link` leaving (usable=False) or returning to
    (usable=True) routing; its figures are in `convergence`."""
    for e in events:
        if (
            e.type == admin_pb2.EVENT_KIND_CONVERGED
            and e.WhichOneof("detail") == "convergence"
            and e.convergence.link == link
            and e.convergence.usable == usable
        ):
            return e
    return None


def port_events(
    events: Iterable[admin_pb2.Event],
    kind: admin_pb2.EventKind.ValueType,
    switch: str,
    port: int,
) -> list[admin_pb2.Event]:
    """The PORT_DOWN or LOCAL_REPAIR events of `switch`:`port` (each carries the agent's
    figures in `port_change`: detected_wall_ns, and for a repair groups_repaired and
    local_repair_ns)."""
    return [
        e
        for e in events
        if e.type == kind
        and (e.switch_name, e.port) == (switch, port)
        and e.WhichOneof("detail") == "port_change"
    ]


def switch_status(lab: Lab) -> dict[str, admin_pb2.SwitchStatus]:
    reply = lab.admin.ListSwitches(admin_pb2.ListSwitchesRequest(), timeout=5)
    return {s.info.name: s for s in reply.switches}


def updates_written(lab: Lab) -> dict[str, int]:
    """Switch -> P4Runtime updates its agent reported writing (Applied.updates_written),
    summed by the controller since it started (SwitchStatus.updates_written)."""
    return {name: s.updates_written for name, s in switch_status(lab).items()}


def desired_states(lab: Lab) -> dict[str, state_pb2.DesiredState]:
    """The desired state the controller holds for every switch (admin GetSwitchState)."""
    return {
        sw.name: lab.admin.GetSwitchState(
            admin_pb2.GetSwitchStateRequest(switch_name=sw.name), timeout=5
        )
        for sw in lab.fabric.switches
    }


def all_converged(lab: Lab) -> bool:
    try:
        status = switch_status(lab)
        down = lab.admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True), timeout=5).links
    except grpc.RpcError:
        return False
    return not down and all(s.connected and s.converged for s in status.values())


# -- traffic --------------------------------------------------------------------------------


def udp_flow(fid: int, src: Nic, dst: Nic, sport: int) -> FlowSpec:
    return FlowSpec(fid, ipv4_str(src.ipv4), ipv4_str(dst.ipv4), sport, LAB_PORT, 0)


@dataclass
class ProbeResult:
    sent: int
    received: set[int]

    @property
    def missing(self) -> list[int]:
        return sorted(set(range(self.sent)) - self.received)


@contextlib.contextmanager
def probe(lab: Lab, src: Nic, dst: Nic, name: str, rate_pps: float = 500) -> Iterator[ProbeResult]:
    """A sequence-numbered UDP flow src -> dst for the duration of the block; afterwards the
    result holds what was sent and which sequence numbers arrived."""
    flow = udp_flow(0, src, dst, 40000)
    result = ProbeResult(0, set())
    with lab.receiver(dst.host, f"{name}-recv") as out:
        sender = lab.start_sender(
            src.host, f"{name}-send", [flow], rate_pps=rate_pps, duration_s=3600
        )
        try:
            time.sleep(0.3)
            yield result
        finally:
            summary = lab.stop_sender(sender)
            time.sleep(0.3)  # the last datagrams in flight
    sent = summary["sent"]
    result.sent = int(sent.get("0", 0)) if isinstance(sent, dict) else 0
    result.received = {p.seq for p in lab.records(out) if p.flow == 0}
