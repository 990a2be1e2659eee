"""Intent → pipeline entries, and the ordered difference between two sets of entries.

Pure and synchronous: no P4Info, no I/O. `translate` turns the controller's `DesiredState`
(intent-level objects) into the entries of the fabric.p4 contract (railfabric/fabric_p4.py);
`diff` computes the P4Runtime updates that turn what a target holds into what is wanted, as
ordered batches (agent/codec.py encodes them for the wire).

Entries are named tuples, not frozen dataclasses: a large switch has tens of thousands, and a
tuple is built twice as fast and compared and hashed in C. Like tuples, entries of two kinds
with the same values compare equal, so compare entries under one key (`Entry.key` starts with
the kind's name), as `diff` does.

Member identity (docs/architecture.md §5): one action-profile member per port (member id = port
number), carrying (port, smac = that port's PortConfig MAC, dmac = the peer's MAC). Members
exist for every port that has a next hop in a group or a neighbour with a MAC, so a link that
goes down and comes back never changes a member's identity or creation order; groups only
reference members, with watch_port = the member's port — except a group's only member, which
watches nothing: bmv2 divides by the number of active members of a group, so a group whose
every member is deactivated by its watch port crashes it on the next packet (docs/bmv2.md).
One member is never more use deactivated than removed, and local repair removes it.
"""

from __future__ import annotations

import enum
import functools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from railfabric import fabric_p4 as p4
from railfabric import latency
from railfabric.fabric_counters import NAK_SAMPLE_SESSION
from railfabric.v1 import state_pb2

# Field widths from the P4 contract; values must fit them.
PORT_MAX = (1 << p4.SET_NEXTHOP_PORT_BITWIDTH) - 1
CPU_PORT = 255
MAC_MAX = (1 << p4.SET_NEXTHOP_DMAC_BITWIDTH) - 1
U32_MAX = (1 << p4.SET_ECN_THRESHOLDS_KMAX_BITWIDTH) - 1  # every threshold param is a bit<32>
TRAFFIC_CLASSES = 1 << p4.SET_TRAFFIC_CLASS_TC_BITWIDTH
DSCP_MAX = (1 << p4.QOS_CLASSIFY_DSCP_BITWIDTH) - 1
# pmax is a probability in parts per million.
PPM_ONE = 1_000_000

ETH_TYPE_LLDP = 0x88CC
ETH_TYPE_MAC_CONTROL = 0x8808
ACL_PRIORITY_CONTROL = 100


class AclAction(enum.Enum):
    PUNT_TO_CPU = "punt_to_cpu"
    # Latency probes: the data plane answers requests (to `AclEntry.address` for a mesh
    # probe), replies go to the agent.
    ANSWER_PROBE = "answer_probe"
    DROP = "drop"


class AclEntry(NamedTuple):
    """`p4.ACL`: match eth_type, and ip_proto when its mask is not 0 (the other keys
    wildcard). `address` is answer_probe's parameter (0 for the other actions)."""

    eth_type: int
    eth_type_mask: int
    priority: int
    action: AclAction
    ip_proto: int = 0
    ip_proto_mask: int = 0
    address: int = 0

    @property
    def key(self) -> tuple[object, ...]:
        return (
            "acl",
            self.eth_type,
            self.eth_type_mask,
            self.ip_proto,
            self.ip_proto_mask,
            self.priority,
        )


class QosEntry(NamedTuple):
    """`p4.QOS_CLASSIFY`: dscp → set_traffic_class(tc)."""

    dscp: int
    traffic_class: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("qos", self.dscp)


class EcnEntry(NamedTuple):
    """`p4.ECN_MARKING`: (eg_port, traffic_class) → set_ecn_thresholds.
    kmin/kmax in bytes of queue depth, pmax in parts per million."""

    port: int
    traffic_class: int
    kmin_bytes: int
    kmax_bytes: int
    pmax_ppm: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("ecn", self.port, self.traffic_class)


class PfcEntry(NamedTuple):
    """`p4.PFC_CONFIG`: (port, priority) → set_pfc_thresholds, bytes."""

    port: int
    priority: int
    xoff_bytes: int
    xon_bytes: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("pfc", self.port, self.priority)


