"""The P4Runtime objects a switch holds, one store per part of the spec: tables (§9.1,
`tables.py`), action profiles (§9.2, `profiles.py`), counters (§9.3, `counters.py`), registers
(§9.6, `registers.py`), clone sessions (§9.5, `replication.py`), with the entities decoded and
validated in `entities.py`. `P4State` sends each update and read to its store; every store
reports a per-update code as a `P4Error` (`codes.py`) and tells a `Hooks` object (the pipeline)
about each change so it can keep its fast lookup structures.

Pure: no I/O, no gRPC. `server.py` turns codes into google.rpc.Status details.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from finsy.proto import p4r

from softswitch.codes import Code, P4Error
from softswitch.counters import CounterHooks, CounterStore
from softswitch.entities import (
    UPDATE_TYPES,
    ActionCall,
    GroupRef,
    Key,
    MemberRef,
    OneShot,
    OneShotAction,
    TableAction,
    UpdateType,
    encode_action,
)
from softswitch.profiles import (
    GroupMemberState,
    GroupState,
    MemberState,
    ProfileHooks,
    ProfileStore,
)
from softswitch.registers import RegisterHooks, RegisterStore
from softswitch.replication import ReplicationStore
from softswitch.schema import FabricSchema, TableInfo
from softswitch.tables import TableEntryState, TableHooks, TableStore

__all__ = [
    "ActionCall",
    "Code",
    "GroupMemberState",
    "GroupRef",
    "GroupState",
    "Hooks",
    "Key",
    "MemberRef",
    "MemberState",
    "OneShot",
    "OneShotAction",
    "P4Error",
    "P4State",
    "TableAction",
    "TableEntryState",
    "UpdateType",
]


class Hooks(TableHooks, ProfileHooks, CounterHooks, RegisterHooks, Protocol):
    """What the pipeline wants to hear about."""


# Entity kinds fabric.p4 does not declare -> the field holding their P4Info id.
_ABSENT_ENTITIES = {
    "meter_entry": "meter_id",
    "direct_counter_entry": "table_entry.table_id",
    "direct_meter_entry": "table_entry.table_id",
    "value_set_entry": "value_set_id",
    "digest_entry": "digest_id",
    "extern_entry": "extern_type_id",
}


class P4State:
    """Every P4Runtime object of one forwarding pipeline config."""

    def __init__(
        self, schema: FabricSchema, hooks: Hooks, replica_ports: Iterable[int] = ()
    ) -> None:
        self.schema = schema
        self.profiles = ProfileStore(schema, hooks)
        self.tables = TableStore(schema, self.profiles, hooks)
        self.counters = CounterStore(schema, hooks)
        self.registers = RegisterStore(schema, hooks)
        self.replication = ReplicationStore(replica_ports)
        self._hooks = hooks
        # The stores' dicts, as the pipeline and tests read them.
        self.entries = self.tables.entries
        self.defaults = self.tables.defaults
        self.members = self.profiles.members
        self.groups = self.profiles.groups
        self._write_table = self.tables.write
        # Entity kind -> its store's writer (each takes the message of that kind).
        self._writers: dict[str, Callable[[Any, UpdateType], None]] = {
            "table_entry": self.tables.write,
            "action_profile_member": self.profiles.write_member,
            "action_profile_group": self.profiles.write_group,
            "counter_entry": self.counters.write,
            "register_entry": self.registers.write,
            "packet_replication_engine_entry": self.replication.write,
        }

    def _initial_default(self, table: TableInfo) -> ActionCall | None:
        """The default action a table starts with (and a default reset returns to)."""
        return self.tables.initial_default(table)

    # ---- writes -------------------------------------------------------------------------

    def apply(self, update: p4r.Update) -> None:
        """Apply one update or raise P4Error with the code the spec gives."""
        utype = UPDATE_TYPES.get(update.type)
        if utype is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"update type {update.type} is not valid")
        entity = update.entity
        # Most updates are table entries, and their writer is called without a lookup or a
        # getattr by name. Reading table_entry of an entity that holds something else gives
        # an empty one (table id 0), so a nonzero id says which it is without asking.
        te = entity.table_entry
        table_id = te.table_id
        if table_id:
            self._write_table(te, utype, table_id)
            return
        kind = entity.WhichOneof("entity")
        if kind is None:
            raise P4Error(Code.INVALID_ARGUMENT, "update has no entity")
        writer = self._writers.get(kind)
        if writer is None:
            raise P4Error(Code.UNIMPLEMENTED, f"softswitch does not implement {kind} writes")
        writer(getattr(entity, kind), utype)

    def apply_all(self, updates: Sequence[p4r.Update]) -> list[P4Error | None] | None:
        """Apply the updates of one WriteRequest in order, each as `apply` would: None when
        all applied, else one P4Error (or None: applied) per update.

        A plain entry of a table with a plain form (tables._EntryShape: routes, the entries
        a switch has most of) goes to `TableStore.write_plain` from here, with two Python
        calls an entry instead of five; whatever it leaves takes `apply`."""
        shapes = self.tables.shapes
        write_plain = self.tables.write_plain
        apply = self.apply
        errors: list[P4Error | None] | None = None  # built from the first failed update on
        for index, update in enumerate(updates):
            try:
                # An entity holding something else reads as an empty table entry (id 0).
                te = update.entity.table_entry
                shape = shapes.get(te.table_id)
                if shape is None or not write_plain(shape, te, update.type):
                    apply(update)
            except P4Error as err:
                if errors is None:
                    errors = [None] * index
                errors.append(err)
            else:
                if errors is not None:
                    errors.append(None)
        return errors

    # ---- reads --------------------------------------------------------------------------

    def read_all(self, entities: Iterable[p4r.Entity]) -> list[p4r.Entity]:
        """Every entity matching any of `entities` (one ReadRequest), in order; what the data
        path counts is brought up to date once, not once per entity."""
        queries = list(entities)
        if any(q.HasField("counter_entry") or q.HasField("register_entry") for q in queries):
            self._hooks.sync_counters()
        return [found for query in queries for found in self.read(query, sync=False)]

    def read(self, entity: p4r.Entity, *, sync: bool = True) -> Iterator[p4r.Entity]:
        """Every entity matching `entity` (zero ids and unset fields are wildcards); `sync`
        brings counters and registers up to date first."""
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            yield from self.tables.read(entity.table_entry)
        elif kind == "action_profile_member":
            yield from self.profiles.read_members(entity.action_profile_member)
        elif kind == "action_profile_group":
            yield from self.profiles.read_groups(entity.action_profile_group)
        elif kind == "counter_entry":
            yield from self.counters.read(entity.counter_entry, sync=sync)
        elif kind == "register_entry":
            yield from self.registers.read(entity.register_entry, sync=sync)
        elif kind is None:
            raise P4Error(Code.INVALID_ARGUMENT, "read entity is empty")
        elif kind == "packet_replication_engine_entry":
            yield from self.replication.read(entity.packet_replication_engine_entry)
        elif kind in _ABSENT_ENTITIES:
            # fabric.p4 has none of these: a wildcard read finds nothing, a named one is wrong.
            holder = getattr(entity, kind)
            for attr in _ABSENT_ENTITIES[kind].split("."):
                holder = getattr(holder, attr)
            if holder:
                raise P4Error(Code.NOT_FOUND, f"fabric.p4 has no {kind} with id {holder}")
        else:
            raise P4Error(Code.UNIMPLEMENTED, f"softswitch does not implement {kind} reads")

    def action_message(self, action: ActionCall) -> p4r.Action:
        return encode_action(self.schema.actions, action)
