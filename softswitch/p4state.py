"""The P4Runtime objects a switch holds: table entries, default actions, action profile
members and groups, indirect counters. Validates every update as the P4Runtime spec says
(§9.1 tables, §9.2 action profiles, §9.3 counters) and reports a per-update code; a `Hooks`
object (the pipeline) is told about each change so it can keep its fast lookup structures.

Pure: no I/O, no gRPC. `server.py` turns codes into google.rpc.Status details.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from finsy.proto import p4r

from railfabric import p4bytes
from softswitch.schema import ActionInfo, FabricSchema, MatchKind, TableInfo


class Code(enum.IntEnum):
    """google.rpc.Code values used by P4Runtime."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class P4Error(Exception):
    """One update (or request) failed with `code`; `message` says which object and why."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class UpdateType(enum.IntEnum):
    UNSPECIFIED = p4r.Update.UNSPECIFIED
    INSERT = p4r.Update.INSERT
    MODIFY = p4r.Update.MODIFY
    DELETE = p4r.Update.DELETE


@dataclass(frozen=True, slots=True)
class ActionCall:
    """A direct action with its arguments in the P4Info's parameter order."""

    action_id: int
    args: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MemberRef:
    member_id: int


@dataclass(frozen=True, slots=True)
class GroupRef:
    group_id: int


@dataclass(frozen=True, slots=True)
class OneShotAction:
    action: ActionCall
    weight: int
    watch_port: int | None


@dataclass(frozen=True, slots=True)
class OneShot:
    """A one-shot action set: the selector group the target builds for one entry. Its hidden
    members are created in list order, so list order is their handle order (bmv2/PI)."""

    actions: tuple[OneShotAction, ...]


TableAction = ActionCall | MemberRef | GroupRef | OneShot
# One element per match field in P4Info order: None (don't care), (value,) exact,
# (value, prefix_len) lpm, (value, mask) ternary.
Key = tuple[tuple[int, ...] | None, ...]


@dataclass(slots=True)
class TableEntryState:
    key: Key
    priority: int
    action: TableAction
    message: p4r.TableEntry


@dataclass(slots=True)
class MemberState:
    member_id: int
    handle: int  # bmv2's member handle: the lowest free one at creation; orders a group
    action: ActionCall
    message: p4r.ActionProfileMember


@dataclass(frozen=True, slots=True)
class GroupMemberState:
    member_id: int
    weight: int
    watch_port: int | None


@dataclass(slots=True)
class GroupState:
    group_id: int
    max_size: int
    members: tuple[GroupMemberState, ...]
    message: p4r.ActionProfileGroup


class Hooks(Protocol):
    """What the pipeline wants to hear about."""

    def table_set(self, table_id: int, key: Key, priority: int, action: TableAction) -> None: ...

    def table_unset(self, table_id: int, key: Key, priority: int) -> None: ...

    def default_set(self, table_id: int, action: ActionCall) -> None: ...

    def profile_changed(self) -> None: ...

    def sync_counters(self) -> None: ...

    def counter_get(self, counter_id: int, index: int) -> tuple[int, int]: ...

    def counter_set(self, counter_id: int, index: int, packets: int, octets: int) -> None: ...


# The model's default actions (fabric.p4): table name -> (action name, args).
_MODEL_DEFAULTS: dict[str, tuple[str, tuple[int, ...]]] = {
    "FabricIngress.acl": ("NoAction", ()),
    "FabricIngress.qos_classify": ("FabricIngress.set_traffic_class", (0,)),
    "FabricIngress.routing_v4": ("FabricIngress.drop", ()),
    "FabricEgress.ecn_marking": ("NoAction", ()),
    "FabricEgress.pfc_config": ("NoAction", ()),
}


_UPDATE_TYPES = {
    UpdateType.INSERT.value: UpdateType.INSERT,
    UpdateType.MODIFY.value: UpdateType.MODIFY,
    UpdateType.DELETE.value: UpdateType.DELETE,
}

# Entity kinds fabric.p4 does not declare -> the field holding their P4Info id.
_ABSENT_ENTITIES = {
    "register_entry": "register_id",
    "meter_entry": "meter_id",
    "direct_counter_entry": "table_entry.table_id",
    "direct_meter_entry": "table_entry.table_id",
    "value_set_entry": "value_set_id",
    "digest_entry": "digest_id",
    "extern_entry": "extern_type_id",
}