class MemberEntry(NamedTuple):
    """A `p4.ECMP_SELECTOR` member: set_nexthop(port, smac, dmac)."""

    member_id: int
    port: int
    smac: int
    dmac: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("member", self.member_id)


class GroupMember(NamedTuple):
    member_id: int  # = the member's port
    watch_port: int  # 0: none
    weight: int = 1


def watched(members: Iterable[GroupMember]) -> tuple[GroupMember, ...]:
    """A group's members with their watch ports by the rule above: each watches its own port,
    unless it is the only one."""
    out = tuple(members)
    watch = len(out) > 1
    return tuple(
        m
        if m.watch_port == (m.member_id if watch else 0)
        else GroupMember(m.member_id, m.member_id if watch else 0, m.weight)
        for m in out
    )


class GroupEntry(NamedTuple):
    """A `p4.ECMP_SELECTOR` group; members in ascending member id (= port) order."""

    group_id: int
    members: tuple[GroupMember, ...]

    @property
    def key(self) -> tuple[object, ...]:
        return ("group", self.group_id)


class NextEntry(NamedTuple):
    """`p4.NEXT`: next_id → action-profile group `group_id`."""

    next_id: int
    group_id: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("next", self.next_id)


class RouteEntry(NamedTuple):
    """`p4.ROUTING_V4`: lpm ipv4_dst → set_next_id(next_id)."""

    address: int
    length: int
    next_id: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("route", self.address, self.length)


class HashConfigEntry(NamedTuple):
    """The default action of `p4.HASH_CONFIG`: fold the RoCEv2 destination QP into the ECMP
    hash (`p4.HASH_QP`) or not (`p4.NO_ACTION`). A table's default entry always exists, so
    the codec writes any update of it as a MODIFY (a delete restores NoAction)."""

    qp: bool

    @property
    def key(self) -> tuple[object, ...]:
        return ("hash_config",)


class PfcWatchdogEntry(NamedTuple):
    """The default action of `p4.PFC_WATCHDOG`: the watchdog's timing in microseconds
    (`p4.SET_PFC_WATCHDOG`), or None for `p4.NO_ACTION` (the target's own timing). Written
    as a MODIFY, like HashConfigEntry."""

    timing_us: tuple[int, int] | None  # (detect, restore)

    @property
    def key(self) -> tuple[object, ...]:
        return ("pfc_watchdog",)


class MatrixSourceEntry(NamedTuple):
    """`p4.MATRIX_SOURCE`: a host port whose arrivals count in the traffic matrix
    (NoAction: the hit is what counts)."""

    port: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("matrix_source", self.port)


class MatrixDestEntry(NamedTuple):
    """`p4.MATRIX_DEST`: lpm ipv4_dst → count_matrix(dst_class)."""

    address: int
    length: int
    dst_class: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("matrix_dest", self.address, self.length)


class NakSamplingEntry(NamedTuple):
    """`p4.NAK_SAMPLING`: a port whose NAKs are copied to the CPU, at most one every
    `interval_us` (`p4.SAMPLE_NAKS`)."""

    port: int
    interval_us: int

    @property
    def key(self) -> tuple[object, ...]:
        return ("nak_sampling", self.port)


class CloneSessionEntry(NamedTuple):
    """A clone session of the packet replication engine (P4Runtime §9.5): the ports its
    copies go to. fabric.p4 clones sampled NAKs into `NAK_SAMPLE_SESSION`, to the CPU port."""

    session_id: int
    ports: tuple[int, ...]  # sorted

    @property
    def key(self) -> tuple[object, ...]:
        return ("clone_session", self.session_id)


DEFAULT_ONLY = (HashConfigEntry, PfcWatchdogEntry)  # keyless tables: only the default entry

Entry = (
    AclEntry
    | QosEntry
    | EcnEntry
    | PfcEntry
    | HashConfigEntry
    | PfcWatchdogEntry
    | MemberEntry
    | GroupEntry
    | NextEntry
    | RouteEntry
    | MatrixSourceEntry
    | MatrixDestEntry
    | NakSamplingEntry
    | CloneSessionEntry
)
Key = tuple[object, ...]


