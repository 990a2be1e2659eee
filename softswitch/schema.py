"""The P4Info, indexed by id, and checked against what softswitch's model of fabric.p4 needs.

softswitch runs one program: p4/fabric.p4. A P4Info pushed with SetForwardingPipelineConfig
must declare every table, action, action profile, counter, register and controller header that
the model implements, with the names, match kinds and bit widths of railfabric/fabric_p4.py;
ids are whatever the P4Info says (resolved by name, never hard-coded). `FabricSchema.build`
raises `SchemaError` listing everything missing or different.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path

from finsy.proto import p4i

from railfabric import fabric_counters
from railfabric import fabric_p4 as p4


class SchemaError(ValueError):
    """The P4Info does not describe the program this model implements."""


class MatchKind(enum.Enum):
    EXACT = "exact"
    LPM = "lpm"
    TERNARY = "ternary"
    RANGE = "range"
    OPTIONAL = "optional"


_MATCH_KINDS = {
    p4i.MatchField.EXACT: MatchKind.EXACT,
    p4i.MatchField.LPM: MatchKind.LPM,
    p4i.MatchField.TERNARY: MatchKind.TERNARY,
    p4i.MatchField.RANGE: MatchKind.RANGE,
    p4i.MatchField.OPTIONAL: MatchKind.OPTIONAL,
}


class CounterUnit(enum.Enum):
    BYTES = "bytes"
    PACKETS = "packets"
    BOTH = "both"


_COUNTER_UNITS = {
    p4i.CounterSpec.BYTES: CounterUnit.BYTES,
    p4i.CounterSpec.PACKETS: CounterUnit.PACKETS,
    p4i.CounterSpec.BOTH: CounterUnit.BOTH,
}


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    kind: MatchKind


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]
    param_by_id: dict[int, ParamInfo] = field(compare=False)
    param_position: dict[int, int] = field(compare=False)  # param id -> index in params


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    field_index: dict[int, int] = field(compare=False)  # field id -> position in the key
    entry_actions: frozenset[int]  # actions allowed in entries (not @defaultonly)
    default_actions: frozenset[int]  # actions allowed as default (not @tableonly)
    const_default_action_id: int
    implementation_id: int
    size: int
    needs_priority: bool  # has a ternary, range or optional field


@dataclass(frozen=True)
class ProfileInfo:
    id: int
    name: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int


@dataclass(frozen=True)
class CounterInfo:
    id: int
    name: str
    unit: CounterUnit
    size: int


@dataclass(frozen=True)
class RegisterInfo:
    id: int
    name: str
    bitwidth: int  # of a cell (bit<W>; 0 for a type the model does not read)
    size: int


@dataclass(frozen=True)
class PacketMetadataInfo:
    id: int
    name: str
    fields: tuple[ParamInfo, ...]

    def field_named(self, name: str) -> ParamInfo:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


# What the model of fabric.p4 implements (p4_contract.md): name -> (match fields, actions).
# Names and widths are the contract's; the match kinds are what the model's lookups do.
_TABLES: dict[str, tuple[tuple[tuple[str, int, MatchKind], ...], tuple[str, ...]]] = {
    p4.ACL: (
        (
            (p4.ACL_IG_PORT, p4.ACL_IG_PORT_BITWIDTH, MatchKind.TERNARY),
            (p4.ACL_ETH_DST, p4.ACL_ETH_DST_BITWIDTH, MatchKind.TERNARY),
            (p4.ACL_ETH_TYPE, p4.ACL_ETH_TYPE_BITWIDTH, MatchKind.TERNARY),
            (p4.ACL_IP_PROTO, p4.ACL_IP_PROTO_BITWIDTH, MatchKind.TERNARY),
        ),
        (p4.PUNT_TO_CPU, p4.DROP, p4.NO_ACTION),
    ),
    p4.QOS_CLASSIFY: (
        ((p4.QOS_CLASSIFY_DSCP, p4.QOS_CLASSIFY_DSCP_BITWIDTH, MatchKind.EXACT),),
        (p4.SET_TRAFFIC_CLASS,),
    ),
    p4.ROUTING_V4: (
        ((p4.ROUTING_V4_IPV4_DST, p4.ROUTING_V4_IPV4_DST_BITWIDTH, MatchKind.LPM),),
        (p4.SET_NEXT_ID,),
    ),
    p4.NEXT: (
        ((p4.NEXT_NEXT_ID, p4.NEXT_NEXT_ID_BITWIDTH, MatchKind.EXACT),),
        (p4.SET_NEXTHOP,),
    ),
    p4.ECN_MARKING: (
        (
            (p4.ECN_MARKING_EG_PORT, p4.ECN_MARKING_EG_PORT_BITWIDTH, MatchKind.EXACT),
            (p4.ECN_MARKING_TRAFFIC_CLASS, p4.ECN_MARKING_TRAFFIC_CLASS_BITWIDTH, MatchKind.EXACT),
        ),
        (p4.SET_ECN_THRESHOLDS,),
    ),
    p4.PFC_CONFIG: (
        (
            (p4.PFC_CONFIG_PORT, p4.PFC_CONFIG_PORT_BITWIDTH, MatchKind.EXACT),
            (p4.PFC_CONFIG_PRIORITY, p4.PFC_CONFIG_PRIORITY_BITWIDTH, MatchKind.EXACT),
        ),
        (p4.SET_PFC_THRESHOLDS,),
    ),
}

_ACTIONS: dict[str, tuple[tuple[str, int], ...]] = {
    p4.NO_ACTION: (),
    p4.PUNT_TO_CPU: (),
    p4.DROP: (),
    p4.SET_TRAFFIC_CLASS: ((p4.SET_TRAFFIC_CLASS_TC, p4.SET_TRAFFIC_CLASS_TC_BITWIDTH),),
    p4.SET_NEXT_ID: ((p4.SET_NEXT_ID_NEXT_ID, p4.SET_NEXT_ID_NEXT_ID_BITWIDTH),),
    p4.SET_NEXTHOP: (
        (p4.SET_NEXTHOP_PORT, p4.SET_NEXTHOP_PORT_BITWIDTH),
        (p4.SET_NEXTHOP_SMAC, p4.SET_NEXTHOP_SMAC_BITWIDTH),
        (p4.SET_NEXTHOP_DMAC, p4.SET_NEXTHOP_DMAC_BITWIDTH),
    ),
    p4.SET_ECN_THRESHOLDS: (
        (p4.SET_ECN_THRESHOLDS_KMIN, p4.SET_ECN_THRESHOLDS_KMIN_BITWIDTH),
        (p4.SET_ECN_THRESHOLDS_KMAX, p4.SET_ECN_THRESHOLDS_KMAX_BITWIDTH),
        (p4.SET_ECN_THRESHOLDS_PMAX, p4.SET_ECN_THRESHOLDS_PMAX_BITWIDTH),
    ),
    p4.SET_PFC_THRESHOLDS: (
        (p4.SET_PFC_THRESHOLDS_XOFF, p4.SET_PFC_THRESHOLDS_XOFF_BITWIDTH),
        (p4.SET_PFC_THRESHOLDS_XON, p4.SET_PFC_THRESHOLDS_XON_BITWIDTH),
    ),
}

_PROFILE = p4.ECMP_SELECTOR

_COUNTERS: dict[str, tuple[CounterUnit, ...]] = {
    p4.INGRESS_PORT_COUNTER: (CounterUnit.BOTH,),
    p4.EGRESS_PORT_COUNTER: (CounterUnit.BOTH,),
    p4.DROP_COUNTER: (CounterUnit.BOTH,),
    p4.ECN_MARK_COUNTER: (CounterUnit.PACKETS, CounterUnit.BOTH),
    p4.PFC_PAUSE_TX_COUNTER: (CounterUnit.PACKETS, CounterUnit.BOTH),
    p4.PFC_PAUSE_RX_COUNTER: (CounterUnit.PACKETS, CounterUnit.BOTH),
    p4.PFC_STORM_COUNTER: (CounterUnit.PACKETS, CounterUnit.BOTH),
    p4.DROP_REASON_COUNTER: (CounterUnit.PACKETS, CounterUnit.BOTH),
    p4.QUEUE_DEPTH_HISTOGRAM: (CounterUnit.PACKETS, CounterUnit.BOTH),
}
# Counters indexed by port and more (railfabric/fabric_counters.py): the fewest indexes the
# model needs. The others are indexed by port.
_COUNTER_MIN_SIZE = {
    p4.DROP_REASON_COUNTER: fabric_counters.PORTS * fabric_counters.DROP_REASONS_PER_PORT,
    p4.QUEUE_DEPTH_HISTOGRAM: fabric_counters.PORTS * fabric_counters.QUEUE_DEPTH_LEVELS,
}
# Registers the model keeps (indexed by port): name -> cell width.
_REGISTERS = {
    p4.QUEUE_DEPTH: p4.QUEUE_DEPTH_BITWIDTH,
    p4.QUEUE_WATERMARK: p4.QUEUE_WATERMARK_BITWIDTH,
}

# Controller header -> (its port field, that field's width).
_PACKET_METADATA = {
    p4.PACKET_IN: (p4.PACKET_IN_INGRESS_PORT, p4.PACKET_IN_INGRESS_PORT_BITWIDTH),
    p4.PACKET_OUT: (p4.PACKET_OUT_EGRESS_PORT, p4.PACKET_OUT_EGRESS_PORT_BITWIDTH),
}

# What one object costs the model, rounded up so the check errs on the safe side: a table entry
# or profile member/group keeps its P4Runtime message and lookup state (~0.9 KB measured for a
# routing_v4 entry, more for acl's four ternary fields); a counter index is two list slots now
# and two int objects once it has counted.
ENTRY_BYTES = 2048
COUNTER_INDEX_BYTES = 80
MEMORY_SHARE = 2  # the declared state may take at most 1/MEMORY_SHARE of the host's memory
PORT_INDEXES = 1 << p4.ACL_IG_PORT_BITWIDTH  # the model indexes every counter by port
_GIB = 1 << 30
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")


def host_memory_bytes() -> int:
    """This host's physical memory, or the cgroup's limit when that is lower."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return memory
    return min(memory, int(limit)) if limit.isdigit() else memory


