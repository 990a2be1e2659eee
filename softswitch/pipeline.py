"""A model of p4/fabric.p4 (v1model), one method per control of p4/include/control/*.p4.

`process(frame, ingress_port)` runs FabricIngress as fabric.p4 wires it: PortCountersIngress,
the parser, Acl, then for IPv4 QosClassify, RoceSignals (roce_counter, and NAKs sampled on
nak_sampling's ports into `clones`, I2E copies of the frame as it arrived), Routing (TTL check,
routing_v4 LPM), HashConfig and Next (the ECMP action selector, set_nexthop), DropCounter on
every drop, then the IPv4 checksum update. It returns where the frame goes (the CPU port for a
punt), or None when it is dropped; a drop counts in drop_counter and, by its reason, in
drop_reason_counter (railfabric/fabric_counters.py), both on the ingress port. PacketIoIngress
is `packet_out`. The egress controls run outside this class, at the port: EcnMarking and Pfc in
the traffic manager (egress.py, tm.py) from the ecn_marking and pfc_config entries kept here
(`ecn_thresholds`, `pfc_thresholds`, and pfc_watchdog's default action as `pfc_watchdog_us`),
PacketIoEgress in the switch (packet-in with the ingress port), PortCountersEgress in
`count_egress`, QueueDepth (the queue_depth and queue_watermark registers,
queue_depth_histogram) from the traffic manager's occupancy (egress.py).

Pure and synchronous. The P4Runtime objects live in `p4state.P4State`, which calls the hooks
below on every change so lookups here stay dict operations.

ECMP member choice is bmv2's (docs/bmv2.md): `railfabric.ecmp.flow_hash` over ipv4 src, dst,
protocol, l4 ports, and `railfabric.ecmp.choose_member` over the group's members whose
watch_port has carrier, ordered by member handle (creation order), not member id.
"""

from __future__ import annotations

import enum
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from railfabric import ecmp, latency
from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import (
    BTH_OPCODE_ACK,
    BTH_OPCODE_ATOMIC_ACK,
    NAK_KINDS,
    NAK_SAMPLE_SESSION,
    ROCE_CELLS_PER_PORT,
    ROCE_KINDS,
    drop_reason_index,
    roce_kind,
)
from railfabric.fabric_counters import DropReason as P4DropReason
from softswitch.p4state import (
    ActionCall,
    GroupRef,
    Key,
    MemberRef,
    OneShot,
    P4State,
    TableAction,
)
from softswitch.schema import FabricSchema
from softswitch.tables import TableSetter

# Header layout (p4/include/header.p4): byte offsets from the start of the frame, IPv4 ones
# from the start of its header, L4 ones from the start of the L4 header.
ETH_DST = 0
ETH_SRC = 6
ETH_TYPE = 12
ETH_HLEN = 14
IPV4 = ETH_HLEN
IPV4_MIN_LEN = 20
IPV4_VERSION_IHL = 0
IPV4_DSCP_ECN = 1
IPV4_TTL = 8
IPV4_PROTOCOL = 9
IPV4_CHECKSUM = 10
IPV4_SRC = 12  # then IPV4_DST, 4 bytes on
UDP_LEN = 8
TCP_MIN_LEN = 20
L4_SPORT = 0  # then the destination port, 2 bytes on (UDP and TCP alike)
L4_DPORT = 2
BTH_LEN = 12
BTH_OPCODE = 0
BTH_DST_QP = 5  # 3 bytes
AETH_LEN = 4  # after the BTH of an Acknowledge and an Atomic Acknowledge; byte 0 the syndrome

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_LLDP = 0x88CC
ETHERTYPE_MAC_CONTROL = 0x8808
IPPROTO_TCP = 6
IPPROTO_UDP = 17
# probe_t (header.p4): the first bytes of a latency probe's payload, after the Ethernet header
# of a link probe or the option-less IPv4 header of a mesh probe.
PROBE_LEN = 6
PROBE_OP = 5
_PROBE_REQUEST = latency.MAGIC + bytes([latency.VERSION, latency.OP_REQUEST])

_IP_WORDS = {ihl: struct.Struct(f"!{ihl * 2}H") for ihl in range(5, 16)}
_TWO_IPS = struct.Struct("!II")
_TWO_PORTS = struct.Struct("!HH")
_CHECKSUM = struct.Struct("!H")

_NO_ROUTE = -1  # an LPM level's "no such prefix", distinct from None (drop)
_U32 = 0xFFFFFFFF
# roce_kind as two tables: the kind of each opcode, 0 for the acknowledges, whose kind is that
# of their AETH syndrome (the second table).
_OPCODE_KIND = bytes(
    0 if op in (BTH_OPCODE_ACK, BTH_OPCODE_ATOMIC_ACK) else roce_kind(op, 0) for op in range(256)
)
_SYNDROME_KIND = bytes(roce_kind(BTH_OPCODE_ACK, syndrome) for syndrome in range(256))
_NAK_FIRST, _NAK_LAST = min(NAK_KINDS), max(NAK_KINDS)


