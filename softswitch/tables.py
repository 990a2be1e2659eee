"""Match-action tables (P4Runtime spec §9.1): the entries of every table and its default entry.

An entry is identified by its key and priority: INSERT of one that exists is ALREADY_EXISTS,
MODIFY or DELETE of one that does not NOT_FOUND, an INSERT past the table's size
RESOURCE_EXHAUSTED. The default entry can only be MODIFIED (reset to the initial default when
the update carries no action), never on a table with an action selector (bmv2 refuses it), and
a const default action is PERMISSION_DENIED. Entries of a table implemented by an action
profile name a member, a group or a one-shot set (`profiles.ProfileStore`). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from finsy.proto import p4r

from railfabric import fabric_p4 as p4
from railfabric.protowire import len_field, uint_field
from softswitch.codes import Code, P4Error
from softswitch.entities import (
    DELETE,
    INSERT,
    MODIFY,
    ActionCall,
    Key,
    KeySpec,
    TableAction,
    UpdateType,
    check_priority,
    decode_action,
    decode_key,
    encode_action,
)
from softswitch.profiles import ProfileStore
from softswitch.schema import FabricSchema, MatchKind, TableInfo


class TableEntryState(NamedTuple):
    """(A named tuple: one is built per entry written, twice as fast as a dataclass; the
    plain path builds it with `_new`, without the Python frame of its __new__.)"""

    key: Key
    priority: int
    action: TableAction
    message: p4r.TableEntry


TableSetter = Callable[[Key, int, TableAction], None]


class TableHooks(Protocol):
    def table_set(self, table_id: int, key: Key, priority: int, action: TableAction) -> None: ...

    def table_setter(self, table_id: int) -> TableSetter:
        """What `table_set(table_id, ...)` calls, for a caller that writes many entries of
        the table (one call per entry instead of two)."""
        ...

    def table_unset(self, table_id: int, key: Key, priority: int) -> None: ...

    def default_set(self, table_id: int, action: ActionCall) -> None: ...


# fabric.p4's default actions by table, for a P4Info without initial_default_action (p4c
# 1.2.4.8 emits none): (action, args). The other tables' default is NoAction; a selector
# table (next) has none, its miss drops.
MODEL_DEFAULTS: dict[str, tuple[str, tuple[int, ...]]] = {
    p4.ACL: (p4.NO_ACTION, ()),
    p4.QOS_CLASSIFY: (p4.SET_TRAFFIC_CLASS, (0,)),  # TC_BEST_EFFORT
    p4.ROUTING_V4: (p4.DROP, ()),
    p4.ECN_MARKING: (p4.NO_ACTION, ()),
    p4.PFC_CONFIG: (p4.NO_ACTION, ()),
}


ACTION_CACHE_SIZE = 1024  # decoded direct actions remembered per table
_new = tuple.__new__

# Protobuf tags (field number << 3 | wire type) of the fields an _EntryShape reads.
_TAG_LPM_PREFIX_LEN = p4r.FieldMatch.LPM.PREFIX_LEN_FIELD_NUMBER << 3  # a varint
_TAG_ENTRY_ACTION = p4r.TableEntry.ACTION_FIELD_NUMBER << 3 | 2  # length-delimited


@dataclass(frozen=True, slots=True)
class _EntryShape:
    """The wire form of a plain entry of a table with one exact or LPM match field and direct
    actions (routing_v4, qos_classify), as clients send most of them: table_id, the one match
    field with a canonical value (and a prefix length), the action, and nothing else. Reading
    such an entry from its bytes (`TableStore.write_plain`) costs less than reading it field
    by field, where every sub-message read builds a Python object: a quarter less for a route,
    the entries a switch has most of. An entry in any other form, or with any value to refuse,
    is written by the general path, which gives the errors."""

    table: TableInfo
    bitwidth: int
    lpm: bool
    # Value length -> the entry's bytes up to and including that length, all of one size.
    heads: dict[int, bytes]
    size: int
    # The table's entries and remembered direct actions (TableStore's own dicts).
    entries: dict[tuple[Key, int], TableEntryState]
    actions: dict[bytes, ActionCall]
    on_set: TableSetter  # the pipeline's hook for this table, called directly

    @classmethod
    def of(
        cls,
        table: TableInfo,
        entries: dict[tuple[Key, int], TableEntryState],
        actions: dict[bytes, ActionCall],
        hooks: TableHooks,
    ) -> _EntryShape | None:
        fields = table.match_fields
        if table.implementation_id or table.needs_priority or len(fields) != 1:
            return None
        (field,) = fields
        if field.kind not in (MatchKind.EXACT, MatchKind.LPM):
            return None
        lpm = field.kind is MatchKind.LPM
        fm = p4r.FieldMatch
        value_field = fm.LPM.VALUE_FIELD_NUMBER if lpm else fm.Exact.VALUE_FIELD_NUMBER
        kind_field = fm.LPM_FIELD_NUMBER if lpm else fm.EXACT_FIELD_NUMBER
        heads: dict[int, bytes] = {}
        for length in range(1, (field.bitwidth + 7) // 8 + 1):
            # Built around stand-ins: only the lengths matter (the value's, and for LPM the
            # prefix length's field after it: a tag and a one-byte varint).
            tail = b"\0\0" if lpm else b""
            kind = len_field(kind_field, len_field(value_field, b"\0" * length) + tail)
            match = uint_field(fm.FIELD_ID_FIELD_NUMBER, field.id) + kind
            entry = uint_field(p4r.TableEntry.TABLE_ID_FIELD_NUMBER, table.id)
            entry += len_field(p4r.TableEntry.MATCH_FIELD_NUMBER, match)
            heads[length] = entry[: len(entry) - length - len(tail)]
        sizes = {len(head) for head in heads.values()}
        if len(sizes) != 1:
            return None  # a value length changed the size of another length: none here
        return cls(
            table,
            field.bitwidth,
            lpm,
            heads,
            sizes.pop(),
            entries,
            actions,
            hooks.table_setter(table.id),
        )


class TableStore:
    """The entries and default actions of every table of one pipeline config."""

    def __init__(self, schema: FabricSchema, profiles: ProfileStore, hooks: TableHooks) -> None:
        self.schema = schema
        self._profiles = profiles
        self._hooks = hooks
        self.entries: dict[int, dict[tuple[Key, int], TableEntryState]] = {
            t: {} for t in schema.tables
        }
        self.defaults: dict[int, ActionCall | None] = {}
        self._keys = {t.id: KeySpec.of(t) for t in schema.tables.values()}
        # Table id -> an entry's TableAction bytes -> the direct action they decoded to.
        self._direct_cache: dict[int, dict[bytes, ActionCall]] = {t: {} for t in schema.tables}
        # Table id -> the plain form of its entries, for the tables that have one: what
        # `write_plain` takes (P4State.apply_all looks it up once per update).
        self.shapes: dict[int, _EntryShape] = {}
        for table in schema.tables.values():
            shape = _EntryShape.of(
                table, self.entries[table.id], self._direct_cache[table.id], hooks
            )
            if shape is not None:
                self.shapes[table.id] = shape
        for table in schema.tables.values():
            default = self.initial_default(table)
            self.defaults[table.id] = default
            if default is not None:
                hooks.default_set(table.id, default)

    def initial_default(self, table: TableInfo) -> ActionCall | None:
        """The P4Info's initial_default_action (P4Runtime 1.4), else the model's default."""
        initial = self.schema.p4info_tables[table.id].initial_default_action
        if initial.action_id in self.schema.actions:
            info = self.schema.actions[initial.action_id]
            args = {a.param_id: int.from_bytes(a.value, "big") for a in initial.arguments}
            if all(p.id in args for p in info.params):
                return ActionCall(info.id, tuple(args[p.id] for p in info.params))
        if table.implementation_id:
            return None  # a selector table's miss drops
        model = MODEL_DEFAULTS.get(table.name)
        if model is not None:
            action_id = self.schema.action_ids.get(model[0], 0)
            if action_id in table.default_actions:
                return ActionCall(action_id, model[1])
        if table.const_default_action_id:
            action = self.schema.actions.get(table.const_default_action_id)
            if action is not None and not action.params:
                return ActionCall(action.id, ())
        noaction = self.schema.action_ids.get(p4.NO_ACTION, 0)
        if noaction in table.default_actions:
            return ActionCall(noaction, ())
        return None

    def table(self, table_id: int) -> TableInfo:
        table = self.schema.tables.get(table_id)
        if table is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"no table with id {table_id}")
        return table

    # ---- writes -------------------------------------------------------------------------

    def write(self, te: p4r.TableEntry, utype: UpdateType, table_id: int | None = None) -> None:
        """Write an entry of table `table_id` (te.table_id when not given: P4State reads it
        first, and every read of a field costs)."""
        if table_id is None:
            table_id = te.table_id
        shape = self.shapes.get(table_id)
        if shape is not None and self.write_plain(shape, te, utype):
            return
        table = self.schema.tables.get(table_id) or self.table(table_id)
        if te.is_default_action:
            self._write_default(table, te, utype)
            return
        key = decode_key(self._keys[table.id], te)
        priority = te.priority
        if priority or table.needs_priority:
            check_priority(table, priority)
        entries = self.entries[table.id]
        slot = (key, priority)
        old = entries.get(slot)
        profile_id = table.implementation_id
        if utype is DELETE:
            if old is None:
                raise P4Error(Code.NOT_FOUND, f"{table.name}: no such entry to delete")
            del entries[slot]
            if profile_id:
                self._profiles.unref(profile_id, old.action)
            self._hooks.table_unset(table.id, key, priority)
            return
        if utype is INSERT:
            if old is not None:
                raise P4Error(Code.ALREADY_EXISTS, f"{table.name}: entry already exists")
            if table.size and len(entries) >= table.size:
                raise P4Error(
                    Code.RESOURCE_EXHAUSTED, f"{table.name}: table full ({table.size} entries)"
                )
        elif old is None:
            raise P4Error(Code.NOT_FOUND, f"{table.name}: no such entry to modify")
        # Bytes that decoded to a direct action of this table before pass _entry_action's
        # checks again and decode to the same call: one serialization instead of the walk.
        action: TableAction | None = self._direct_cache[table.id].get(te.action.SerializeToString())
        if action is None:
            action = self._entry_action(table, te)
        if profile_id:
            self._profiles.ref(profile_id, action)
            if old is not None:
                self._profiles.unref(profile_id, old.action)
        if te.HasField("counter_data") or te.HasField("meter_config"):
            te.ClearField("counter_data")  # no direct counters/meters in fabric.p4
            te.ClearField("meter_config")
        entries[slot] = TableEntryState(key, priority, action, te)
        self._hooks.table_set(table.id, key, priority, action)

    def write_plain(self, shape: _EntryShape, te: p4r.TableEntry, utype: int) -> bool:
        """INSERT or MODIFY (`utype`, an Update.Type value) an entry of `shape` read from its
        bytes: False, having changed nothing, for any other update type, or when the entry is
        in another form, has a value to refuse or to canonicalise, or calls an action not
        decoded yet (the general path does all that). Raises what the general path raises
        for a valid entry: ALREADY_EXISTS, NOT_FOUND, RESOURCE_EXHAUSTED."""
        if utype not in (INSERT, MODIFY):
            return False
        raw = te.SerializeToString()
        start = shape.size
        if len(raw) <= start:
            return False
        length = raw[start - 1]
        if raw[:start] != shape.heads.get(length):
            return False
        end = start + length
        encoded = raw[start:end]
        if length > 1 and encoded[0] == 0:
            return False  # not canonical: the general path rewrites it
        value = int.from_bytes(encoded, "big")
        bitwidth = shape.bitwidth
        if value >> bitwidth:
            return False
        if shape.lpm:
            if len(raw) < end + 2 or raw[end] != _TAG_LPM_PREFIX_LEN:
                return False
            prefix_len = raw[end + 1]
            if not 0 < prefix_len <= bitwidth or value & ((1 << (bitwidth - prefix_len)) - 1):
                return False  # (a prefix length of 128 or more would take two bytes)
            key: Key = ((value, prefix_len),)
            end += 2
        else:
            key = ((value,),)
        if (
            len(raw) < end + 2
            or raw[end] != _TAG_ENTRY_ACTION
            or end + 2 + raw[end + 1] != len(raw)
        ):
            return False
        action = shape.actions.get(raw[end + 2 :])
        if action is None:
            return False
        table = shape.table
        entries = shape.entries
        slot = (key, 0)
        if utype == INSERT:  # an int here, not the enum
            if slot in entries:
                raise P4Error(Code.ALREADY_EXISTS, f"{table.name}: entry already exists")
            if table.size and len(entries) >= table.size:
                raise P4Error(
                    Code.RESOURCE_EXHAUSTED, f"{table.name}: table full ({table.size} entries)"
                )
        elif slot not in entries:
            raise P4Error(Code.NOT_FOUND, f"{table.name}: no such entry to modify")
        entries[slot] = _new(TableEntryState, (key, 0, action, te))
        shape.on_set(key, 0, action)
        return True

    def _entry_action(self, table: TableInfo, te: p4r.TableEntry) -> TableAction:
        if not te.HasField("action"):
            raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: entry has no action")
        action = te.action
        which = action.WhichOneof("type")
        if which == "action":
            if table.implementation_id:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{table.name} is implemented by an action profile: use a member or group",
                )
            return self._direct_action(table, te)
        if not table.implementation_id:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"{table.name} has no action profile: use a direct action"
            )
        return self._profiles.table_action(table, action, which or "")

    def _direct_action(self, table: TableInfo, te: p4r.TableEntry) -> ActionCall:
        """decode_action for an entry of `table`, remembered by the bytes of the entry's
        TableAction: a table's entries call few distinct actions (a route names one of a few
        next ids), and the same bytes decode to the same call. Only actions whose values were
        already canonical are remembered (decoding changed nothing in the message), and only
        those that decoded."""
        action = te.action
        raw = action.SerializeToString()
        call = decode_action(self.schema.actions, action.action, table.entry_actions, table.name)
        if action.SerializeToString() == raw:
            cache = self._direct_cache[table.id]
            if len(cache) >= ACTION_CACHE_SIZE:
                cache.clear()
            cache[raw] = call
        return call

    def _write_default(self, table: TableInfo, te: p4r.TableEntry, utype: UpdateType) -> None:
        if utype is not MODIFY:
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
            action = decode_action(
                self.schema.actions, te.action.action, table.default_actions, table.name
            )
        else:
            initial = self.initial_default(table)
            if initial is None:
                raise P4Error(Code.INVALID_ARGUMENT, f"{table.name}: no default action to reset to")
            action = initial
        self.defaults[table.id] = action
        self._hooks.default_set(table.id, action)

    # ---- reads --------------------------------------------------------------------------

    def read(self, query: p4r.TableEntry) -> Iterator[p4r.Entity]:
        """Entries matching `query`: of every table (table_id 0) or one, the default entries
        (is_default_action), one entry by its match (and priority), or all with a priority."""
        table_ids = [self.table(query.table_id).id] if query.table_id else list(self.entries)
        if query.is_default_action:
            for table_id in table_ids:
                yield p4r.Entity(table_entry=self.default_entry(table_id))
            return
        if query.table_id and len(query.match):
            table = self.table(query.table_id)
            probe = p4r.TableEntry()
            probe.CopyFrom(query)
            key = decode_key(self._keys[table.id], probe)
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

    def default_entry(self, table_id: int) -> p4r.TableEntry:
        te = p4r.TableEntry(table_id=table_id, is_default_action=True)
        action = self.defaults.get(table_id)
        if action is not None:
            te.action.action.CopyFrom(encode_action(self.schema.actions, action))
        return te