@dataclass(frozen=True)
class FabricSchema:
    """The P4Info indexed by id, plus the ids of the objects the model uses, by name."""

    p4info: p4i.P4Info
    p4info_tables: dict[int, p4i.Table]
    tables: dict[int, TableInfo]
    actions: dict[int, ActionInfo]
    profiles: dict[int, ProfileInfo]
    counters: dict[int, CounterInfo]
    registers: dict[int, RegisterInfo]
    table_ids: dict[str, int]
    action_ids: dict[str, int]
    counter_ids: dict[str, int]
    register_ids: dict[str, int]
    profile_id: int
    packet_in: PacketMetadataInfo
    packet_out: PacketMetadataInfo

    @classmethod
    def build(cls, p4info: p4i.P4Info, memory_bytes: int | None = None) -> FabricSchema:
        """Index `p4info`; raise SchemaError naming every contract object it lacks and every
        size the model cannot hold in `memory_bytes` (default: this host's memory)."""
        problems: list[str] = []
        actions = {a.preamble.id: _action(a) for a in p4info.actions}
        tables = {t.preamble.id: _table(t) for t in p4info.tables}
        profiles = {p.preamble.id: _profile(p) for p in p4info.action_profiles}
        counters = {c.preamble.id: _counter(c) for c in p4info.counters}
        registers = {r.preamble.id: _register(r) for r in p4info.registers}
        action_ids = {a.name: a.id for a in actions.values()}
        table_ids = {t.name: t.id for t in tables.values()}
        profile_ids = {p.name: p.id for p in profiles.values()}
        counter_ids = {c.name: c.id for c in counters.values()}
        register_ids = {r.name: r.id for r in registers.values()}

        for name, params in _ACTIONS.items():
            if name not in action_ids:
                problems.append(f"no action named {name!r}")
                continue
            got = tuple((p.name, p.bitwidth) for p in actions[action_ids[name]].params)
            if got != params:
                problems.append(f"action {name!r} has params {got}, the model needs {params}")
        for name, (fields, needed_actions) in _TABLES.items():
            if name not in table_ids:
                problems.append(f"no table named {name!r}")
                continue
            table = tables[table_ids[name]]
            got_fields = tuple((f.name, f.bitwidth, f.kind) for f in table.match_fields)
            if got_fields != fields:
                want = ", ".join(f"{n}:{k.value}<{w}>" for n, w, k in fields)
                have = ", ".join(f"{n}:{k.value}<{w}>" for n, w, k in got_fields)
                problems.append(f"table {name!r} has keys ({have}), the model needs ({want})")
            for action in needed_actions:
                if action in action_ids and action_ids[action] not in (
                    table.entry_actions | table.default_actions
                ):
                    problems.append(f"table {name!r} lacks action {action!r}")
        profile_id = profile_ids.get(_PROFILE, 0)
        if not profile_id:
            problems.append(f"no action profile named {_PROFILE!r}")
        else:
            profile = profiles[profile_id]
            if not profile.with_selector:
                problems.append(f"action profile {_PROFILE!r} is not an action selector")
            next_id = table_ids.get(p4.NEXT)
            if next_id is not None and tables[next_id].implementation_id != profile_id:
                problems.append(f"table {p4.NEXT!r} is not implemented by {_PROFILE!r}")
        for name, units in _COUNTERS.items():
            if name not in counter_ids:
                problems.append(f"no counter named {name!r}")
            elif counters[counter_ids[name]].unit not in units:
                problems.append(f"counter {name!r} must count {units[0].value}")
        for name, width in _REGISTERS.items():
            if name not in register_ids:
                problems.append(f"no register named {name!r}")
            elif registers[register_ids[name]].bitwidth != width:
                problems.append(f"register {name!r} must hold bit<{width}>")
        metadata: dict[str, PacketMetadataInfo] = {}
        for header in p4info.controller_packet_metadata:
            metadata[header.preamble.name] = PacketMetadataInfo(
                header.preamble.id,
                header.preamble.name,
                tuple(ParamInfo(m.id, m.name, m.bitwidth) for m in header.metadata),
            )
        for header_name, (field_name, width) in _PACKET_METADATA.items():
            header_info = metadata.get(header_name)
            if header_info is None:
                problems.append(f"no controller_packet_metadata named {header_name!r}")
                continue
            try:
                port_field = header_info.field_named(field_name)
            except KeyError:
                problems.append(f"controller header {header_name!r} has no field {field_name!r}")
                continue
            if port_field.bitwidth != width:
                problems.append(f"{header_name}.{field_name} must be bit<{width}>")
        size_problems = _size_problems(
            tables,
            profiles,
            counters,
            registers,
            host_memory_bytes() if memory_bytes is None else memory_bytes,
        )
        if problems or size_problems:
            parts = []
            if problems:
                parts.append(
                    "P4Info is not fabric.p4 as softswitch models it: " + "; ".join(problems)
                )
            if size_problems:
                parts.append("P4Info sizes softswitch cannot hold: " + "; ".join(size_problems))
            raise SchemaError(". ".join(parts))
        return cls(
            p4info=p4info,
            p4info_tables={t.preamble.id: t for t in p4info.tables},
            tables=tables,
            actions=actions,
            profiles=profiles,
            counters=counters,
            registers=registers,
            table_ids=table_ids,
            action_ids=action_ids,
            counter_ids=counter_ids,
            register_ids=register_ids,
            profile_id=profile_id,
            packet_in=metadata[p4.PACKET_IN],
            packet_out=metadata[p4.PACKET_OUT],
        )