def _monotonic_us() -> int:
    """ingress_global_timestamp: microseconds, as bmv2 counts them."""
    return time.monotonic_ns() // 1000


class DropReason(enum.Enum):
    """Why the pipeline dropped a frame (softswitch's own statistics, beside drop_counter; a
    little finer than drop_reason_counter's reasons, `code`)."""

    MALFORMED = "malformed"
    ACL = "acl_drop"
    TTL = "ttl_expired"
    NO_ROUTE = "no_route"
    NEXT_MISS = "next_miss"
    NO_LIVE_MEMBER = "no_live_member"
    NOT_IPV4 = "not_ipv4"
    BAD_EGRESS_PORT = "bad_egress_port"

    @property
    def code(self) -> P4DropReason:
        """The reason fabric.p4 counts it under (drop_reason_counter)."""
        return _CODES[self]


_CODES = {
    DropReason.MALFORMED: P4DropReason.MALFORMED,
    DropReason.ACL: P4DropReason.ACL,
    DropReason.TTL: P4DropReason.TTL_EXPIRED,
    DropReason.NO_ROUTE: P4DropReason.NO_ROUTE,
    DropReason.NEXT_MISS: P4DropReason.NO_NEXT_HOP,
    DropReason.NO_LIVE_MEMBER: P4DropReason.NO_NEXT_HOP,
    DropReason.NOT_IPV4: P4DropReason.NOT_IPV4,
    DropReason.BAD_EGRESS_PORT: P4DropReason.BAD_EGRESS_PORT,
}


class Forward(NamedTuple):
    """A frame leaving the pipeline: the egress port (the CPU port for packet-in), the
    frame and its traffic class. ECN marking happens in the traffic manager at enqueue, from
    the ecn_marking entries (`Pipeline.ecn_thresholds`)."""

    port: int
    frame: bytes | bytearray
    tc: int


class _Hop(NamedTuple):
    """set_nexthop's arguments as the frame takes them: the port, and the 12 bytes that
    replace the Ethernet destination and source (dmac, then smac)."""

    port: int
    macs: bytes


def _hop(action: ActionCall) -> _Hop:
    port, smac, dmac = action.args
    return _Hop(port, dmac.to_bytes(6, "big") + smac.to_bytes(6, "big"))


def _ignore_set(key: Key, priority: int, action: TableAction) -> None:
    """The set hook of a table the model has no lookup structure for."""


def _key_value(key: Key, position: int) -> int:
    """The value of an exact field of `key` (0 when absent)."""
    return (key[position] or (0,))[0]