class Op(enum.Enum):
    INSERT = "INSERT"
    MODIFY = "MODIFY"
    DELETE = "DELETE"


class Update(NamedTuple):
    """One write. (A named tuple: `diff` builds one per entry of a first programming, and a
    tuple is built twice as fast as a frozen dataclass.)"""

    op: Op
    entry: Entry


@dataclass(frozen=True, slots=True)
class ObjectProblem:
    """An intent object that cannot be translated; reported in Applied.errors."""

    object: str
    message: str


@dataclass(frozen=True)
class Pipeline:
    """The full set of entries a switch should hold, keyed by `Entry.key`."""

    entries: Mapping[Key, Entry] = field(default_factory=dict)

    @staticmethod
    def of(entries: Iterable[Entry]) -> Pipeline:
        return Pipeline(_keyed(entries))

    def __len__(self) -> int:
        return len(self.entries)

    def of_type(self, kind: type[Entry]) -> list[Entry]:
        return [e for e in self.entries.values() if isinstance(e, kind)]

    @functools.cached_property
    def routes_held(self) -> int:
        """How many of the entries are routes."""
        return sum(1 for key in self.entries if key[0] == "route")

    @functools.cached_property
    def groups(self) -> tuple[GroupEntry, ...]:
        """The group entries (cached: local repair looks only at these)."""
        return tuple(e for e in self.entries.values() if isinstance(e, GroupEntry))

    def replaced(self, entries: Iterable[Entry]) -> Pipeline:
        """A copy with `entries` put in place of those with the same keys."""
        out = dict(self.entries)
        out.update((e.key, e) for e in entries)
        return Pipeline(out)


# The host bits of an IPv4 prefix of each length.
_HOST_BITS = [(1 << (32 - length)) - 1 for length in range(33)]
# A named tuple built without the Python frame of its __new__ (`_new(RouteEntry, (a, l, n))`):
# translate builds an entry per route and diff an update per entry, a third of their cost.
_new = tuple.__new__


def _keyed(entries: Iterable[Entry]) -> dict[Key, Entry]:
    out: dict[Key, Entry] = {}
    for entry in entries:
        key = entry.key
        if key in out:
            raise ValueError(f"duplicate pipeline entry {key}")
        out[key] = entry
    return out


class TranslationError(ValueError):
    """The desired state as a whole cannot be used (problems are per object otherwise)."""


def format_ipv4(address: int) -> str:
    return ".".join(str((address >> s) & 0xFF) for s in (24, 16, 8, 0))


def format_mac(mac: int) -> str:
    return ":".join(f"{(mac >> s) & 0xFF:02x}" for s in range(40, -8, -8))


def prefix_name(prefix: state_pb2.Ipv4Prefix) -> str:
    return f"{format_ipv4(prefix.address)}/{prefix.length}"


def control_acl() -> list[AclEntry]:
    """The fixed ACL: punt LLDP to the agent, answer link probes in the data plane (every
    switch answers its neighbours' whether or not it sends any; the answers to its own go to
    the agent), keep PFC MAC-control frames out of the forwarding pipeline (the target's MAC
    layer consumes them)."""
    return [
        AclEntry(ETH_TYPE_LLDP, 0xFFFF, ACL_PRIORITY_CONTROL, AclAction.PUNT_TO_CPU),
        AclEntry(latency.PROBE_ETH_TYPE, 0xFFFF, ACL_PRIORITY_CONTROL, AclAction.ANSWER_PROBE),
        AclEntry(ETH_TYPE_MAC_CONTROL, 0xFFFF, ACL_PRIORITY_CONTROL, AclAction.DROP),
    ]


def mesh_probe_acl(state: state_pb2.DesiredState) -> list[AclEntry]:
    """A ToR with a probe address takes mesh probes (IPv4 protocol 253) before routing: its
    data plane answers the requests to its probe address, the rest (the answers to its own
    requests, and requests for another address, which the agent counts as stray) go to the
    agent. Spines and cores route them."""
    if not state.probing.address:
        return []
    return [
        AclEntry(
            latency.ETH_TYPE_IPV4,
            0xFFFF,
            ACL_PRIORITY_CONTROL,
            AclAction.ANSWER_PROBE,
            latency.PROBE_IP_PROTO,
            0xFF,
            state.probing.address,
        )
    ]