def _size_problems(
    tables: dict[int, TableInfo],
    profiles: dict[int, ProfileInfo],
    counters: dict[int, CounterInfo],
    registers: dict[int, RegisterInfo],
    memory_bytes: int,
) -> list[str]:
    """Sizes out of range, each naming its object; then the total against the memory share.
    Counters are allocated at commit (a size of 2**62 would raise MemoryError, a negative one
    would leave them silently empty); table and profile sizes bound what writes may add."""
    budget = memory_bytes // MEMORY_SHARE
    where = f"1/{MEMORY_SHARE} of this host's {memory_bytes / _GIB:.1f} GiB"
    max_entries = budget // ENTRY_BYTES
    max_indexes = budget // COUNTER_INDEX_BYTES
    problems: list[str] = []
    for kind, name, size in [
        *(("table", t.name, t.size) for t in tables.values()),
        *(("action profile", p.name, p.size) for p in profiles.values()),
    ]:
        if not 1 <= size <= max_entries:
            problems.append(
                f"{kind} {name!r}: size {size} is out of 1..{max_entries}"
                f" ({ENTRY_BYTES} bytes an entry in {where})"
            )
    for profile in profiles.values():
        if profile.max_group_size < 0:
            problems.append(
                f"action profile {profile.name!r}: max_group_size {profile.max_group_size} < 0"
            )
    for kind, name, size, low in [
        *(
            ("counter", c.name, c.size, _COUNTER_MIN_SIZE.get(c.name, PORT_INDEXES))
            for c in counters.values()
            if c.name in _COUNTERS
        ),
        *(("counter", c.name, c.size, 1) for c in counters.values() if c.name not in _COUNTERS),
        *(
            ("register", r.name, r.size, PORT_INDEXES if r.name in _REGISTERS else 1)
            for r in registers.values()
        ),
    ]:
        if not low <= size <= max_indexes:
            why = (
                f", the model indexes it by port (bit<{p4.ACL_IG_PORT_BITWIDTH}>)"
                if low == PORT_INDEXES
                else f", the model indexes it by port and more ({low} indexes)"
                if low > 1
                else ""
            )
            problems.append(
                f"{kind} {name!r}: size {size} is out of {low}..{max_indexes}"
                f" ({COUNTER_INDEX_BYTES} bytes an index in {where}{why})"
            )
    if problems:
        return problems
    entries = sum(t.size for t in tables.values()) + sum(p.size for p in profiles.values())
    indexes = sum(c.size for c in counters.values()) + sum(r.size for r in registers.values())
    need = entries * ENTRY_BYTES + indexes * COUNTER_INDEX_BYTES
    if need > budget:
        problems.append(
            f"tables, action profiles, counters and registers together need"
            f" {need / _GIB:.1f} GiB ({entries} entries x {ENTRY_BYTES} B + {indexes} counter"
            " and register indexes"
            f" x {COUNTER_INDEX_BYTES} B), more than {where}"
        )
    return problems