def _lpm_order(levels: dict[int, Any]) -> list[tuple[int, int]]:
    """(prefix length, mask) of an LPM table's levels, longest first: the lookup order."""
    return [
        (plen, (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF) for plen in sorted(levels, reverse=True)
    ]


class Pipeline:
    """fabric.p4 over one P4State. `ports` are the data ports; `cpu_port` takes packet-ins."""

    def __init__(self, schema: FabricSchema, cpu_port: int, ports: Iterable[int]) -> None:
        self.schema = schema
        self.cpu_port = cpu_port
        self.ports = frozenset(ports)
        self.drops: dict[DropReason, int] = dict.fromkeys(DropReason, 0)
        aid = schema.action_ids
        self._a_punt = aid[p4.PUNT_TO_CPU]
        self._a_answer_probe = aid.get(p4.ANSWER_PROBE, -1)
        self._a_drop = aid[p4.DROP]
        self._a_set_tc = aid[p4.SET_TRAFFIC_CLASS]
        self._a_set_next = aid[p4.SET_NEXT_ID]
        self._a_ecn = aid[p4.SET_ECN_THRESHOLDS]
        self._a_pfc = aid[p4.SET_PFC_THRESHOLDS]
        self._a_hash_qp = aid.get(p4.HASH_QP, -1)  # a P4Info without HashConfig never folds
        self._a_pfc_watchdog = aid.get(p4.SET_PFC_WATCHDOG, -1)
        self._a_count_matrix = aid.get(p4.COUNT_MATRIX, -1)
        self.counters: dict[int, tuple[list[int], list[int]]] = {
            c.id: ([0] * c.size, [0] * c.size) for c in schema.counters.values()
        }
        cid = schema.counter_ids
        self.c_ingress = self.counters[cid[p4.INGRESS_PORT_COUNTER]]
        self.c_egress = self.counters[cid[p4.EGRESS_PORT_COUNTER]]
        self.c_drop = self.counters[cid[p4.DROP_COUNTER]]
        self.c_ecn = self.counters[cid[p4.ECN_MARK_COUNTER]]
        self.c_pause_tx = self.counters[cid[p4.PFC_PAUSE_TX_COUNTER]]
        self.c_pause_rx = self.counters[cid[p4.PFC_PAUSE_RX_COUNTER]]
        self.c_storm = self.counters[cid[p4.PFC_STORM_COUNTER]]
        self.c_drop_reason = self.counters[cid[p4.DROP_REASON_COUNTER]][0]  # packets only
        self.c_queue_depth = self.counters[cid[p4.QUEUE_DEPTH_HISTOGRAM]][0]
        self.registers: dict[int, list[int]] = {
            r.id: [0] * r.size for r in schema.registers.values()
        }
        rid = schema.register_ids
        self.r_queue_depth = self.registers[rid[p4.QUEUE_DEPTH]]
        self.r_queue_watermark = self.registers[rid[p4.QUEUE_WATERMARK]]
        # acl: (priority, key, (action, its argument)) sorted by priority, highest first; the
        # argument is answer_probe's probe address, 0 for the other actions.
        self._acl: list[tuple[int, Key, tuple[int, int]]] = []
        self._acl_entries: dict[tuple[Key, int], tuple[int, int]] = {}
        self._acl_default = (0, 0)
        self._qos: dict[int, int] = {}
        self._qos_default = 0
        self._lpm: dict[int, dict[int, int | None]] = {}  # prefix len -> prefix -> next_id
        self._lpm_order: list[tuple[int, int]] = []  # (prefix_len, mask), longest first
        self._routing_default: int | None = None  # next_id, None: drop
        # TrafficMatrix: the ports whose arrivals count, and destination prefixes by length
        # (prefix len -> prefix -> class; longest first in _matrix_order).
        self._matrix_ports: set[int] = set()
        self._matrix_lpm: dict[int, dict[int, int]] = {}
        self._matrix_order: list[tuple[int, int]] = []
        self.c_matrix = self.counters[cid[p4.MATRIX_COUNTER]] if p4.MATRIX_COUNTER in cid else None
        # RoceSignals: the counter's packet cells (None: a P4Info without it counts nothing),
        # the sampled ports with their intervals, the last sample per port (the register).
        self.c_roce = self.counters[cid[p4.ROCE_COUNTER]][0] if p4.ROCE_COUNTER in cid else None
        self._nak_ports: dict[int, int] = {}
        self._a_sample_naks = aid.get(p4.SAMPLE_NAKS, -1)
        self.r_nak_sample_time = (
            self.registers[rid[p4.NAK_SAMPLE_TIME]] if p4.NAK_SAMPLE_TIME in rid else None
        )
        self.clock_us: Callable[[], int] = _monotonic_us
        # I2E clones of the frame `process` last ran (the switch sends and clears them).
        self.clones: list[Forward] = []
        self._hash_qp = False
        self._next: dict[int, TableAction] = {}
        self.ecn_thresholds: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.pfc_thresholds: dict[tuple[int, int], tuple[int, int]] = {}
        self.pfc_watchdog_us: tuple[int, int] | None = None  # (detect, restore); None: TM's own
        self.tm_generation = 0  # bumped when ecn_thresholds, pfc_thresholds or the watchdog change
        # Called before counters are read (the traffic manager folds its counts in).
        self.counter_sync: Callable[[], None] | None = None
        self.carrier: dict[int, bool] = {}
        self._generation = 0  # bumped on any member/group/carrier change
        self._group_cache: dict[int, tuple[int, tuple[_Hop, ...]]] = {}
        self._one_shot_cache: dict[int, tuple[int, tuple[_Hop, ...]]] = {}  # by next_id
        self._member_hops: dict[int, _Hop] = {}  # by member id, cleared on profile changes
        # Table id -> what an entry write / delete / default write does to the lookups here.
        tid = schema.table_ids
        self._on_set: dict[int, Callable[[Key, int, TableAction], None]] = {
            tid[p4.ROUTING_V4]: self._routing_set,
            tid[p4.NEXT]: self._next_set,
            tid[p4.ACL]: self._acl_set,
            tid[p4.QOS_CLASSIFY]: self._qos_set,
            tid[p4.ECN_MARKING]: self._ecn_set,
            tid[p4.PFC_CONFIG]: self._pfc_set,
        }
        self._on_unset: dict[int, Callable[[Key, int], None]] = {
            tid[p4.ROUTING_V4]: self._routing_unset,
            tid[p4.NEXT]: self._next_unset,
            tid[p4.ACL]: self._acl_unset,
            tid[p4.QOS_CLASSIFY]: self._qos_unset,
            tid[p4.ECN_MARKING]: self._ecn_unset,
            tid[p4.PFC_CONFIG]: self._pfc_unset,
        }
        self._on_default: dict[int, Callable[[ActionCall], None]] = {
            tid[p4.ROUTING_V4]: self._routing_default_set,
            tid[p4.ACL]: self._acl_default_set,
            tid[p4.QOS_CLASSIFY]: self._qos_default_set,
        }
        if p4.MATRIX_SOURCE in tid and p4.MATRIX_DEST in tid:
            self._on_set[tid[p4.MATRIX_SOURCE]] = self._matrix_source_set
            self._on_unset[tid[p4.MATRIX_SOURCE]] = self._matrix_source_unset
            self._on_set[tid[p4.MATRIX_DEST]] = self._matrix_dest_set
            self._on_unset[tid[p4.MATRIX_DEST]] = self._matrix_dest_unset
        if p4.NAK_SAMPLING in tid:
            self._on_set[tid[p4.NAK_SAMPLING]] = self._nak_sampling_set
            self._on_unset[tid[p4.NAK_SAMPLING]] = self._nak_sampling_unset
        if p4.HASH_CONFIG in tid:
            self._on_default[tid[p4.HASH_CONFIG]] = self._hash_config_default_set
        if p4.PFC_WATCHDOG in tid:
            self._on_default[tid[p4.PFC_WATCHDOG]] = self._pfc_watchdog_default_set
        self.state = P4State(schema, self, self.ports | {cpu_port})

    # ---- hooks from P4State ------------------------------------------------------------

    def table_set(self, table_id: int, key: Key, priority: int, action: TableAction) -> None:
        handler = self._on_set.get(table_id)
        if handler is not None:
            handler(key, priority, action)

    def table_setter(self, table_id: int) -> TableSetter:
        return self._on_set.get(table_id, _ignore_set)

    def table_unset(self, table_id: int, key: Key, priority: int) -> None:
        handler = self._on_unset.get(table_id)
        if handler is not None:
            handler(key, priority)

    def default_set(self, table_id: int, action: ActionCall) -> None:
        handler = self._on_default.get(table_id)
        if handler is not None:
            handler(action)

    def profile_changed(self) -> None:
        self._generation += 1
        self._group_cache.clear()
        self._member_hops.clear()

    def sync_counters(self) -> None:
        if self.counter_sync is not None:
            self.counter_sync()

    def counter_get(self, counter_id: int, index: int) -> tuple[int, int]:
        packets, octets = self.counters[counter_id]
        return packets[index], octets[index]

    def counter_set(self, counter_id: int, index: int, packets: int, octets: int) -> None:
        pk, by = self.counters[counter_id]
        pk[index] = packets
        by[index] = octets

    def register_get(self, register_id: int, index: int) -> int:
        return self.registers[register_id][index]

    def register_set(self, register_id: int, index: int, value: int) -> None:
        self.registers[register_id][index] = value

    # ---- carrier (watch_port) -----------------------------------------------------------

    def set_carrier(self, port: int, up: bool) -> None:
        if self.carrier.get(port) != up:
            self.carrier[port] = up
            self._generation += 1
            self._group_cache.clear()
            self._one_shot_cache.clear()

    # ---- the data path: FabricIngress ---------------------------------------------------

    def process(self, frame: bytes, in_port: int) -> Forward | None:
        """Run one frame received on `in_port` through fabric.p4's ingress."""
        n = len(frame)
        self._port_counters_ingress(in_port, n)
        l4 = self._parse(frame, n)
        if l4 < 0:
            self._drop(DropReason.MALFORMED, in_port, n)
            return None
        acl_action, acl_arg = (
            self._apply_acl(frame, in_port, l4) if self._acl else self._acl_default
        )
        if acl_action == self._a_punt:
            return Forward(self.cpu_port, frame, 0)
        if acl_action == self._a_answer_probe:
            answer = answer_probe(frame, l4, acl_arg)
            if answer is None:
                return Forward(self.cpu_port, frame, 0)
            return Forward(in_port, answer, 0)
        if acl_action == self._a_drop:
            self._drop(DropReason.ACL, in_port, n)
            return None
        if not l4:
            # No L2 bridging in a routed fabric: what is neither punted nor IPv4 drops.
            self._drop(DropReason.NOT_IPV4, in_port, n)
            return None
        tc = self._apply_qos(frame)
        if (
            self.c_roce is not None
            and l4 == IPV4 + IPV4_MIN_LEN  # fabric.p4 parses L4 only without IPv4 options
            and frame[IPV4 + IPV4_PROTOCOL] == IPPROTO_UDP
            and (frame[l4 + L4_DPORT] << 8 | frame[l4 + L4_DPORT + 1]) == ecmp.ROCEV2_UDP_PORT
        ):
            self._roce_signals(frame, l4 + UDP_LEN, in_port, tc)
        if in_port in self._matrix_ports:
            self._count_matrix(frame, n)
        next_id = self._apply_routing(frame, in_port, n)
        if next_id is None:
            return None
        hop = self._apply_next(frame, next_id, l4, in_port, n)
        if hop is None:
            return None
        port = hop.port
        if port not in self.ports and port != self.cpu_port:
            self._drop(DropReason.BAD_EGRESS_PORT, in_port, n)
            return None
        return Forward(port, _set_nexthop(frame, hop, l4 - IPV4), tc)

    def _port_counters_ingress(self, port: int, length: int) -> None:
        """PortCountersIngress: every frame received on a port."""
        pk, by = self.c_ingress
        if 0 <= port < len(pk):
            pk[port] += 1
            by[port] += length

    @staticmethod
    def _parse(frame: bytes, n: int) -> int:
        """FabricParser: ethernet, ipv4, udp/tcp, BTH, probe. The offset of the L4 header for
        IPv4, 0 for a frame that is not IPv4, -1 for a truncated or malformed one (rejected)."""
        if n < ETH_HLEN:
            return -1
        eth_type = frame[ETH_TYPE] << 8 | frame[ETH_TYPE + 1]
        if eth_type != ETHERTYPE_IPV4:
            return -1 if eth_type == latency.PROBE_ETH_TYPE and n < ETH_HLEN + PROBE_LEN else 0
        if n < IPV4 + IPV4_MIN_LEN:
            return -1
        vihl = frame[IPV4 + IPV4_VERSION_IHL]
        ihl = vihl & 0x0F
        l4 = IPV4 + ihl * 4
        if vihl >> 4 != 4 or ihl < 5 or n < l4:
            return -1
        proto = frame[IPV4 + IPV4_PROTOCOL]
        if proto == IPPROTO_UDP:
            if n < l4 + UDP_LEN:
                return -1
            dport = frame[l4 + L4_DPORT] << 8 | frame[l4 + L4_DPORT + 1]
            if dport == ecmp.ROCEV2_UDP_PORT:
                bth = l4 + UDP_LEN
                if n < bth + BTH_LEN:
                    return -1
                opcode = frame[bth + BTH_OPCODE]
                acked = opcode in (BTH_OPCODE_ACK, BTH_OPCODE_ATOMIC_ACK)
                if acked and n < bth + BTH_LEN + AETH_LEN:
                    return -1
        elif proto == IPPROTO_TCP:
            if n < l4 + TCP_MIN_LEN:
                return -1
        elif proto == latency.PROBE_IP_PROTO and ihl == 5 and n < l4 + PROBE_LEN:
            return -1
        return l4

    def _apply_acl(self, frame: bytes, in_port: int, l4: int) -> tuple[int, int]:
        """Acl: the action (and its argument) of the highest-priority entry matching ingress
        port, eth_dst, eth_type and ip_proto, else the default (NoAction)."""
        fields = (
            in_port,
            int.from_bytes(frame[ETH_DST : ETH_DST + 6], "big"),
            frame[ETH_TYPE] << 8 | frame[ETH_TYPE + 1],
            frame[IPV4 + IPV4_PROTOCOL] if l4 else 0,
        )
        for _prio, key, action in self._acl:
            for value, spec in zip(fields, key, strict=True):
                if spec is not None and value & spec[1] != spec[0]:
                    break
            else:
                return action
        return self._acl_default

    def _apply_qos(self, frame: bytes) -> int:
        """QosClassify: the traffic class of the IPv4 DSCP (qos_classify; a miss is its
        default, set_traffic_class(TC_BEST_EFFORT))."""
        return self._qos.get(frame[IPV4 + IPV4_DSCP_ECN] >> 2, self._qos_default)

    def _roce_signals(self, frame: bytes, bth: int, in_port: int, tc: int) -> None:
        """RoceSignals: count the packet by port, class and kind; a NAK on a port nak_sampling
        lists is cloned to NAK_SAMPLE_SESSION when the port's last sample is `interval_us`
        old (nak_sample_time, 32-bit microseconds, compared modulo 2**32 as the program does)."""
        # The kind by table lookups (every lab frame is RoCEv2: this is on the hot path).
        kind = _OPCODE_KIND[frame[bth + BTH_OPCODE]] or _SYNDROME_KIND[frame[bth + BTH_LEN]]
        cells = self.c_roce
        assert cells is not None
        index = in_port * ROCE_CELLS_PER_PORT + tc * ROCE_KINDS + kind
        if index < len(cells):
            cells[index] += 1
        if not _NAK_FIRST <= kind <= _NAK_LAST or not self._nak_ports:
            return
        interval = self._nak_ports.get(in_port)
        last = self.r_nak_sample_time
        if interval is None or last is None:
            return
        now = self.clock_us() & _U32
        if (now - last[in_port]) & _U32 >= interval:
            last[in_port] = now
            self._clone(frame, NAK_SAMPLE_SESSION)

    def _clone(self, frame: bytes, session_id: int) -> None:
        """clone(CloneType.I2E, session): the frame as it arrived, to each replica's port (none
        when the session is not configured, as on bmv2). Clones carry no metadata: class 0."""
        session = self.state.replication.sessions.get(session_id)
        if session is None:
            return
        cut = session.packet_length_bytes
        copy = frame[:cut] if cut else frame
        for port, _instance in session.replicas:
            self.clones.append(Forward(port, copy, 0))

    def _count_matrix(self, frame: bytes, n: int) -> None:
        """TrafficMatrix on a host port (matrix_source hit): matrix_dest's longest prefix
        match on the IPv4 destination counts the frame at its class; a miss counts nothing."""
        dst = _TWO_IPS.unpack_from(frame, IPV4 + IPV4_SRC)[1]
        for plen, mask in self._matrix_order:
            dst_class = self._matrix_lpm[plen].get(dst & mask)
            if dst_class is not None:
                assert self.c_matrix is not None
                pk, by = self.c_matrix
                if dst_class < len(pk):
                    pk[dst_class] += 1
                    by[dst_class] += n
                return

    def _apply_routing(self, frame: bytes, in_port: int, n: int) -> int | None:
        """Routing: drop what would leave with TTL 0, else routing_v4's longest prefix
        match on the IPv4 destination; the next id, or None when dropped."""
        if frame[IPV4 + IPV4_TTL] <= 1:
            self._drop(DropReason.TTL, in_port, n)
            return None
        dst = _TWO_IPS.unpack_from(frame, IPV4 + IPV4_SRC)[1]
        next_id = self._routing_default
        lpm = self._lpm
        for plen, mask in self._lpm_order:
            hit = lpm[plen].get(dst & mask, _NO_ROUTE)
            if hit != _NO_ROUTE:
                next_id = hit
                break
        if next_id is None:
            self._drop(DropReason.NO_ROUTE, in_port, n)
        return next_id

    @staticmethod
    def _hash_config(frame: bytes, l4: int, proto: int, sport: int, dport: int) -> int:
        """HashConfig, when hash_config's action is hash_qp: the source port the selector
        hashes, with a RoCEv2 frame's BTH destination QP folded in (railfabric.ecmp)."""
        if proto == IPPROTO_UDP and dport == ecmp.ROCEV2_UDP_PORT:
            bth = l4 + UDP_LEN
            qp = int.from_bytes(frame[bth + BTH_DST_QP : bth + BTH_DST_QP + 3], "big")
            return ecmp.fold_qp(sport, qp)
        return sport

    def _apply_next(self, frame: bytes, next_id: int, l4: int, in_port: int, n: int) -> _Hop | None:
        """Next: a member directly, or the ecmp_selector over a group's (or a one-shot set's)
        live members; None when dropped (a miss, or no live member)."""
        nxt = self._next.get(next_id)
        if nxt is None:
            self._drop(DropReason.NEXT_MISS, in_port, n)
            return None
        kind = type(nxt)
        if kind is GroupRef:
            cached = self._group_cache.get(nxt.group_id)  # type: ignore[union-attr]
            if cached is not None and cached[0] == self._generation:
                hops = cached[1]
            else:
                hops = self.live_hops(nxt.group_id)  # type: ignore[union-attr]
        elif kind is MemberRef:
            hop = self._member_hop(nxt.member_id)  # type: ignore[union-attr]
            if hop is None:
                self._drop(DropReason.NEXT_MISS, in_port, n)
            return hop
        elif kind is OneShot:
            hops = self.one_shot_hops(next_id, nxt)  # type: ignore[arg-type]
        else:
            return _hop(nxt)  # type: ignore[arg-type]
        if not hops:
            self._drop(DropReason.NO_LIVE_MEMBER, in_port, n)
            return None
        src, dst = _TWO_IPS.unpack_from(frame, IPV4 + IPV4_SRC)
        proto = frame[IPV4 + IPV4_PROTOCOL]
        if proto in (IPPROTO_UDP, IPPROTO_TCP):
            sport, dport = _TWO_PORTS.unpack_from(frame, l4 + L4_SPORT)
            if self._hash_qp:
                sport = self._hash_config(frame, l4, proto, sport, dport)
        else:
            sport = dport = 0
        return ecmp.choose_member(ecmp.flow_hash(src, dst, proto, sport, dport), hops)

    def _member_hop(self, member_id: int) -> _Hop | None:
        hop = self._member_hops.get(member_id)
        if hop is None:
            member = self.state.members[self.schema.profile_id].get(member_id)
            if member is None:
                return None
            hop = self._member_hops[member_id] = _hop(member.action)
        return hop

    def live_hops(self, group_id: int) -> tuple[_Hop, ...]:
        """The group's members whose watch_port has carrier, in member-handle order."""
        cached = self._group_cache.get(group_id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        profile_id = self.schema.profile_id
        group = self.state.groups[profile_id].get(group_id)
        hops: list[tuple[int, _Hop]] = []
        if group is not None:
            members = self.state.members[profile_id]
            carrier = self.carrier
            for gm in group.members:
                if gm.watch_port is not None and not carrier.get(gm.watch_port, True):
                    continue
                member = members[gm.member_id]
                hops.extend([(member.handle, _hop(member.action))] * gm.weight)
        hops.sort(key=lambda h: h[0])
        result = tuple(h for _, h in hops)
        self._group_cache[group_id] = (self._generation, result)
        return result

    def one_shot_hops(self, next_id: int, one_shot: OneShot) -> tuple[_Hop, ...]:
        """A one-shot set's actions whose watch_port has carrier, in list (handle) order."""
        cached = self._one_shot_cache.get(next_id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        carrier = self.carrier
        hops: list[_Hop] = []
        for item in one_shot.actions:
            if item.watch_port is None or carrier.get(item.watch_port, True):
                hops.extend([_hop(item.action)] * item.weight)
        result = tuple(hops)
        self._one_shot_cache[next_id] = (self._generation, result)
        return result

    def _drop(self, reason: DropReason, port: int, length: int) -> None:
        """mark_to_drop, then DropCounter: pipeline drops counted on the ingress port."""
        self.drops[reason] += 1
        self.count_drops(port, reason.code, 1, length)

    def count_drops(self, port: int, reason: P4DropReason, packets: int, octets: int) -> None:
        """DropCounter's two counters: `packets` frames (of `octets` bytes in all) dropped
        for `reason`, counted on `port`."""
        pk, by = self.c_drop
        if 0 <= port < len(pk):
            pk[port] += packets
            by[port] += octets
            self.c_drop_reason[drop_reason_index(port, reason)] += packets

    # ---- PacketIoIngress, PortCountersEgress, traffic-manager drops ---------------------

    def packet_out(self, frame: bytes, egress_port: int) -> Forward | None:
        """A PacketOut: bypasses ingress and leaves `egress_port` as is."""
        n = len(frame)
        self._port_counters_ingress(self.cpu_port, n)
        if egress_port not in self.ports:
            self._drop(DropReason.BAD_EGRESS_PORT, self.cpu_port, n)
            return None
        return Forward(egress_port, frame, 0)

    def count_ingress(self, port: int, length: int) -> None:
        """A frame received on `port` that the pipeline does not see (MAC control)."""
        self._port_counters_ingress(port, length)

    def count_egress(self, port: int, length: int) -> None:
        """PortCountersEgress: every frame transmitted on a port."""
        pk, by = self.c_egress
        if 0 <= port < len(pk):
            pk[port] += 1
            by[port] += length

    def count_tm_drop(self, port: int, length: int, reason: P4DropReason) -> None:
        """A frame lost on egress `port` after the pipeline (the traffic manager, the host)."""
        self.count_drops(port, reason, 1, length)

    # ---- table writes, per control ------------------------------------------------------

    def _acl_set(self, key: Key, priority: int, action: TableAction) -> None:
        assert isinstance(action, ActionCall)
        arg = action.args[0] if action.action_id == self._a_answer_probe else 0
        self._acl_entries[(key, priority)] = (action.action_id, arg)
        self._rebuild_acl()

    def _acl_unset(self, key: Key, priority: int) -> None:
        self._acl_entries.pop((key, priority), None)
        self._rebuild_acl()

    def _acl_default_set(self, action: ActionCall) -> None:
        self._acl_default = (action.action_id, 0)

    def _rebuild_acl(self) -> None:
        rows = [(prio, key, action) for (key, prio), action in self._acl_entries.items()]
        rows.sort(key=lambda row: -row[0])
        self._acl = rows

    def _qos_set(self, key: Key, priority: int, action: TableAction) -> None:
        assert isinstance(action, ActionCall)
        tc = action.args[0] if action.action_id == self._a_set_tc else 0
        self._qos[_key_value(key, 0)] = tc

    def _qos_unset(self, key: Key, priority: int) -> None:
        self._qos.pop(_key_value(key, 0), None)

    def _qos_default_set(self, action: ActionCall) -> None:
        self._qos_default = action.args[0] if action.action_id == self._a_set_tc else 0

    def _routing_set(self, key: Key, priority: int, action: TableAction) -> None:
        value, plen = key[0] or (0, 0)
        next_id = (
            action.args[0]
            if isinstance(action, ActionCall) and action.action_id == self._a_set_next
            else None
        )
        if plen not in self._lpm:
            self._lpm[plen] = {}
            self._rebuild_lpm_order()
        self._lpm[plen][value] = next_id

    def _routing_unset(self, key: Key, priority: int) -> None:
        value, plen = key[0] or (0, 0)
        level = self._lpm.get(plen)
        if level is not None:
            level.pop(value, None)
            if not level:
                del self._lpm[plen]
                self._rebuild_lpm_order()

    def _routing_default_set(self, action: ActionCall) -> None:
        self._routing_default = action.args[0] if action.action_id == self._a_set_next else None

    def _rebuild_lpm_order(self) -> None:
        self._lpm_order = _lpm_order(self._lpm)

    def _matrix_source_set(self, key: Key, priority: int, action: TableAction) -> None:
        self._matrix_ports.add(_key_value(key, 0))

    def _matrix_source_unset(self, key: Key, priority: int) -> None:
        self._matrix_ports.discard(_key_value(key, 0))

    def _matrix_dest_set(self, key: Key, priority: int, action: TableAction) -> None:
        value, plen = key[0] or (0, 0)
        if not isinstance(action, ActionCall) or action.action_id != self._a_count_matrix:
            self._matrix_dest_unset(key, priority)  # only NoAction is left: counts nothing
            return
        if plen not in self._matrix_lpm:
            self._matrix_lpm[plen] = {}
            self._matrix_order = _lpm_order(self._matrix_lpm)
        self._matrix_lpm[plen][value] = action.args[0]

    def _matrix_dest_unset(self, key: Key, priority: int) -> None:
        value, plen = key[0] or (0, 0)
        level = self._matrix_lpm.get(plen)
        if level is not None:
            level.pop(value, None)
            if not level:
                del self._matrix_lpm[plen]
                self._matrix_order = _lpm_order(self._matrix_lpm)

    def _nak_sampling_set(self, key: Key, priority: int, action: TableAction) -> None:
        port = _key_value(key, 0)
        if isinstance(action, ActionCall) and action.action_id == self._a_sample_naks:
            self._nak_ports[port] = action.args[0]
        else:
            self._nak_ports.pop(port, None)  # NoAction is default-only: not reached

    def _nak_sampling_unset(self, key: Key, priority: int) -> None:
        self._nak_ports.pop(_key_value(key, 0), None)

    def _hash_config_default_set(self, action: ActionCall) -> None:
        self._hash_qp = action.action_id == self._a_hash_qp

    def _pfc_watchdog_default_set(self, action: ActionCall) -> None:
        timing = action.args if action.action_id == self._a_pfc_watchdog else None
        self.pfc_watchdog_us = (timing[0], timing[1]) if timing else None
        self.tm_generation += 1

    def _next_set(self, key: Key, priority: int, action: TableAction) -> None:
        next_id = _key_value(key, 0)
        self._next[next_id] = action
        self._one_shot_cache.pop(next_id, None)

    def _next_unset(self, key: Key, priority: int) -> None:
        next_id = _key_value(key, 0)
        self._next.pop(next_id, None)
        self._one_shot_cache.pop(next_id, None)

    def _ecn_set(self, key: Key, priority: int, action: TableAction) -> None:
        assert isinstance(action, ActionCall)
        self.tm_generation += 1
        k = (_key_value(key, 0), _key_value(key, 1))
        if action.action_id == self._a_ecn:
            kmin, kmax, pmax = action.args
            self.ecn_thresholds[k] = (kmin, kmax, pmax)
        else:
            self.ecn_thresholds.pop(k, None)

    def _ecn_unset(self, key: Key, priority: int) -> None:
        self.ecn_thresholds.pop((_key_value(key, 0), _key_value(key, 1)), None)
        self.tm_generation += 1

    def _pfc_set(self, key: Key, priority: int, action: TableAction) -> None:
        assert isinstance(action, ActionCall)
        self.tm_generation += 1
        k = (_key_value(key, 0), _key_value(key, 1))
        if action.action_id == self._a_pfc:
            xoff, xon = action.args
            self.pfc_thresholds[k] = (xoff, xon)
        else:
            self.pfc_thresholds.pop(k, None)

    def _pfc_unset(self, key: Key, priority: int) -> None:
        self.pfc_thresholds.pop((_key_value(key, 0), _key_value(key, 1)), None)
        self.tm_generation += 1


def _set_nexthop(frame: bytes, hop: _Hop, ip_len: int) -> bytearray:
    """set_nexthop (MACs, TTL - 1), then FabricComputeChecksum: the IPv4 header checksum
    recomputed over the `ip_len` header bytes as they leave (v1model update_checksum, csum16):
    the sum of every 16-bit word but the checksum, with the TTL (the high byte of word 4)
    one lower."""
    words = _IP_WORDS[ip_len >> 2].unpack_from(frame, IPV4)
    total = sum(words) - words[IPV4_CHECKSUM >> 1] - 0x100
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    out = bytearray(frame)
    out[ETH_DST : ETH_HLEN - 2] = hop.macs
    out[IPV4 + IPV4_TTL] = frame[IPV4 + IPV4_TTL] - 1
    _CHECKSUM.pack_into(out, IPV4 + IPV4_CHECKSUM, ~total & 0xFFFF)
    return out


def answer_probe(frame: bytes, l4: int, address: int) -> bytearray | None:
    """Acl's answer to a latency probe request (answer_probe): the frame to send back out of
    the port it came in on, Ethernet (and IPv4) addresses swapped, op a reply; None when the
    frame is not a request this switch answers (a reply, another magic or version, a group
    destination MAC, a mesh probe for another address), which goes to the CPU instead. `l4`
    is the parser's (the offset after an IPv4 header, 0 for a frame that is not IPv4). The
    swap leaves the IPv4 checksum as it was (a one's-complement sum does not see order)."""
    if l4:
        if l4 != IPV4 + IPV4_MIN_LEN or frame[IPV4 + IPV4_PROTOCOL] != latency.PROBE_IP_PROTO:
            return None
        start = l4
    elif (frame[ETH_TYPE] << 8 | frame[ETH_TYPE + 1]) == latency.PROBE_ETH_TYPE:
        start = ETH_HLEN
    else:
        return None
    if frame[start : start + PROBE_LEN] != _PROBE_REQUEST or frame[ETH_DST] & 1:
        return None
    out = bytearray(frame)
    out[ETH_DST : ETH_DST + 6], out[ETH_SRC : ETH_SRC + 6] = (
        frame[ETH_SRC : ETH_SRC + 6],
        frame[ETH_DST : ETH_DST + 6],
    )
    if l4:
        src, dst = _TWO_IPS.unpack_from(frame, IPV4 + IPV4_SRC)
        if dst != address:
            return None
        _TWO_IPS.pack_into(out, IPV4 + IPV4_SRC, dst, src)
    out[start + PROBE_OP] = latency.OP_REPLY
    return out