def _check_port(port: int, what: str) -> str | None:
    if not 1 <= port <= PORT_MAX or port == CPU_PORT:
        return f"{what}: port {port} is not a front-panel port (1..{PORT_MAX}, not {CPU_PORT})"
    return None


def ecn_entry(ecn: state_pb2.EcnThreshold) -> EcnEntry:
    """EcnThreshold → ecn_marking entry. Bytes stay bytes and ppm stays ppm (the contract's
    units), but both must fit the action's bit<32> parameters."""
    name = f"ecn port {ecn.port} tc {ecn.traffic_class}"
    if (problem := _check_port(ecn.port, name)) is not None:
        raise ValueError(problem)
    if ecn.traffic_class >= TRAFFIC_CLASSES:
        raise ValueError(f"{name}: traffic_class must be 0..{TRAFFIC_CLASSES - 1}")
    if ecn.kmax_bytes > U32_MAX:
        raise ValueError(f"{name}: kmax_bytes {ecn.kmax_bytes} exceeds the 32-bit threshold")
    if ecn.kmin_bytes > ecn.kmax_bytes:
        raise ValueError(f"{name}: kmin_bytes {ecn.kmin_bytes} > kmax_bytes {ecn.kmax_bytes}")
    if ecn.pmax_ppm > PPM_ONE:
        raise ValueError(f"{name}: pmax_ppm {ecn.pmax_ppm} exceeds {PPM_ONE} (probability 1)")
    return EcnEntry(ecn.port, ecn.traffic_class, ecn.kmin_bytes, ecn.kmax_bytes, ecn.pmax_ppm)


def pfc_entry(pfc: state_pb2.PfcSetting) -> PfcEntry:
    """PfcSetting → pfc_config entry (bytes). headroom_bytes is buffer sizing the target
    reserves above xoff; the contract's table has no parameter for it."""
    name = f"pfc port {pfc.port} priority {pfc.priority}"
    if (problem := _check_port(pfc.port, name)) is not None:
        raise ValueError(problem)
    if pfc.priority >= TRAFFIC_CLASSES:
        raise ValueError(f"{name}: priority must be 0..{TRAFFIC_CLASSES - 1}")
    if pfc.xoff_bytes > U32_MAX:
        raise ValueError(f"{name}: xoff_bytes {pfc.xoff_bytes} exceeds the 32-bit threshold")
    if pfc.xon_bytes > pfc.xoff_bytes:
        raise ValueError(f"{name}: xon_bytes {pfc.xon_bytes} > xoff_bytes {pfc.xoff_bytes}")
    return PfcEntry(pfc.port, pfc.priority, pfc.xoff_bytes, pfc.xon_bytes)


def qos_entry(mapping: state_pb2.DscpMapping) -> QosEntry:
    name = f"dscp {mapping.dscp}"
    if mapping.dscp > DSCP_MAX:
        raise ValueError(f"{name}: dscp must be 0..{DSCP_MAX}")
    if mapping.traffic_class >= TRAFFIC_CLASSES:
        raise ValueError(f"{name}: traffic_class must be 0..{TRAFFIC_CLASSES - 1}")
    return QosEntry(mapping.dscp, mapping.traffic_class)


def hash_config_entry(state: state_pb2.DesiredState) -> tuple[HashConfigEntry, str | None]:
    """What the selector hashes, and a problem when the controller asked for a value this
    agent does not know (a newer controller): the 5-tuple is hashed then, as before the
    option existed."""
    value = state.ecmp_hash
    if value == state_pb2.ECMP_HASH_FIVE_TUPLE_QP:
        return HashConfigEntry(qp=True), None
    if value == state_pb2.ECMP_HASH_FIVE_TUPLE:
        return HashConfigEntry(qp=False), None
    return HashConfigEntry(
        qp=False
    ), f"ecmp_hash {value} is unknown to this agent; hashing the 5-tuple"