def _action(action: p4i.Action) -> ActionInfo:
    params = tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in action.params)
    return ActionInfo(
        action.preamble.id,
        action.preamble.name,
        params,
        {p.id: p for p in params},
        {p.id: i for i, p in enumerate(params)},
    )


def _table(table: p4i.Table) -> TableInfo:
    fields = tuple(
        MatchFieldInfo(f.id, f.name, f.bitwidth, _MATCH_KINDS.get(f.match_type, MatchKind.EXACT))
        for f in table.match_fields
    )
    entry_actions = frozenset(
        ref.id for ref in table.action_refs if ref.scope != p4i.ActionRef.DEFAULT_ONLY
    )
    default_actions = frozenset(
        ref.id for ref in table.action_refs if ref.scope != p4i.ActionRef.TABLE_ONLY
    )
    return TableInfo(
        id=table.preamble.id,
        name=table.preamble.name,
        match_fields=fields,
        field_index={f.id: i for i, f in enumerate(fields)},
        entry_actions=entry_actions,
        default_actions=default_actions,
        const_default_action_id=table.const_default_action_id,
        implementation_id=table.implementation_id,
        size=table.size,
        needs_priority=any(
            f.kind in (MatchKind.TERNARY, MatchKind.RANGE, MatchKind.OPTIONAL) for f in fields
        ),
    )


def _profile(profile: p4i.ActionProfile) -> ProfileInfo:
    return ProfileInfo(
        id=profile.preamble.id,
        name=profile.preamble.name,
        table_ids=tuple(profile.table_ids),
        with_selector=profile.with_selector,
        size=profile.size,
        max_group_size=profile.max_group_size,
    )


def _register(register: p4i.Register) -> RegisterInfo:
    bits = register.type_spec.bitstring
    return RegisterInfo(
        id=register.preamble.id,
        name=register.preamble.name,
        bitwidth=bits.bit.bitwidth if bits.WhichOneof("type_spec") == "bit" else 0,
        size=register.size,
    )


def _counter(counter: p4i.Counter) -> CounterInfo:
    return CounterInfo(
        id=counter.preamble.id,
        name=counter.preamble.name,
        unit=_COUNTER_UNITS.get(counter.spec.unit, CounterUnit.BOTH),
        size=counter.size,
    )
