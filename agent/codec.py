"""Pipeline entries (agent/translate.py) ↔ P4Runtime entities, with every id resolved by name
from the P4Info at start-up (the names: railfabric/fabric_p4.py). A name the P4Info lacks fails
loudly, naming the closest one it has.

Values go on the wire in P4Runtime's canonical form (big-endian, no leading zero bytes) and are
read back as integers, so what a target returns compares equal to what was written whatever
padding it uses."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from finsy.proto import p4i, p4r

from agent.translate import (
    AclAction,
    AclEntry,
    CloneSessionEntry,
    EcnEntry,
    Entry,
    GroupEntry,
    GroupMember,
    HashConfigEntry,
    MatrixDestEntry,
    MatrixSourceEntry,
    MemberEntry,
    NakSamplingEntry,
    NextEntry,
    Op,
    PfcEntry,
    PfcWatchdogEntry,
    Pipeline,
    QosEntry,
    RouteEntry,
    Update,
)
from railfabric import fabric_p4 as p4
from railfabric.p4bytes import decode_unchecked, encode
from railfabric.protowire import len_field, len_tag, uint_field, uint_tag, varint

T = TypeVar("T")
LOG = logging.getLogger("railfabric.agent.codec")
# The replica instance (egress_rid) of clone session copies; one copy per port, so any will do.
CLONE_INSTANCE = 1

# Counter name → (PortCounters field for packets, field for bytes or None).
PORT_COUNTERS: dict[str, tuple[str, str | None]] = {
    p4.INGRESS_PORT_COUNTER: ("rx_packets", "rx_bytes"),
    p4.EGRESS_PORT_COUNTER: ("tx_packets", "tx_bytes"),
    p4.DROP_COUNTER: ("drops", None),
    p4.ECN_MARK_COUNTER: ("ecn_marks", None),
    p4.PFC_PAUSE_TX_COUNTER: ("pfc_pause_tx", None),
    p4.PFC_PAUSE_RX_COUNTER: ("pfc_pause_rx", None),
    p4.PFC_STORM_COUNTER: ("pfc_watchdog_storms", None),
}

# The tables the agent writes, and the match fields it sets in them.
_TABLE_KEYS: dict[str, tuple[str, ...]] = {
    p4.ACL: (p4.ACL_ETH_TYPE,),
    p4.QOS_CLASSIFY: (p4.QOS_CLASSIFY_DSCP,),
    p4.ROUTING_V4: (p4.ROUTING_V4_IPV4_DST,),
    p4.NEXT: (p4.NEXT_NEXT_ID,),
    p4.ECN_MARKING: (p4.ECN_MARKING_EG_PORT, p4.ECN_MARKING_TRAFFIC_CLASS),
    p4.PFC_CONFIG: (p4.PFC_CONFIG_PORT, p4.PFC_CONFIG_PRIORITY),
    p4.HASH_CONFIG: (),  # no key: the agent writes only its default action
    p4.PFC_WATCHDOG: (),  # the same
    p4.MATRIX_SOURCE: (p4.MATRIX_SOURCE_IG_PORT,),
    p4.NAK_SAMPLING: (p4.NAK_SAMPLING_IG_PORT,),
    p4.MATRIX_DEST: (p4.MATRIX_DEST_IPV4_DST,),
}
_ACTION_PARAMS: dict[str, tuple[str, ...]] = {
    p4.PUNT_TO_CPU: (),
    p4.ANSWER_PROBE: (p4.ANSWER_PROBE_ADDRESS,),
    p4.DROP: (),
    p4.SET_TRAFFIC_CLASS: (p4.SET_TRAFFIC_CLASS_TC,),
    p4.SET_NEXT_ID: (p4.SET_NEXT_ID_NEXT_ID,),
    p4.SET_NEXTHOP: (p4.SET_NEXTHOP_PORT, p4.SET_NEXTHOP_SMAC, p4.SET_NEXTHOP_DMAC),
    p4.SET_ECN_THRESHOLDS: (
        p4.SET_ECN_THRESHOLDS_KMIN,
        p4.SET_ECN_THRESHOLDS_KMAX,
        p4.SET_ECN_THRESHOLDS_PMAX,
    ),
    p4.SET_PFC_THRESHOLDS: (p4.SET_PFC_THRESHOLDS_XOFF, p4.SET_PFC_THRESHOLDS_XON),
    p4.SET_PFC_WATCHDOG: (p4.SET_PFC_WATCHDOG_DETECT_US, p4.SET_PFC_WATCHDOG_RESTORE_US),
    p4.HASH_QP: (),
    p4.COUNT_MATRIX: (p4.COUNT_MATRIX_DST_CLASS,),
    p4.SAMPLE_NAKS: (p4.SAMPLE_NAKS_INTERVAL_US,),
    p4.NO_ACTION: (),
}


_INSERT, _MODIFY, _DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE
# Compared by identity: an Enum's __hash__ is Python code, and a class attribute costs a lookup.
_OP_INSERT, _OP_MODIFY, _OP_DELETE = Op.INSERT, Op.MODIFY, Op.DELETE

# WriteRequest.updates: each encoded update goes out as one of these fields.
_UPDATES_TAG = bytes([p4r.WriteRequest.UPDATES_FIELD_NUMBER << 3 | 2])  # length-delimited


@dataclass(frozen=True, slots=True)
class Encoded:
    """Updates in protobuf wire format: the `updates` fields of a WriteRequest, in order."""

    data: bytes
    count: int


class _RouteWire:
    """routing_v4 updates straight in wire format: a route is `head + address + middle +
    next id`, where head and middle depend only on the update type, the prefix length and the
    two values' lengths, so they are built once per combination (a few dozen on a switch).
    Filling a message field by field and serializing it costs several times as much, for the
    entries a large switch has most of. `Codec` checks it against the field encoder."""

    def __init__(self, table_id: int, field_id: int, action_id: int, param_id: int) -> None:
        self._ids = (table_id, field_id, action_id, param_id)
        self._pieces: dict[tuple[int, int, int, int], tuple[bytes, bytes]] = {}

    def _build(self, kind: int, lv: int, length: int, lval: int) -> tuple[bytes, bytes]:
        """(head, middle) for these lengths: the whole update built around stand-in values
        (only their lengths matter), cut where the values go."""
        table_id, field_id, action_id, param_id = self._ids
        param = uint_field(p4r.Action.Param.PARAM_ID_FIELD_NUMBER, param_id) + len_field(
            p4r.Action.Param.VALUE_FIELD_NUMBER, b"\0" * lval
        )
        action = uint_field(p4r.Action.ACTION_ID_FIELD_NUMBER, action_id) + len_field(
            p4r.Action.PARAMS_FIELD_NUMBER, param
        )
        # The table action is the entry's last field, and the entry is the update's last.
        table_action = len_field(
            p4r.TableEntry.ACTION_FIELD_NUMBER,
            len_field(p4r.TableAction.ACTION_FIELD_NUMBER, action),
        )
        entry = uint_field(p4r.TableEntry.TABLE_ID_FIELD_NUMBER, table_id)
        tail = table_action  # everything after the address
        if length > 0:  # a /0 route has no match field at all (P4Runtime §9.1.1)
            prefix_len = uint_field(p4r.FieldMatch.LPM.PREFIX_LEN_FIELD_NUMBER, length)
            lpm = len_field(p4r.FieldMatch.LPM.VALUE_FIELD_NUMBER, b"\0" * lv) + prefix_len
            match = uint_field(p4r.FieldMatch.FIELD_ID_FIELD_NUMBER, field_id) + len_field(
                p4r.FieldMatch.LPM_FIELD_NUMBER, lpm
            )
            entry += len_field(p4r.TableEntry.MATCH_FIELD_NUMBER, match)
            tail = prefix_len + table_action
        entry += table_action
        update = uint_field(p4r.Update.TYPE_FIELD_NUMBER, kind) + len_field(
            p4r.Update.ENTITY_FIELD_NUMBER, len_field(p4r.Entity.TABLE_ENTRY_FIELD_NUMBER, entry)
        )
        whole = _UPDATES_TAG + varint(len(update)) + update
        return whole[: len(whole) - len(tail) - lv], tail[: len(tail) - lval]

    def field(self, kind: int, entry: RouteEntry) -> bytes:
        """The update as a WriteRequest.updates field."""
        address, length, next_id = entry
        # p4bytes.encode, inlined.
        value = next_id.to_bytes((next_id.bit_length() + 7) // 8 or 1, "big")
        v = address.to_bytes((address.bit_length() + 7) // 8 or 1, "big") if length else b""
        shape = (kind, len(v), length, len(value))
        pieces = self._pieces.get(shape)
        if pieces is None:
            pieces = self._pieces[shape] = self._build(*shape)
        return pieces[0] + v + pieces[1] + value


class _MemberWire:
    """ecmp_selector member updates straight in wire format, as _RouteWire writes routes: a
    member is `head + member id + before port + port + before smac + smac + before dmac + dmac`
    (set_nexthop's parameters, in the order the field encoder adds them), the pieces built once
    per update type and lengths of the values. A switch's first Write is mostly its members
    (128 on ref-100k's largest), and no Write is in flight to hide their encoding: that Write
    took 0.6 ms to encode field by field, 0.13 ms so. `Codec` checks it against the field
    encoder."""

    def __init__(self, profile_id: int, action_id: int, param_ids: tuple[int, int, int]) -> None:
        self._ids = (profile_id, action_id, param_ids)
        self._pieces: dict[tuple[int, ...], tuple[bytes, bytes, bytes, bytes]] = {}

    def _build(
        self, kind: int, lid: int, lport: int, lsmac: int, ldmac: int
    ) -> tuple[bytes, bytes, bytes, bytes]:
        profile_id, action_id, param_ids = self._ids
        # Each parameter as an Action.params field, up to its value.
        params = []
        for param_id, size in zip(param_ids, (lport, lsmac, ldmac), strict=True):
            param = uint_field(p4r.Action.Param.PARAM_ID_FIELD_NUMBER, param_id)
            param += len_tag(p4r.Action.Param.VALUE_FIELD_NUMBER) + varint(size)
            field = len_tag(p4r.Action.PARAMS_FIELD_NUMBER) + varint(len(param) + size)
            params.append(field + param)
        action_id_field = uint_field(p4r.Action.ACTION_ID_FIELD_NUMBER, action_id)
        action_size = len(action_id_field) + sum(map(len, params)) + lport + lsmac + ldmac
        # A member id of 0 is protobuf's default: the field encoder leaves it out.
        member = uint_field(p4r.ActionProfileMember.ACTION_PROFILE_ID_FIELD_NUMBER, profile_id)
        if lid:
            member += uint_tag(p4r.ActionProfileMember.MEMBER_ID_FIELD_NUMBER)
        action_head = len_tag(p4r.ActionProfileMember.ACTION_FIELD_NUMBER) + varint(action_size)
        member_size = len(member) + lid + len(action_head) + action_size
        entity = len_tag(p4r.Entity.ACTION_PROFILE_MEMBER_FIELD_NUMBER) + varint(member_size)
        entity_size = len(entity) + member_size
        update_head = uint_field(p4r.Update.TYPE_FIELD_NUMBER, kind) + len_tag(
            p4r.Update.ENTITY_FIELD_NUMBER
        )
        update_size = len(update_head) + len(varint(entity_size)) + entity_size
        head = b"".join(
            (_UPDATES_TAG, varint(update_size), update_head, varint(entity_size), entity, member)
        )
        return head, action_head + action_id_field + params[0], params[1], params[2]

    def field(self, kind: int, entry: MemberEntry) -> bytes:
        """The update as a WriteRequest.updates field."""
        member_id, port, smac, dmac = entry
        # p4bytes.encode, inlined.
        p = port.to_bytes((port.bit_length() + 7) // 8 or 1, "big")
        s = smac.to_bytes((smac.bit_length() + 7) // 8 or 1, "big")
        d = dmac.to_bytes((dmac.bit_length() + 7) // 8 or 1, "big")
        m = varint(member_id) if member_id else b""
        shape = (kind, len(m), len(p), len(s), len(d))
        pieces = self._pieces.get(shape)
        if pieces is None:
            pieces = self._pieces[shape] = self._build(*shape)
        head, before_port, before_smac, before_dmac = pieces
        return b"".join((head, m, before_port, p, before_smac, s, before_dmac, d))


# Routes whose wire encoding Codec compares with the field encoder at start-up: /0 (no match
# field), and values of one and of four bytes.
_ROUTE_SAMPLES = (
    RouteEntry(0, 0, 1),
    RouteEntry(0x0A000000, 8, 300),
    RouteEntry((1 << 32) - 1, 32, (1 << 32) - 1),
)
# Members likewise: a member id of 0 (left out), values of one and of six bytes.
_MEMBER_SAMPLES = (
    MemberEntry(0, 0, 0, 0),
    MemberEntry(1, 1, 0x02AA00000001, 0x020000001001),
    MemberEntry(300, 511, (1 << 48) - 1, 1 << 40),
)


class P4InfoMismatch(ValueError):
    """The P4Info lacks a name of the contract."""


def _closest(name: str, names: Iterable[str]) -> str:
    near = difflib.get_close_matches(name, list(names), n=1)
    return f" Did you mean {near[0]!r}?" if near else ""


@dataclass(frozen=True)
class TableIds:
    id: int
    keys: Mapping[str, int]
    key_widths: Mapping[str, int]


@dataclass(frozen=True)
class ActionIds:
    id: int
    params: Mapping[str, int]


class Codec:
    """Ids of the contract's names in one P4Info, and entry ↔ entity conversion."""

    def __init__(self, p4info: p4i.P4Info, origin: str = "P4Info") -> None:
        self.p4info = p4info
        self.origin = origin
        tables = {t.preamble.name: t for t in p4info.tables}
        actions = {a.preamble.name: a for a in p4info.actions}
        self.tables: dict[str, TableIds] = {}
        for name, keys in _TABLE_KEYS.items():
            table = self._find(tables, name, "table")
            fields = {f.name: f for f in table.match_fields}
            for key in keys:
                self._find(fields, key, f"match field of {name}")
            self.tables[name] = TableIds(
                table.preamble.id,
                {k: f.id for k, f in fields.items()},
                {k: f.bitwidth for k, f in fields.items()},
            )
        self.actions: dict[str, ActionIds] = {}
        for name, params in _ACTION_PARAMS.items():
            action = self._find(actions, name, "action")
            by_name = {p.name: p for p in action.params}
            for param in params:
                self._find(by_name, param, f"parameter of {name}")
            self.actions[name] = ActionIds(action.preamble.id, {p: by_name[p].id for p in params})
        profiles = {p.preamble.name: p for p in p4info.action_profiles}
        self.selector_id = self._find(profiles, p4.ECMP_SELECTOR, "action profile").preamble.id
        counters = {c.preamble.name: c for c in p4info.counters}
        self.counters = {
            name: self._find(counters, name, "counter").preamble.id for name in PORT_COUNTERS
        }
        self.counter_names = {v: k for k, v in self.counters.items()}
        # Indexed by port and more (railfabric/fabric_counters.py; read by agent/counters.py).
        self.drop_reason_counter_id = self._find(
            counters, p4.DROP_REASON_COUNTER, "counter"
        ).preamble.id
        self.queue_histogram_id = self._find(
            counters, p4.QUEUE_DEPTH_HISTOGRAM, "counter"
        ).preamble.id
        # Indexed by destination class (a ToR's traffic matrix; agent/counters.py).
        self.matrix_counter_id = self._find(counters, p4.MATRIX_COUNTER, "counter").preamble.id
        # Indexed by port, traffic class and RoCE kind (agent/counters.py).
        self.roce_counter_id = self._find(counters, p4.ROCE_COUNTER, "counter").preamble.id
        registers = {r.preamble.name: r for r in p4info.registers}
        self.queue_depth_id = self._find(registers, p4.QUEUE_DEPTH, "register").preamble.id
        self.queue_watermark_id = self._find(registers, p4.QUEUE_WATERMARK, "register").preamble.id
        metadata = {m.preamble.name: m for m in p4info.controller_packet_metadata}
        self.packet_in = {
            m.name: m.id for m in self._find(metadata, p4.PACKET_IN, "packet metadata").metadata
        }
        self.packet_out = {
            m.name: m.id for m in self._find(metadata, p4.PACKET_OUT, "packet metadata").metadata
        }
        for need, have in (
            (p4.PACKET_IN_INGRESS_PORT, self.packet_in),
            (p4.PACKET_OUT_EGRESS_PORT, self.packet_out),
        ):
            self._find(have, need, "controller packet metadata field")
        self._table_names = {t.id: n for n, t in self.tables.items()}
        self._routing_id = self.tables[p4.ROUTING_V4].id
        self._routing_dst_id = self.tables[p4.ROUTING_V4].keys[p4.ROUTING_V4_IPV4_DST]
        self._set_next_id_id = self.actions[p4.SET_NEXT_ID].id
        self._next_id_param_id = self.actions[p4.SET_NEXT_ID].params[p4.SET_NEXT_ID_NEXT_ID]
        self._next_table_id = self.tables[p4.NEXT].id
        self._next_key_id = self.tables[p4.NEXT].keys[p4.NEXT_NEXT_ID]
        self._fillers: dict[type, Callable[[p4r.Entity, Any], None]] = {
            AclEntry: self._fill_acl,
            QosEntry: self._fill_qos,
            EcnEntry: self._fill_ecn,
            PfcEntry: self._fill_pfc,
            RouteEntry: self._fill_route,
            NextEntry: self._fill_next,
            MemberEntry: self._fill_member,
            GroupEntry: self._fill_group,
            HashConfigEntry: self._fill_hash_config,
            PfcWatchdogEntry: self._fill_pfc_watchdog,
            MatrixSourceEntry: self._fill_matrix_source,
            MatrixDestEntry: self._fill_matrix_dest,
            NakSamplingEntry: self._fill_nak_sampling,
            CloneSessionEntry: self._fill_clone_session,
        }
        self._hash_config_id = self.tables[p4.HASH_CONFIG].id
        self._pfc_watchdog_id = self.tables[p4.PFC_WATCHDOG].id
        self._set_pfc_watchdog_id = self.actions[p4.SET_PFC_WATCHDOG].id
        self._warned_watch_port = False
        self._hash_qp_id = self.actions[p4.HASH_QP].id
        self._route_wire = _RouteWire(
            self._routing_id, self._routing_dst_id, self._set_next_id_id, self._next_id_param_id
        )
        nexthop = self.actions[p4.SET_NEXTHOP]
        self._member_wire = _MemberWire(
            self.selector_id,
            nexthop.id,
            (
                nexthop.params[p4.SET_NEXTHOP_PORT],
                nexthop.params[p4.SET_NEXTHOP_SMAC],
                nexthop.params[p4.SET_NEXTHOP_DMAC],
            ),
        )
        # Entry type -> its template's encoder (encode_updates).
        self._templated: dict[type, Callable[[int, Any], bytes]] = {
            RouteEntry: self._route_wire.field,
            MemberEntry: self._member_wire.field,
        }
        self._check_wire()

    def _find(self, items: Mapping[str, T], name: str, what: str) -> T:
        try:
            return items[name]
        except KeyError:
            raise P4InfoMismatch(
                f"{self.origin}: no {what} named {name!r}.{_closest(name, items)}"
            ) from None

    # -- entries → entities ------------------------------------------------------------

    # Entities are filled in place (nested fields set on the parent) rather than assembled
    # from sub-messages: protobuf copies every sub-message it is handed, and the initial
    # programming of a large switch encodes tens of thousands of updates.

    def _exact(self, entry: p4r.TableEntry, table: str, key: str, value: int) -> None:
        field = entry.match.add()
        field.field_id = self.tables[table].keys[key]
        field.exact.value = encode(value)

    def _action(self, action: p4r.Action, name: str, *params: tuple[str, int]) -> None:
        """Set `action` to `name` with the (param name, value) pairs `params`."""
        ids = self.actions[name]
        action.action_id = ids.id
        for key, value in params:
            param = action.params.add()
            param.param_id = ids.params[key]
            param.value = encode(value)

    def _table(self, entity: p4r.Entity, table: str) -> p4r.TableEntry:
        entry = entity.table_entry
        entry.table_id = self.tables[table].id
        return entry

    def fill(self, entity: p4r.Entity, entry: Entry) -> None:
        """Write `entry` into the empty `entity`."""
        try:
            filler = self._fillers[type(entry)]
        except KeyError:
            raise TypeError(f"not a pipeline entry: {entry!r}") from None
        filler(entity, entry)

    # One filler per entry type, dispatched on the type (a `match` tried the cases in turn for
    # every route), with the ids of the hot ones (routes, next, groups) bound once.

    def _fill_acl(self, entity: p4r.Entity, entry: AclEntry) -> None:
        te = self._table(entity, p4.ACL)
        field = te.match.add()
        field.field_id = self.tables[p4.ACL].keys[p4.ACL_ETH_TYPE]
        field.ternary.value = encode(entry.eth_type & entry.eth_type_mask)
        field.ternary.mask = encode(entry.eth_type_mask)
        if entry.ip_proto_mask:
            field = te.match.add()
            field.field_id = self.tables[p4.ACL].keys[p4.ACL_IP_PROTO]
            field.ternary.value = encode(entry.ip_proto & entry.ip_proto_mask)
            field.ternary.mask = encode(entry.ip_proto_mask)
        te.priority = entry.priority
        if entry.action is AclAction.ANSWER_PROBE:
            address = (p4.ANSWER_PROBE_ADDRESS, entry.address)
            self._action(te.action.action, p4.ANSWER_PROBE, address)
        else:
            name = p4.PUNT_TO_CPU if entry.action is AclAction.PUNT_TO_CPU else p4.DROP
            self._action(te.action.action, name)

    def _fill_qos(self, entity: p4r.Entity, entry: QosEntry) -> None:
        te = self._table(entity, p4.QOS_CLASSIFY)
        self._exact(te, p4.QOS_CLASSIFY, p4.QOS_CLASSIFY_DSCP, entry.dscp)
        self._action(
            te.action.action, p4.SET_TRAFFIC_CLASS, (p4.SET_TRAFFIC_CLASS_TC, entry.traffic_class)
        )

    def _fill_hash_config(self, entity: p4r.Entity, entry: HashConfigEntry) -> None:
        te = self._table(entity, p4.HASH_CONFIG)
        te.is_default_action = True
        self._action(te.action.action, p4.HASH_QP if entry.qp else p4.NO_ACTION)

    def _fill_pfc_watchdog(self, entity: p4r.Entity, entry: PfcWatchdogEntry) -> None:
        te = self._table(entity, p4.PFC_WATCHDOG)
        te.is_default_action = True
        if entry.timing_us is None:
            self._action(te.action.action, p4.NO_ACTION)
            return
        detect, restore = entry.timing_us
        self._action(
            te.action.action,
            p4.SET_PFC_WATCHDOG,
            (p4.SET_PFC_WATCHDOG_DETECT_US, detect),
            (p4.SET_PFC_WATCHDOG_RESTORE_US, restore),
        )

    def _fill_ecn(self, entity: p4r.Entity, entry: EcnEntry) -> None:
        te = self._table(entity, p4.ECN_MARKING)
        self._exact(te, p4.ECN_MARKING, p4.ECN_MARKING_EG_PORT, entry.port)
        self._exact(te, p4.ECN_MARKING, p4.ECN_MARKING_TRAFFIC_CLASS, entry.traffic_class)
        self._action(
            te.action.action,
            p4.SET_ECN_THRESHOLDS,
            (p4.SET_ECN_THRESHOLDS_KMIN, entry.kmin_bytes),
            (p4.SET_ECN_THRESHOLDS_KMAX, entry.kmax_bytes),
            (p4.SET_ECN_THRESHOLDS_PMAX, entry.pmax_ppm),
        )

    def _fill_pfc(self, entity: p4r.Entity, entry: PfcEntry) -> None:
        te = self._table(entity, p4.PFC_CONFIG)
        self._exact(te, p4.PFC_CONFIG, p4.PFC_CONFIG_PORT, entry.port)
        self._exact(te, p4.PFC_CONFIG, p4.PFC_CONFIG_PRIORITY, entry.priority)
        self._action(
            te.action.action,
            p4.SET_PFC_THRESHOLDS,
            (p4.SET_PFC_THRESHOLDS_XOFF, entry.xoff_bytes),
            (p4.SET_PFC_THRESHOLDS_XON, entry.xon_bytes),
        )

    def _fill_route(self, entity: p4r.Entity, entry: RouteEntry) -> None:
        te = entity.table_entry
        te.table_id = self._routing_id
        # A /0 route is the "don't care" LPM match: no field at all (P4Runtime §9.1.1).
        if entry.length > 0:
            field = te.match.add()
            field.field_id = self._routing_dst_id
            lpm = field.lpm
            address = entry.address
            lpm.value = address.to_bytes(max(1, (address.bit_length() + 7) // 8), "big")
            lpm.prefix_len = entry.length
        action = te.action.action
        action.action_id = self._set_next_id_id
        param = action.params.add()
        param.param_id = self._next_id_param_id
        next_id = entry.next_id
        # p4bytes.encode, inlined for the most numerous entries.
        param.value = next_id.to_bytes(max(1, (next_id.bit_length() + 7) // 8), "big")

    def _fill_matrix_source(self, entity: p4r.Entity, entry: MatrixSourceEntry) -> None:
        te = self._table(entity, p4.MATRIX_SOURCE)
        self._exact(te, p4.MATRIX_SOURCE, p4.MATRIX_SOURCE_IG_PORT, entry.port)
        self._action(te.action.action, p4.NO_ACTION)

    def _fill_matrix_dest(self, entity: p4r.Entity, entry: MatrixDestEntry) -> None:
        te = self._table(entity, p4.MATRIX_DEST)
        if entry.length > 0:  # /0: no field, as for routes (P4Runtime §9.1.1)
            field = te.match.add()
            field.field_id = self.tables[p4.MATRIX_DEST].keys[p4.MATRIX_DEST_IPV4_DST]
            field.lpm.value = encode(entry.address)
            field.lpm.prefix_len = entry.length
        self._action(
            te.action.action, p4.COUNT_MATRIX, (p4.COUNT_MATRIX_DST_CLASS, entry.dst_class)
        )

    def _fill_nak_sampling(self, entity: p4r.Entity, entry: NakSamplingEntry) -> None:
        te = self._table(entity, p4.NAK_SAMPLING)
        self._exact(te, p4.NAK_SAMPLING, p4.NAK_SAMPLING_IG_PORT, entry.port)
        self._action(
            te.action.action, p4.SAMPLE_NAKS, (p4.SAMPLE_NAKS_INTERVAL_US, entry.interval_us)
        )

    @staticmethod
    def _fill_clone_session(entity: p4r.Entity, entry: CloneSessionEntry) -> None:
        session = entity.packet_replication_engine_entry.clone_session_entry
        session.session_id = entry.session_id
        # `egress_port`, the field PI reads (its pre_mc_mgr.cpp), not P4Runtime 1.4's `port`.
        session.replicas.extend(
            p4r.Replica(egress_port=port, instance=CLONE_INSTANCE) for port in entry.ports
        )

    def _fill_next(self, entity: p4r.Entity, entry: NextEntry) -> None:
        te = entity.table_entry
        te.table_id = self._next_table_id
        field = te.match.add()
        field.field_id = self._next_key_id
        field.exact.value = encode(entry.next_id)
        te.action.action_profile_group_id = entry.group_id

    def _fill_member(self, entity: p4r.Entity, entry: MemberEntry) -> None:
        member = entity.action_profile_member
        member.action_profile_id = self.selector_id
        member.member_id = entry.member_id
        self._action(
            member.action,
            p4.SET_NEXTHOP,
            (p4.SET_NEXTHOP_PORT, entry.port),
            (p4.SET_NEXTHOP_SMAC, entry.smac),
            (p4.SET_NEXTHOP_DMAC, entry.dmac),
        )

    def _fill_group(self, entity: p4r.Entity, entry: GroupEntry) -> None:
        group = entity.action_profile_group
        group.action_profile_id = self.selector_id
        group.group_id = entry.group_id
        # An empty group still has to be present in the entity.
        group.SetInParent()
        members = group.members
        for ref in entry.members:
            m = members.add()
            m.member_id = ref.member_id
            m.weight = ref.weight
            if ref.watch_port:
                m.watch_port = encode(ref.watch_port)

    def encode(self, entry: Entry) -> p4r.Entity:
        entity = p4r.Entity()
        self.fill(entity, entry)
        return entity

    def encode_update(self, update: Update) -> p4r.Update:
        """One update, field by field (what `encode_updates` sends is checked against it)."""
        op, entry = update
        out = p4r.Update()
        if type(entry) is HashConfigEntry:
            # A default entry is only ever modified; taking it away restores NoAction.
            out.type = _MODIFY
            self._fill_hash_config(
                out.entity, entry if op is not _OP_DELETE else HashConfigEntry(False)
            )
            return out
        if type(entry) is PfcWatchdogEntry:
            out.type = _MODIFY
            self._fill_pfc_watchdog(
                out.entity, entry if op is not _OP_DELETE else PfcWatchdogEntry(None)
            )
            return out
        out.type = _INSERT if op is _OP_INSERT else _MODIFY if op is _OP_MODIFY else _DELETE
        self.fill(out.entity, entry)
        return out

    def encode_updates(self, updates: Iterable[Update]) -> Encoded:
        """The updates of one WriteRequest in wire format, in order: routes and members from
        templates (_RouteWire, _MemberWire), the rest field by field and serialized."""
        templated = self._templated
        parts: list[bytes] = []
        for update in updates:
            op, entry = update
            field = templated.get(type(entry))
            if field is not None:
                kind = _INSERT if op is _OP_INSERT else _MODIFY if op is _OP_MODIFY else _DELETE
                parts.append(field(kind, entry))
            else:
                data = self.encode_update(update).SerializeToString()
                parts.append(_UPDATES_TAG + varint(len(data)) + data)
        return Encoded(b"".join(parts), len(parts))

    def _check_wire(self) -> None:
        """The route and member templates must encode what the field encoder does (a bug
        otherwise)."""
        for op in Op:
            updates = [Update(op, entry) for entry in (*_ROUTE_SAMPLES, *_MEMBER_SAMPLES)]
            request = p4r.WriteRequest()
            request.MergeFromString(self.encode_updates(updates).data)
            fields = [self.encode_update(u) for u in updates]
            if list(request.updates) != fields:
                raise RuntimeError(
                    f"route or member wire encoding differs from the field encoder: {op}"
                )

    # -- entities → entries ------------------------------------------------------------

    def read_requests(self) -> list[p4r.Entity]:
        """Wildcard reads of everything the agent owns (hash_config, pfc_watchdog: their
        default entries, which a wildcard read does not return)."""
        default_only = (self._hash_config_id, self._pfc_watchdog_id)
        out = [
            p4r.Entity(
                table_entry=p4r.TableEntry(table_id=t.id, is_default_action=t.id in default_only)
            )
            for t in self.tables.values()
        ]
        out.append(
            p4r.Entity(
                action_profile_member=p4r.ActionProfileMember(action_profile_id=self.selector_id)
            )
        )
        out.append(
            p4r.Entity(
                action_profile_group=p4r.ActionProfileGroup(action_profile_id=self.selector_id)
            )
        )
        return out

    @staticmethod
    def replication_read_requests() -> list[p4r.Entity]:
        """A wildcard read of the clone sessions, in a ReadRequest of its own: a target that
        cannot read them back (older PI) fails only that request."""
        return [
            p4r.Entity(
                packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                    clone_session_entry=p4r.CloneSessionEntry()
                )
            )
        ]

    def decode(self, entity: p4r.Entity) -> Entry | None:
        """The pipeline entry an entity read back from the target is, or None for entities
        the agent does not own (other tables, default entries)."""
        kind = entity.WhichOneof("entity")
        if kind == "packet_replication_engine_entry":
            pre = entity.packet_replication_engine_entry
            if pre.WhichOneof("type") != "clone_session_entry":
                return None
            session = pre.clone_session_entry
            ports = tuple(
                sorted(
                    decode_unchecked(r.port)
                    if r.WhichOneof("port_kind") == "port"
                    else r.egress_port
                    for r in session.replicas
                )
            )
            return CloneSessionEntry(session.session_id, ports)
        if kind == "action_profile_member":
            member = entity.action_profile_member
            if member.action_profile_id != self.selector_id:
                return None
            params = self._params(member.action, p4.SET_NEXTHOP)
            return MemberEntry(
                member.member_id,
                params[p4.SET_NEXTHOP_PORT],
                params[p4.SET_NEXTHOP_SMAC],
                params[p4.SET_NEXTHOP_DMAC],
            )
        if kind == "action_profile_group":
            group = entity.action_profile_group
            if group.action_profile_id != self.selector_id:
                return None
            return GroupEntry(group.group_id, self._group_members(group))
        if kind != "table_entry":
            return None
        entry = entity.table_entry
        if entry.table_id == self._hash_config_id:
            if not entry.is_default_action:
                return None
            action_id = entry.action.action.action_id
            if action_id not in (self._hash_qp_id, self.actions[p4.NO_ACTION].id):
                raise ValueError(f"{p4.HASH_CONFIG}: default action id {action_id} is not ours")
            return HashConfigEntry(qp=action_id == self._hash_qp_id)
        if entry.table_id == self._pfc_watchdog_id:
            if not entry.is_default_action:
                return None
            action_id = entry.action.action.action_id
            if action_id == self.actions[p4.NO_ACTION].id:
                return PfcWatchdogEntry(None)
            params = self._params(entry.action.action, p4.SET_PFC_WATCHDOG)
            timing = (params[p4.SET_PFC_WATCHDOG_DETECT_US], params[p4.SET_PFC_WATCHDOG_RESTORE_US])
            return PfcWatchdogEntry(timing)
        table = self._table_names.get(entry.table_id)
        if table is None or entry.is_default_action:
            return None
        ids = self.tables[table]
        fields = {f.field_id: f for f in entry.match}

        def exact(key: str) -> int:
            return decode_unchecked(fields[ids.keys[key]].exact.value)

        action = entry.action
        if table == p4.NEXT:
            return NextEntry(exact(p4.NEXT_NEXT_ID), action.action_profile_group_id)
        if table == p4.ROUTING_V4:
            lpm = fields.get(ids.keys[p4.ROUTING_V4_IPV4_DST])
            address, length = (
                (decode_unchecked(lpm.lpm.value), lpm.lpm.prefix_len) if lpm is not None else (0, 0)
            )
            next_id = self._params(action.action, p4.SET_NEXT_ID)[p4.SET_NEXT_ID_NEXT_ID]
            return RouteEntry(address, length, next_id)
        if table == p4.MATRIX_SOURCE:
            self._params(action.action, p4.NO_ACTION)  # a ValueError when not ours
            return MatrixSourceEntry(exact(p4.MATRIX_SOURCE_IG_PORT))
        if table == p4.NAK_SAMPLING:
            params = self._params(action.action, p4.SAMPLE_NAKS)
            return NakSamplingEntry(
                exact(p4.NAK_SAMPLING_IG_PORT), params[p4.SAMPLE_NAKS_INTERVAL_US]
            )
        if table == p4.MATRIX_DEST:
            lpm = fields.get(ids.keys[p4.MATRIX_DEST_IPV4_DST])
            address, length = (
                (decode_unchecked(lpm.lpm.value), lpm.lpm.prefix_len) if lpm is not None else (0, 0)
            )
            params = self._params(action.action, p4.COUNT_MATRIX)
            return MatrixDestEntry(address, length, params[p4.COUNT_MATRIX_DST_CLASS])
        if table == p4.QOS_CLASSIFY:
            tc = self._params(action.action, p4.SET_TRAFFIC_CLASS)[p4.SET_TRAFFIC_CLASS_TC]
            return QosEntry(exact(p4.QOS_CLASSIFY_DSCP), tc)
        if table == p4.ECN_MARKING:
            p = self._params(action.action, p4.SET_ECN_THRESHOLDS)
            return EcnEntry(
                exact(p4.ECN_MARKING_EG_PORT),
                exact(p4.ECN_MARKING_TRAFFIC_CLASS),
                p[p4.SET_ECN_THRESHOLDS_KMIN],
                p[p4.SET_ECN_THRESHOLDS_KMAX],
                p[p4.SET_ECN_THRESHOLDS_PMAX],
            )
        if table == p4.PFC_CONFIG:
            p = self._params(action.action, p4.SET_PFC_THRESHOLDS)
            return PfcEntry(
                exact(p4.PFC_CONFIG_PORT),
                exact(p4.PFC_CONFIG_PRIORITY),
                p[p4.SET_PFC_THRESHOLDS_XOFF],
                p[p4.SET_PFC_THRESHOLDS_XON],
            )
        # ACL: the agent owns only entries matching eth_type alone or with ip_proto.
        eth = fields.get(ids.keys[p4.ACL_ETH_TYPE])
        proto = fields.get(ids.keys[p4.ACL_IP_PROTO])
        if eth is None or len(fields) != 1 + (proto is not None):
            return None
        mask = decode_unchecked(eth.ternary.mask)
        action_id = action.action.action_id
        address = 0
        if action_id == self.actions[p4.PUNT_TO_CPU].id:
            act = AclAction.PUNT_TO_CPU
        elif action_id == self.actions[p4.DROP].id:
            act = AclAction.DROP
        elif action_id == self.actions[p4.ANSWER_PROBE].id:
            act = AclAction.ANSWER_PROBE
            address = self._params(action.action, p4.ANSWER_PROBE)[p4.ANSWER_PROBE_ADDRESS]
        else:
            return None
        return AclEntry(
            decode_unchecked(eth.ternary.value),
            mask,
            entry.priority,
            act,
            0 if proto is None else decode_unchecked(proto.ternary.value),
            0 if proto is None else decode_unchecked(proto.ternary.mask),
            address,
        )

    def _group_members(self, group: p4r.ActionProfileGroup) -> tuple[GroupMember, ...]:
        """A group's members as read back. Whether a member watches a port is taken from the
        target, which port it watches is not: PI answers a group Read with one watch port for
        every member (the last member's; docs/bmv2.md), so the agent's rule — a member
        watches its own port — says which."""
        out = []
        for m in group.members:
            kind = m.WhichOneof("watch_kind")
            read = decode_unchecked(m.watch_port) if kind == "watch_port" else m.watch
            watch = m.member_id if kind is not None else 0
            if kind is not None and read != watch and not self._warned_watch_port:
                self._warned_watch_port = True
                LOG.warning(
                    "%s: group %d member %d reads back watching port %d, not its own port; "
                    "taking the member's port (PI reports one watch port per group)",
                    self.origin,
                    group.group_id,
                    m.member_id,
                    read,
                )
            out.append(GroupMember(m.member_id, watch, max(1, m.weight)))
        out.sort(key=lambda m: m.member_id)
        return tuple(out)

    def _params(self, action: p4r.Action, name: str) -> dict[str, int]:
        ids = self.actions[name]
        if action.action_id != ids.id:
            raise ValueError(
                f"{self.origin}: expected action {name!r} (id {ids.id}), read back "
                f"action id {action.action_id}"
            )
        by_id = {v: k for k, v in ids.params.items()}
        return {by_id[p.param_id]: decode_unchecked(p.value) for p in action.params}

    def decode_all(self, entities: Iterable[p4r.Entity]) -> tuple[Pipeline, list[p4r.Entity]]:
        """The pipeline read back, plus the entities the agent does not own."""
        entries: dict[tuple[object, ...], Entry] = {}
        foreign: list[p4r.Entity] = []
        for entity in entities:
            try:
                entry = self.decode(entity)
            except ValueError as err:
                # In one of our tables but not in a shape we write (another client's entry):
                # left alone; a write to the same key then fails and is reported by object.
                LOG.warning("%s", err)
                entry = None
            if entry is None:
                foreign.append(entity)
            else:
                entries[entry.key] = entry
        return Pipeline(entries), foreign