def pfc_watchdog_entry(state: state_pb2.DesiredState) -> PfcWatchdogEntry:
    """The watchdog timing of `state` in whole microseconds (the table's unit); no timing
    (all zero) leaves the target's own. Raises ValueError for timing the table cannot hold."""
    wd = state.pfc_watchdog
    if not wd.detect_ns and not wd.restore_ns:
        return PfcWatchdogEntry(None)
    timing = []
    for name, ns in (("detect_ns", wd.detect_ns), ("restore_ns", wd.restore_ns)):
        if ns % 1000 or not 0 < ns // 1000 <= U32_MAX:
            raise ValueError(
                f"pfc_watchdog.{name} {ns}: must be a whole number of microseconds in "
                f"1..{U32_MAX} us"
            )
        timing.append(ns // 1000)
    return PfcWatchdogEntry((timing[0], timing[1]))


def translate(state: state_pb2.DesiredState) -> tuple[Pipeline, list[ObjectProblem]]:
    """The entries for `state` (local repair is applied on top by `repair`).

    Objects that cannot be translated are skipped and returned as problems, named as the
    controller names them; a route whose group was skipped is skipped too."""
    translation = Translation(state)
    return translation.pipeline, translation.problems


class Translation:
    """`translate` in two steps. Every entry but the routes is translated at once (`head`);
    the routes, most of a large switch and the last of `diff`'s inserts, when `routes` is
    first read: a writer can have the head's Writes on their way meanwhile (`staged_diff`).
    `problems` holds the routes' once they are translated."""

    def __init__(self, state: state_pb2.DesiredState) -> None:
        self.state = state
        problems: list[ObjectProblem] = []
        entries: list[Entry] = [*control_acl(), *mesh_probe_acl(state)]
        hashing, problem = hash_config_entry(state)
        entries.append(hashing)
        if problem is not None:
            problems.append(ObjectProblem("ecmp_hash", problem))
        try:
            entries.append(pfc_watchdog_entry(state))
        except ValueError as err:
            entries.append(PfcWatchdogEntry(None))
            problems.append(
                ObjectProblem("pfc_watchdog", f"{err}; the target's own timing is kept")
            )

        for mapping in state.dscp_map:
            try:
                entries.append(qos_entry(mapping))
            except ValueError as err:
                problems.append(ObjectProblem(f"dscp {mapping.dscp}", str(err)))
        for ecn in state.ecn:
            try:
                entries.append(ecn_entry(ecn))
            except ValueError as err:
                problems.append(
                    ObjectProblem(f"ecn port {ecn.port} tc {ecn.traffic_class}", str(err))
                )
        for pfc in state.pfc:
            try:
                entries.append(pfc_entry(pfc))
            except ValueError as err:
                problems.append(
                    ObjectProblem(f"pfc port {pfc.port} priority {pfc.priority}", str(err))
                )

        if state.HasField("matrix"):
            entries.extend(_matrix_entries(state.matrix, problems))
        if state.HasField("nak_sampling"):
            entries.extend(_nak_sampling_entries(state.nak_sampling, problems))

        port_macs = {p.port: p.mac for p in state.ports}
        members: dict[int, MemberEntry] = {}
        groups: dict[int, GroupEntry] = {}
        for group in sorted(state.groups, key=lambda g: g.id):
            name = f"group {group.id}"
            try:
                group_members, new_members = _group(group, port_macs, members)
            except ValueError as err:
                problems.append(ObjectProblem(name, f"{name}: {err}"))
                continue
            members.update(new_members)
            groups[group.id] = GroupEntry(group.id, watched(group_members))

        # Members for cabled ports without a next hop yet, so their identity is fixed up front.
        for neighbor in state.neighbors:
            port = neighbor.port
            if port in members or neighbor.peer_mac == 0 or port not in port_macs:
                continue
            if _check_port(port, "neighbor") is None and neighbor.peer_mac <= MAC_MAX:
                members[port] = MemberEntry(port, port, port_macs[port], neighbor.peer_mac)

        entries.extend(members[m] for m in sorted(members))
        for group_id in sorted(groups):
            entries.append(groups[group_id])
            entries.append(NextEntry(group_id, group_id))
        self.problems = problems
        self.head = Pipeline(_keyed(entries))
        self._groups = groups.keys()

    @functools.cached_property
    def routes(self) -> dict[Key, Entry]:
        """The route entries, keyed; the refused ones added to `problems`."""
        # Checked and keyed here directly, and named only when refused (formatting every
        # prefix cost more than the rest of the translation).
        problems, groups = self.problems, self._groups
        out: dict[Key, Entry] = {}
        for route in self.state.routes:
            prefix = route.prefix
            address, length, group_id = prefix.address, prefix.length, route.group_id
            key = ("route", address, length)
            if length > 32:
                problem = f"prefix length {length} > 32"
            elif address & _HOST_BITS[length]:
                problem = f"host bits set beyond /{length}"
            elif key in out:
                problem = "listed twice"
            elif group_id not in groups:
                problem = f"group {group_id} is missing or was refused"
            else:
                out[key] = _new(RouteEntry, (address, length, group_id))
                continue
            name = f"route {prefix_name(prefix)}"
            problems.append(ObjectProblem(name, f"{name}: {problem}"))
        return out

    @property
    def pipeline(self) -> Pipeline:
        """Every entry: the head's and the routes'."""
        return self.joined(self.head)

    def joined(self, head: Pipeline) -> Pipeline:
        """`head` (this head, local repair applied) with the routes."""
        return Pipeline({**head.entries, **self.routes})


def _nak_sampling_entries(
    sampling: state_pb2.NakSampling, problems: list[ObjectProblem]
) -> list[NakSamplingEntry | CloneSessionEntry]:
    """A ToR's NAK sampler: an entry per sampled port, and the clone session to the CPU
    port that carries the samples (only when some port is sampled)."""
    interval = sampling.interval_us
    if not 1 <= interval <= U32_MAX:
        problems.append(
            ObjectProblem(
                "nak sampling", f"nak sampling: interval {interval} us not in 1..{U32_MAX}"
            )
        )
        return []
    out: list[NakSamplingEntry | CloneSessionEntry] = []
    for port in sorted(set(sampling.ports)):
        problem = _check_port(port, f"nak sampling port {port}")
        if problem is None:
            out.append(NakSamplingEntry(port, interval))
        else:
            problems.append(ObjectProblem(f"nak sampling port {port}", problem))
    if out:
        out.append(CloneSessionEntry(NAK_SAMPLE_SESSION, (CPU_PORT,)))
    return out


def _matrix_entries(
    matrix: state_pb2.TrafficMatrix, problems: list[ObjectProblem]
) -> list[MatrixSourceEntry | MatrixDestEntry]:
    """A ToR's traffic matrix entries; the ones that do not fit the program are problems."""
    out: list[MatrixSourceEntry | MatrixDestEntry] = []
    for port in sorted(set(matrix.source_ports)):
        problem = _check_port(port, f"matrix source port {port}")
        if problem is None:
            out.append(MatrixSourceEntry(port))
        else:
            problems.append(ObjectProblem(f"matrix source port {port}", problem))
    seen: set[tuple[int, int]] = set()
    for c in matrix.classes:
        prefix, dst_class = c.prefix, c.dst_class
        name = f"matrix class {prefix_name(prefix)}"
        if prefix.length > 32 or prefix.address & _HOST_BITS[prefix.length]:
            problems.append(ObjectProblem(name, f"{name}: not an IPv4 prefix"))
        elif dst_class >= p4.MATRIX_COUNTER_SIZE:
            problems.append(
                ObjectProblem(
                    name, f"{name}: class {dst_class} >= the counter's {p4.MATRIX_COUNTER_SIZE}"
                )
            )
        elif (prefix.address, prefix.length) in seen:
            problems.append(ObjectProblem(name, f"{name}: listed twice"))
        else:
            seen.add((prefix.address, prefix.length))
            out.append(MatrixDestEntry(prefix.address, prefix.length, dst_class))
    return out


def _group(
    group: state_pb2.NextHopGroup,
    port_macs: Mapping[int, int],
    members: Mapping[int, MemberEntry],
) -> tuple[list[GroupMember], dict[int, MemberEntry]]:
    """The group's member references and any members it needs that do not exist yet."""
    if group.id == 0:
        raise ValueError("id 0 is reserved")
    if not group.next_hops:
        raise ValueError("no next hops")
    refs: list[GroupMember] = []
    new: dict[int, MemberEntry] = {}
    listed: set[int] = set()
    for hop in group.next_hops:
        port, dmac = hop.port, hop.dmac  # read once: each read of a field costs a lookup
        # The check inlined: its message is formatted only for a bad port.
        if not 1 <= port <= PORT_MAX or port == CPU_PORT:
            raise ValueError(_check_port(port, f"next hop port {port}"))
        if port not in port_macs:
            raise ValueError(f"next hop port {port} has no PortConfig (source MAC)")
        if not 0 < dmac <= MAC_MAX:
            raise ValueError(f"next hop port {port}: dmac {dmac:#x} is not a MAC")
        known = new.get(port) or members.get(port)
        if known is not None and known.dmac != dmac:
            raise ValueError(
                f"next hop port {port} dmac {format_mac(dmac)} conflicts with "
                f"{format_mac(known.dmac)} used by another next hop on that port"
            )
        if port in listed:
            raise ValueError(f"port {port} listed twice")
        listed.add(port)
        if known is None:
            new[port] = MemberEntry(port, port, port_macs[port], dmac)
        refs.append(GroupMember(port, port, max(1, hop.weight)))
    refs.sort(key=lambda r: r.member_id)
    return refs, new


# Write order (P4Runtime §12: updates inside one WriteRequest may be applied in any order, so
# an object and what it depends on go in separate Writes). Inserts and modifies go
# members → groups → next → routes; deletes go the other way. Tables nobody references
# (acl, qos, ecn, pfc, hash_config, pfc_watchdog, matrix_source, matrix_dest, nak_sampling) and
# the clone session (the program names it, no entry does) ride in the first batch.
_STAGE_OF: dict[tuple[type, Op], int] = {}
for _op in Op:
    for _kind in (
        AclEntry,
        QosEntry,
        EcnEntry,
        PfcEntry,
        HashConfigEntry,
        PfcWatchdogEntry,
        MatrixSourceEntry,
        MatrixDestEntry,
        NakSamplingEntry,
        CloneSessionEntry,
    ):
        _STAGE_OF[(_kind, _op)] = 0
    _STAGE_OF[(RouteEntry, _op)] = 3
for _op in (Op.INSERT, Op.MODIFY):
    _STAGE_OF[(MemberEntry, _op)] = 0
    _STAGE_OF[(GroupEntry, _op)] = 1
    _STAGE_OF[(NextEntry, _op)] = 2
_STAGE_OF[(NextEntry, Op.DELETE)] = 4
_STAGE_OF[(GroupEntry, Op.DELETE)] = 5
_STAGE_OF[(MemberEntry, Op.DELETE)] = 6
_STAGES = 7
_FIRST = operator.itemgetter(0)
_INSERT_STAGE = {kind: stage for (kind, op), stage in _STAGE_OF.items() if op is Op.INSERT}
_MODIFY_STAGE = {kind: stage for (kind, op), stage in _STAGE_OF.items() if op is Op.MODIFY}
_DELETE_STAGE = {kind: stage for (kind, op), stage in _STAGE_OF.items() if op is Op.DELETE}
_ROUTE_STAGE = _STAGE_OF[(RouteEntry, Op.INSERT)]


def diff(current: Pipeline, desired: Pipeline) -> list[list[Update]]:
    """Ordered, non-empty batches of updates turning `current` into `desired`. Entries equal
    in both produce nothing, so an agent that restarts on an up-to-date target writes nothing.
    Within a batch, updates are sorted by key (members in ascending port = creation order)."""
    stages = _diff(current.entries, desired.entries, len(current.entries))
    return [_sorted(stage) for stage in stages if stage]


def staged_diff(
    current: Pipeline, head: Pipeline, translation: Translation
) -> Iterator[list[Update]]:
    """`diff(current, desired)` for desired = `head` (`translation.head`, local repair applied:
    it touches groups alone) and `translation.routes`, one stage at a time as the caller asks.
    The routes are translated once the first stage is taken and diffed when the next is: a
    writer that sends a stage's Write before asking for the next has it in flight meanwhile,
    and the target does not wait for the whole translation before its first Write."""
    have = current.entries
    held_routes = current.routes_held
    stages = _diff(have, head.entries, len(have) - held_routes)
    route_stage: list[Update] = []

    def diff_routes() -> None:
        found = _diff(have, translation.routes, held_routes)[_ROUTE_STAGE]
        route_stage.extend(_sorted(found))

    # Each step runs after a stage is taken; those left over before the routes' stage.
    steps: list[Callable[[], object]] = [lambda: translation.routes, diff_routes]
    for stage in stages[:_ROUTE_STAGE]:
        if stage:
            yield _sorted(stage)
            if steps:
                steps.pop(0)()
    for step in steps:
        step()
    if route_stage:
        yield route_stage
    for stage in stages[_ROUTE_STAGE + 1 :]:
        if stage:
            yield _sorted(stage)


def _diff(
    have_entries: Mapping[Key, Entry], want_entries: Mapping[Key, Entry], held: int
) -> list[list[tuple[Key, Update]]]:
    """`diff`'s stages as (key, update) pairs, unsorted. `held` is how many of `have_entries`
    are of the kinds in `want_entries` (`staged_diff` diffs routes and the rest apart: each
    takes only its own stages of the result, where the deletes of the other's kinds are not)."""
    # (key, update) pairs: the pipelines' dict keys are the entries' keys, so sorting on them
    # needs no key recomputed per entry (a large switch has tens of thousands).
    stages: list[list[tuple[Key, Update]]] = [[] for _ in range(_STAGES)]
    get = have_entries.get
    insert, modify = Op.INSERT, Op.MODIFY
    inserts = 0
    for key, want in want_entries.items():
        have = get(key)
        if have is None:
            stages[_INSERT_STAGE[type(want)]].append((key, _new(Update, (insert, want))))
            inserts += 1
        elif have != want:
            stages[_MODIFY_STAGE[type(want)]].append((key, _new(Update, (modify, want))))
    # Every entry held is wanted when as many of them were found as there are (the usual
    # case of a reconcile): no need to look each up again.
    if held > len(want_entries) - inserts:
        for key, have in have_entries.items():
            if key not in want_entries:
                stages[_DELETE_STAGE[type(have)]].append((key, Update(Op.DELETE, have)))
    return stages


def _sorted(stage: list[tuple[Key, Update]]) -> list[Update]:
    """A stage's updates in key order: keys start with their kind's name and hold ints after
    it, so keys of one kind compare element-wise and keys of different kinds are told apart
    by the name."""
    stage.sort(key=_FIRST)
    return [update for _, update in stage]


def _sort_key(update: Update) -> Any:
    return update.entry.key


def repair_updates(pipeline: Pipeline, port: int) -> list[Update]:
    """The group modifies that take `port`'s members out of every group of `pipeline`, in
    group id order: the one Write of a local repair. Looks only at groups, and finds members
    by their port (member id), never by a watch port read back from a target."""
    out = []
    for group in pipeline.groups:
        if any(m.member_id == port for m in group.members):
            live = watched(m for m in group.members if m.member_id != port)
            out.append(Update(Op.MODIFY, GroupEntry(group.group_id, live)))
    out.sort(key=_sort_key)
    return out


def repair(pipeline: Pipeline, down_ports: frozenset[int]) -> Pipeline:
    """`pipeline` with every group member whose port is in `down_ports` removed."""
    if not down_ports:
        return pipeline
    out = dict(pipeline.entries)
    for key, entry in pipeline.entries.items():
        if isinstance(entry, GroupEntry) and any(m.member_id in down_ports for m in entry.members):
            live = watched(m for m in entry.members if m.member_id not in down_ports)
            out[key] = GroupEntry(entry.group_id, live)
    return Pipeline(out)