class P4State:
    """Every P4Runtime object of one forwarding pipeline config."""

    def __init__(self, schema: FabricSchema, hooks: Hooks) -> None:
        self.schema = schema
        self._hooks = hooks
        self.entries: dict[int, dict[tuple[Key, int], TableEntryState]] = {
            t: {} for t in schema.tables
        }
        self.defaults: dict[int, ActionCall | None] = {}
        self.members: dict[int, dict[int, MemberState]] = {p: {} for p in schema.profiles}
        self.groups: dict[int, dict[int, GroupState]] = {p: {} for p in schema.profiles}
        # Table entries and groups that reference a member / a group (delete refuses them).
        self._member_refs: dict[tuple[int, int], int] = {}
        self._group_refs: dict[tuple[int, int], int] = {}
        self._free_handles: dict[int, list[int]] = {p: [] for p in schema.profiles}
        self._next_handle: dict[int, int] = dict.fromkeys(schema.profiles, 0)
        for table in schema.tables.values():
            self.defaults[table.id] = self._initial_default(table)
            default = self.defaults[table.id]
            if default is not None:
                hooks.default_set(table.id, default)

    def _initial_default(self, table: TableInfo) -> ActionCall | None:
        """The P4Info's initial_default_action (P4Runtime 1.4), else the model's default."""
        initial = self.schema.p4info_tables[table.id].initial_default_action
        if initial.action_id in self.schema.actions:
            info = self.schema.actions[initial.action_id]
            args = {a.param_id: int.from_bytes(a.value, "big") for a in initial.arguments}
            if all(p.id in args for p in info.params):
                return ActionCall(info.id, tuple(args[p.id] for p in info.params))
        if table.implementation_id:
            return None  # a selector table's miss drops
        model = _MODEL_DEFAULTS.get(table.name)
        if model is not None:
            action_id = self.schema.action_ids.get(model[0], 0)
            if action_id in table.default_actions:
                return ActionCall(action_id, model[1])
        if table.const_default_action_id:
            action = self.schema.actions.get(table.const_default_action_id)
            if action is not None and not action.params:
                return ActionCall(action.id, ())
        noaction = self.schema.action_ids.get("NoAction", 0)
        if noaction in table.default_actions:
            return ActionCall(noaction, ())
        return None

    # ---- writes -------------------------------------------------------------------------

    def apply(self, update: p4r.Update) -> None:
        """Apply one update or raise P4Error with the code the spec gives."""
        utype = _UPDATE_TYPES.get(update.type)
        if utype is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"update type {update.type} is not valid")
        entity = update.entity
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table_entry(entity.table_entry, utype)
        elif kind == "action_profile_member":
            self._write_member(entity.action_profile_member, utype)
        elif kind == "action_profile_group":
            self._write_group(entity.action_profile_group, utype)
        elif kind == "counter_entry":
            self._write_counter(entity.counter_entry, utype)
        elif kind is None:
            raise P4Error(Code.INVALID_ARGUMENT, "update has no entity")
        else:
            raise P4Error(Code.UNIMPLEMENTED, f"softswitch does not implement {kind} writes")

    def _table(self, table_id: int) -> TableInfo:
        table = self.schema.tables.get(table_id)
        if table is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"no table with id {table_id}")
        return table

    def _write_table_entry(self, te: p4r.TableEntry, utype: UpdateType) -> None:
        table = self._table(te.table_id)
        if te.is_default_action:
            self._write_default(table, te, utype)
            return
        key = self._decode_key(table, te)
        priority = te.priority
        if table.needs_priority:
            if priority <= 0:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"table {table.name!r} has ternary keys: entries need a priority > 0",
                )
        elif priority != 0:
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"table {table.name!r} has no ternary/range/optional key: priority must be 0",
            )
        entries = self.entries[table.id]
        slot = (key, priority)
        old = entries.get(slot)
        if utype is UpdateType.DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no such entry to delete")
            del entries[slot]
            self._unref(table, old.action)
            self._hooks.table_unset(table.id, key, priority)
            return
        if utype is UpdateType.INSERT:
            if old is not None:
                raise P4Error(Code.ALREADY_EXISTS, f"{table.name}: entry already exists")
            if table.size and len(entries) >= table.size:
                raise P4Error(
                    Code.RESOURCE_EXHAUSTED, f"{table.name}: table full ({table.size} entries)"
                )
        elif old is None:
            raise P4Error(Code.NOT_FOUND, f"{table.name}: no such entry to modify")
        action = self._decode_table_action(table, te)
        self._ref(table, action)
        if old is not None:
            self._unref(table, old.action)
        if te.HasField("counter_data") or te.HasField("meter_config"):
            te.ClearField("counter_data")  # no direct counters/meters in fabric.p4
            te.ClearField("meter_config")
        entries[slot] = TableEntryState(key, priority, action, te)
        self._hooks.table_set(table.id, key, priority, action)

    def _write_default(self, table: TableInfo, te: p4r.TableEntry, utype: UpdateType) -> None:
        if utype is not UpdateType.MODIFY:
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"{table.name}: the default entry can only be modified, not {utype.name}",
            )
        if len(te.match) or te.priority:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"{table.name}: a default entry has no match and no priority"
            )
        if table.implementation_id:
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"{table.name}: the default action of a table with an action selector cannot be"
                " set",
            )
        if table.const_default_action_id:
            raise P4Error(Code.PERMISSION_DENIED, f"{table.name}: the default action is const")
        if te.HasField("action"):
            if te.action.WhichOneof("type") != "action":
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{table.name}: default must be a direct action"
                )
            action = self._decode_action(te.action.action, table.default_actions, table.name)
        else:
            initial = self._initial_default(table)
            if initial is None:
                raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: no default action to reset to")
            action = initial
        self.defaults[table.id] = action
        self._hooks.default_set(table.id, action)

    def _decode_key(self, table: TableInfo, te: p4r.TableEntry) -> Key:
        fields = table.match_fields
        field_index = table.field_index
        values: list[tuple[int, ...] | None] = [None] * len(fields)
        for fm in te.match:
            idx = field_index.get(fm.field_id)
            if idx is None:
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{table.name}: no match field with id {fm.field_id}"
                )
            if values[idx] is not None:
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{table.name}: match field id {fm.field_id} repeated"
                )
            info = fields[idx]
            kind = info.kind
            bitwidth = info.bitwidth
            which = fm.WhichOneof("field_match_type")
            if kind is MatchKind.EXACT and which == "exact":
                exact = fm.exact
                raw = exact.value
                value = int.from_bytes(raw, "big")
                if not raw or value >> bitwidth:
                    _width_error(table, info.name, raw, bitwidth)
                if raw[0] == 0 and len(raw) > 1:
                    exact.value = p4bytes.canonical(raw)
                values[idx] = (value,)
            elif kind is MatchKind.LPM and which == "lpm":
                lpm = fm.lpm
                plen = lpm.prefix_len
                if plen <= 0 or plen > bitwidth:
                    raise P4Error(
                        Code.INVALID_ARGUMENT,
                        f"{table.name}.{info.name}: prefix_len {plen} out of 1..{bitwidth}"
                        " (a don't-care LPM field must be omitted)",
                    )
                raw = lpm.value
                value = int.from_bytes(raw, "big")
                if not raw or value >> bitwidth:
                    _width_error(table, info.name, raw, bitwidth)
                if value & ((1 << (bitwidth - plen)) - 1):
                    raise P4Error(
                        Code.INVALID_ARGUMENT,
                        f"{table.name}.{info.name}: value has bits set beyond /{plen}",
                    )
                if raw[0] == 0 and len(raw) > 1:
                    lpm.value = p4bytes.canonical(raw)
                values[idx] = (value, plen)
            elif kind is MatchKind.TERNARY and which == "ternary":
                ternary = fm.ternary
                raw, raw_mask = ternary.value, ternary.mask
                value = int.from_bytes(raw, "big")
                mask = int.from_bytes(raw_mask, "big")
                if not raw or value >> bitwidth:
                    _width_error(table, info.name, raw, bitwidth)
                if not raw_mask or mask >> bitwidth:
                    _width_error(table, info.name + " mask", raw_mask, bitwidth)
                if mask == 0:
                    raise P4Error(
                        Code.INVALID_ARGUMENT,
                        f"{table.name}.{info.name}: mask 0"
                        " (a don't-care ternary field must be omitted)",
                    )
                if value & ~mask:
                    raise P4Error(
                        Code.INVALID_ARGUMENT,
                        f"{table.name}.{info.name}: value has bits outside mask",
                    )
                if not p4bytes.is_canonical(raw):
                    ternary.value = p4bytes.canonical(raw)
                if not p4bytes.is_canonical(raw_mask):
                    ternary.mask = p4bytes.canonical(raw_mask)
                values[idx] = (value, mask)
            else:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{table.name}.{info.name} is a {kind.value} field, got a {which} match",
                )
        if None in values:
            for idx, info in enumerate(fields):
                if values[idx] is None and info.kind is MatchKind.EXACT:
                    raise P4Error(
                        Code.INVALID_ARGUMENT, f"{table.name}: exact field {info.name!r} missing"
                    )
        return tuple(values)

    def _decode_table_action(self, table: TableInfo, te: p4r.TableEntry) -> TableAction:
        if not te.HasField("action"):
            raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: entry has no action")
        which = te.action.WhichOneof("type")
        if which == "action":
            if table.implementation_id:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{table.name} is implemented by an action profile: use a member or group",
                )
            return self._decode_action(te.action.action, table.entry_actions, table.name)
        if not table.implementation_id:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"{table.name} has no action profile: use a direct action"
            )
        profile_id = table.implementation_id
        if which == "action_profile_member_id":
            member_id = te.action.action_profile_member_id
            if member_id not in self.members[profile_id]:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no member {member_id}")
            return MemberRef(member_id)
        if which == "action_profile_group_id":
            group_id = te.action.action_profile_group_id
            if group_id not in self.groups[profile_id]:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no group {group_id}")
            return GroupRef(group_id)
        if which == "action_profile_action_set":
            return self._decode_one_shot(table, te.action.action_profile_action_set)
        raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: entry has no action")

    def _decode_one_shot(self, table: TableInfo, action_set: p4r.ActionProfileActionSet) -> OneShot:
        profile = self.schema.profiles[table.implementation_id]
        actions: list[OneShotAction] = []
        total = 0
        for item in action_set.action_profile_actions:
            call = self._decode_action(item.action, table.entry_actions, f"{table.name} one-shot")
            if item.weight < 0:
                raise P4Error(Code.INVALID_ARGUMENT, f"{table.name} one-shot: weight < 0")
            weight = item.weight or 1
            total += weight
            watch_port = self._watch_port(item, f"{table.name} one-shot")
            actions.append(OneShotAction(call, weight, watch_port))
        if not actions:
            raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: empty one-shot action set")
        if profile.max_group_size and total > profile.max_group_size:
            raise P4Error(
                Code.RESOURCE_EXHAUSTED,
                f"{table.name} one-shot: {total} weighted actions exceed {profile.max_group_size}",
            )
        return OneShot(tuple(actions))

    def _watch_port(
        self, holder: p4r.ActionProfileAction | p4r.ActionProfileGroup.Member, where: str
    ) -> int | None:
        """The port a member watches (`watch_port` bytes, or the deprecated int `watch`)."""
        kind = holder.WhichOneof("watch_kind")
        if kind == "watch_port":
            try:
                value = p4bytes.decode(holder.watch_port, 9, f"{where} watch_port")
            except p4bytes.ValueWidthError as err:
                raise P4Error(Code.INVALID_ARGUMENT, str(err)) from None
            if not p4bytes.is_canonical(holder.watch_port):
                holder.watch_port = p4bytes.canonical(holder.watch_port)
            return value
        if kind == "watch":
            return holder.watch
        return None

    def _decode_action(self, action: p4r.Action, allowed: frozenset[int], where: str) -> ActionCall:
        info: ActionInfo | None = self.schema.actions.get(action.action_id)
        if info is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"{where}: no action with id {action.action_id}")
        if info.id not in allowed:
            raise P4Error(Code.INVALID_ARGUMENT, f"{where}: action {info.name!r} not allowed here")
        params = info.params
        args: list[int | None] = [None] * len(params)
        position = info.param_position
        for param in action.params:
            pos = position.get(param.param_id)
            if pos is None:
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{info.name}: no parameter with id {param.param_id}"
                )
            if args[pos] is not None:
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{info.name}: parameter {params[pos].name} repeated"
                )
            raw = param.value
            value = int.from_bytes(raw, "big")
            if not raw or value >> params[pos].bitwidth:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{info.name}.{params[pos].name}: value 0x{raw.hex()} is empty or does not"
                    f" fit in {params[pos].bitwidth} bits",
                )
            if raw[0] == 0 and len(raw) > 1:
                param.value = p4bytes.canonical(raw)
            args[pos] = value
        if None in args:
            missing = [p.name for p, a in zip(params, args, strict=True) if a is None]
            raise P4Error(Code.INVALID_ARGUMENT, f"{info.name}: missing parameters {missing}")
        return ActionCall(info.id, tuple(args))  # type: ignore[arg-type]

    def _ref(self, table: TableInfo, action: TableAction) -> None:
        if isinstance(action, MemberRef):
            k = (table.implementation_id, action.member_id)
            self._member_refs[k] = self._member_refs.get(k, 0) + 1
        elif isinstance(action, GroupRef):
            k = (table.implementation_id, action.group_id)
            self._group_refs[k] = self._group_refs.get(k, 0) + 1

    def _unref(self, table: TableInfo, action: TableAction) -> None:
        if isinstance(action, MemberRef):
            self._member_refs[(table.implementation_id, action.member_id)] -= 1
        elif isinstance(action, GroupRef):
            self._group_refs[(table.implementation_id, action.group_id)] -= 1

    def _profile(self, profile_id: int) -> int:
        if profile_id not in self.schema.profiles:
            raise P4Error(Code.INVALID_ARGUMENT, f"no action profile with id {profile_id}")
        return profile_id

    def _write_member(self, msg: p4r.ActionProfileMember, utype: UpdateType) -> None:
        profile_id = self._profile(msg.action_profile_id)
        profile = self.schema.profiles[profile_id]
        members = self.members[profile_id]
        old = members.get(msg.member_id)
        where = f"{profile.name} member {msg.member_id}"
        if utype is UpdateType.DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{where}: no such member to delete")
            if self._member_refs.get((profile_id, msg.member_id), 0) > 0:
                raise P4Error(
                    Code.FAILED_PRECONDITION, f"{where} is still used by a group or table entry"
                )
            del members[msg.member_id]
            heapq.heappush(self._free_handles[profile_id], old.handle)
            self._hooks.profile_changed()
            return
        if utype is UpdateType.INSERT and old is not None:
            raise P4Error(Code.ALREADY_EXISTS, f"{where} already exists")
        if utype is UpdateType.MODIFY and old is None:
            raise P4Error(Code.NOT_FOUND, f"{where}: no such member to modify")
        allowed: frozenset[int] = frozenset()
        for table_id in profile.table_ids:
            if table_id in self.schema.tables:
                allowed |= self.schema.tables[table_id].entry_actions
        action = self._decode_action(msg.action, allowed, where)
        if old is not None:
            old.action = action
            old.message = msg
        else:
            if profile.size and len(members) >= profile.size:
                raise P4Error(Code.RESOURCE_EXHAUSTED, f"{profile.name}: {profile.size} members")
            free = self._free_handles[profile_id]
            if free:
                handle = heapq.heappop(free)
            else:
                handle = self._next_handle[profile_id]
                self._next_handle[profile_id] = handle + 1
            members[msg.member_id] = MemberState(msg.member_id, handle, action, msg)
        self._hooks.profile_changed()

    def _write_group(self, msg: p4r.ActionProfileGroup, utype: UpdateType) -> None:
        profile_id = self._profile(msg.action_profile_id)
        profile = self.schema.profiles[profile_id]
        groups = self.groups[profile_id]
        old = groups.get(msg.group_id)
        where = f"{profile.name} group {msg.group_id}"
        if utype is UpdateType.DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{where}: no such group to delete")
            if self._group_refs.get((profile_id, msg.group_id), 0) > 0:
                raise P4Error(Code.FAILED_PRECONDITION, f"{where} is still used by a table entry")
            del groups[msg.group_id]
            for old_member in old.members:
                self._member_refs[(profile_id, old_member.member_id)] -= 1
            self._hooks.profile_changed()
            return
        if utype is UpdateType.INSERT and old is not None:
            raise P4Error(Code.ALREADY_EXISTS, f"{where} already exists")
        if utype is UpdateType.MODIFY and old is None:
            raise P4Error(Code.NOT_FOUND, f"{where}: no such group to modify")
        max_size = msg.max_size
        if max_size < 0 or (profile.max_group_size and max_size > profile.max_group_size):
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"{where}: max_size {max_size} exceeds the profile's {profile.max_group_size}",
            )
        if old is not None and max_size and max_size != old.max_size:
            raise P4Error(Code.INVALID_ARGUMENT, f"{where}: max_size cannot be modified")
        limit = (old.max_size if old is not None else max_size) or profile.max_group_size
        members: list[GroupMemberState] = []
        seen: set[int] = set()
        total = 0
        for m in msg.members:
            if m.member_id in seen:
                raise P4Error(Code.INVALID_ARGUMENT, f"{where}: member {m.member_id} repeated")
            seen.add(m.member_id)
            if m.member_id not in self.members[profile_id]:
                raise P4Error(Code.NOT_FOUND, f"{where}: no member {m.member_id}")
            if m.weight < 0:
                raise P4Error(Code.INVALID_ARGUMENT, f"{where}: member {m.member_id} weight < 0")
            weight = m.weight or 1  # clients that leave weight unset mean 1
            total += weight
            watch_port = self._watch_port(m, where)
            members.append(GroupMemberState(m.member_id, weight, watch_port))
        if limit and total > limit:
            raise P4Error(
                Code.RESOURCE_EXHAUSTED, f"{where}: {total} weighted members exceed max {limit}"
            )
        if old is None and profile.size and len(groups) >= profile.size:
            raise P4Error(Code.RESOURCE_EXHAUSTED, f"{profile.name}: {profile.size} groups")
        for gm in members:
            k = (profile_id, gm.member_id)
            self._member_refs[k] = self._member_refs.get(k, 0) + 1
        if old is not None:
            for gm in old.members:
                self._member_refs[(profile_id, gm.member_id)] -= 1
        groups[msg.group_id] = GroupState(
            msg.group_id, old.max_size if old is not None else max_size, tuple(members), msg
        )
        self._hooks.profile_changed()

    def _write_counter(self, msg: p4r.CounterEntry, utype: UpdateType) -> None:
        if utype is not UpdateType.MODIFY:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"counter entries can only be modified, not {utype.name}"
            )
        info = self.schema.counters.get(msg.counter_id)
        if info is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"no counter with id {msg.counter_id}")
        if not msg.HasField("index"):
            raise P4Error(Code.INVALID_ARGUMENT, f"{info.name}: a counter write needs an index")
        index = msg.index.index
        if not 0 <= index < info.size:
            raise P4Error(
                Code.OUT_OF_RANGE, f"{info.name}: index {index} out of 0..{info.size - 1}"
            )
        self._hooks.counter_set(info.id, index, msg.data.packet_count, msg.data.byte_count)

    # ---- reads --------------------------------------------------------------------------

    def read(self, entity: p4r.Entity) -> Iterator[p4r.Entity]:
        """Every entity matching `entity` (zero ids and unset fields are wildcards)."""
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            yield from self._read_table_entries(entity.table_entry)
        elif kind == "action_profile_member":
            yield from self._read_members(entity.action_profile_member)
        elif kind == "action_profile_group":
            yield from self._read_groups(entity.action_profile_group)
        elif kind == "counter_entry":
            yield from self._read_counters(entity.counter_entry)
        elif kind is None:
            raise P4Error(Code.INVALID_ARGUMENT, "read entity is empty")
        elif kind == "packet_replication_engine_entry":
            return  # fabric.p4 uses no multicast groups or clone sessions: nothing to read
        elif kind in _ABSENT_ENTITIES:
            # fabric.p4 has none of these: a wildcard read finds nothing, a named one is wrong.
            holder = getattr(entity, kind)
            for attr in _ABSENT_ENTITIES[kind].split("."):
                holder = getattr(holder, attr)
            if holder:
                raise P4Error(Code.NOT_FOUND, f"fabric.p4 has no {kind} with id {holder}")
        else:
            raise P4Error(Code.UNIMPLEMENTED, f"softswitch does not implement {kind} reads")

    def _read_table_entries(self, query: p4r.TableEntry) -> Iterator[p4r.Entity]:
        table_ids = [self._table(query.table_id).id] if query.table_id else list(self.entries)
        if query.is_default_action:
            for table_id in table_ids:
                yield p4r.Entity(table_entry=self._default_entry(table_id))
            return
        if query.table_id and len(query.match):
            table = self._table(query.table_id)
            probe = p4r.TableEntry()
            probe.CopyFrom(query)
            key = self._decode_key(table, probe)
            entries = self.entries[table.id]
            if query.priority or not table.needs_priority:
                hit = entries.get((key, query.priority))
                if hit is not None:
                    yield p4r.Entity(table_entry=hit.message)
                return
            for (ekey, _prio), state in entries.items():
                if ekey == key:
                    yield p4r.Entity(table_entry=state.message)
            return
        for table_id in table_ids:
            for state in self.entries[table_id].values():
                if query.priority and state.priority != query.priority:
                    continue
                yield p4r.Entity(table_entry=state.message)

    def _default_entry(self, table_id: int) -> p4r.TableEntry:
        te = p4r.TableEntry(table_id=table_id, is_default_action=True)
        action = self.defaults.get(table_id)
        if action is not None:
            te.action.action.CopyFrom(self.action_message(action))
        return te

    def action_message(self, action: ActionCall) -> p4r.Action:
        info = self.schema.actions[action.action_id]
        return p4r.Action(
            action_id=action.action_id,
            params=[
                p4r.Action.Param(param_id=p.id, value=p4bytes.encode(v))
                for p, v in zip(info.params, action.args, strict=True)
            ],
        )

    def _profiles_for(self, profile_id: int) -> list[int]:
        return [self._profile(profile_id)] if profile_id else list(self.schema.profiles)

    def _read_members(self, query: p4r.ActionProfileMember) -> Iterator[p4r.Entity]:
        for profile_id in self._profiles_for(query.action_profile_id):
            for member in self.members[profile_id].values():
                if query.member_id and member.member_id != query.member_id:
                    continue
                yield p4r.Entity(action_profile_member=member.message)

    def _read_groups(self, query: p4r.ActionProfileGroup) -> Iterator[p4r.Entity]:
        for profile_id in self._profiles_for(query.action_profile_id):
            for group in self.groups[profile_id].values():
                if query.group_id and group.group_id != query.group_id:
                    continue
                yield p4r.Entity(action_profile_group=group.message)

    def _read_counters(self, query: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        self._hooks.sync_counters()
        if query.counter_id:
            info = self.schema.counters.get(query.counter_id)
            if info is None:
                raise P4Error(Code.INVALID_ARGUMENT, f"no counter with id {query.counter_id}")
            infos = [info]
        else:
            infos = list(self.schema.counters.values())
        for info in infos:
            if query.HasField("index"):
                index = query.index.index
                if not 0 <= index < info.size:
                    raise P4Error(
                        Code.OUT_OF_RANGE, f"{info.name}: index {index} out of 0..{info.size - 1}"
                    )
                indexes: range | list[int] = [index]
            else:
                indexes = range(info.size)
            for index in indexes:
                packets, octets = self._hooks.counter_get(info.id, index)
                yield p4r.Entity(
                    counter_entry=p4r.CounterEntry(
                        counter_id=info.id,
                        index=p4r.Index(index=index),
                        data=p4r.CounterData(byte_count=octets, packet_count=packets),
                    )
                )


def _width_error(table: TableInfo, field: str, raw: bytes, bitwidth: int) -> None:
    raise P4Error(
        Code.INVALID_ARGUMENT,
        f"{table.name}.{field}: value 0x{raw.hex()} is empty or does not fit in {bitwidth} bits",
    )
