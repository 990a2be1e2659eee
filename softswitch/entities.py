"""P4Runtime entities decoded and validated (spec §8.3 bytestrings, §9.1.1 match fields, §9.1.2
actions, §9.2.3 one-shot action sets): the decoded forms the stores keep and the pipeline
reads, and the functions that build them from the protobuf messages, raising `P4Error` with
the code the spec gives.

Values arrive big-endian and may be padded; a value that is empty or wider than its field is
INVALID_ARGUMENT. The decoders rewrite padded values in the message to their canonical form
(no leading zero bytes) so that a Read returns what the target holds. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, NamedTuple, NoReturn

from finsy.proto import p4r

from railfabric import p4bytes
from softswitch.codes import Code, P4Error
from softswitch.schema import ActionInfo, TableInfo


class UpdateType(enum.IntEnum):
    UNSPECIFIED = p4r.Update.UNSPECIFIED
    INSERT = p4r.Update.INSERT
    MODIFY = p4r.Update.MODIFY
    DELETE = p4r.Update.DELETE


# int.from_bytes looked up once: through the class it costs ~90 ns more per value.
_from_bytes = int.from_bytes

# The members as plain names for the write path, which compares one per update: a lookup on
# the enum class (`UpdateType.DELETE`) costs ~120 ns, a module global ~20 (Python 3.11).
INSERT, MODIFY, DELETE = UpdateType.INSERT, UpdateType.MODIFY, UpdateType.DELETE

UPDATE_TYPES = {
    UpdateType.INSERT.value: UpdateType.INSERT,
    UpdateType.MODIFY.value: UpdateType.MODIFY,
    UpdateType.DELETE.value: UpdateType.DELETE,
}


class ActionCall(NamedTuple):
    """A direct action with its arguments in the P4Info's parameter order. (A named tuple,
    not a frozen dataclass: one is built per update, and a tuple is built three times faster.)"""

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
# The FieldMatch oneof member that carries a match kind (MatchKind's values).
MatchOneof = Literal["exact", "lpm", "ternary", "range", "optional"]


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A table's match fields as `decode_key` walks them: (name, bitwidth, kind) per field in
    P4Info order, the kind spelled as the FieldMatch oneof that carries it ("exact", "lpm",
    "ternary", "range", "optional")."""

    table: str
    fields: tuple[tuple[str, int, MatchOneof], ...]
    index: dict[int, int]  # field id -> position in the key
    exact: tuple[int, ...]  # positions of the exact fields, which a key must give

    @classmethod
    def of(cls, table: TableInfo) -> KeySpec:
        fields: tuple[tuple[str, int, MatchOneof], ...] = tuple(
            (f.name, f.bitwidth, f.kind.value) for f in table.match_fields
        )
        exact = tuple(i for i, f in enumerate(fields) if f[2] == "exact")
        return cls(table.name, fields, dict(table.field_index), exact)


def decode_key(spec: KeySpec, te: p4r.TableEntry) -> Key:
    """The key of `te`'s match fields (§9.1.1); canonicalises the values in `te`."""
    fields = spec.fields
    index = spec.index
    values: list[tuple[int, ...] | None] = [None] * len(fields)
    # Indexed: upb's repeated fields have no __iter__, so `for fm in te.match` walks the
    # sequence protocol and ends on a raised IndexError (~200 ns more an entry, measured).
    match = te.match
    for position in range(len(match)):
        fm = match[position]
        field_id = fm.field_id
        idx = index.get(field_id)
        if idx is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"{spec.table}: no match field with id {field_id}")
        if values[idx] is not None:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"{spec.table}: match field id {field_id} repeated"
            )
        name, bitwidth, kind = fields[idx]
        if not fm.HasField(kind):  # cheaper than WhichOneof; only the error needs which one
            _kind_error(spec, name, kind, fm.WhichOneof("field_match_type"))
        if kind == "exact":
            exact = fm.exact
            raw = exact.value
            value = _from_bytes(raw, "big")
            if not raw or value >> bitwidth:
                _width_error(spec, name, raw, bitwidth)
            if raw[0] == 0 and len(raw) > 1:
                exact.value = p4bytes.canonical(raw)
            values[idx] = (value,)
        elif kind == "lpm":
            lpm = fm.lpm
            plen = lpm.prefix_len
            if plen <= 0 or plen > bitwidth:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{spec.table}.{name}: prefix_len {plen} out of 1..{bitwidth}"
                    " (a don't-care LPM field must be omitted)",
                )
            raw = lpm.value
            value = _from_bytes(raw, "big")
            if not raw or value >> bitwidth:
                _width_error(spec, name, raw, bitwidth)
            if value & ((1 << (bitwidth - plen)) - 1):
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{spec.table}.{name}: value has bits set beyond /{plen}",
                )
            if raw[0] == 0 and len(raw) > 1:
                lpm.value = p4bytes.canonical(raw)
            values[idx] = (value, plen)
        elif kind == "ternary":
            ternary = fm.ternary
            raw, raw_mask = ternary.value, ternary.mask
            value = _from_bytes(raw, "big")
            mask = _from_bytes(raw_mask, "big")
            if not raw or value >> bitwidth:
                _width_error(spec, name, raw, bitwidth)
            if not raw_mask or mask >> bitwidth:
                _width_error(spec, name + " mask", raw_mask, bitwidth)
            if mask == 0:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{spec.table}.{name}: mask 0 (a don't-care ternary field must be omitted)",
                )
            if value & ~mask:
                raise P4Error(
                    Code.INVALID_ARGUMENT, f"{spec.table}.{name}: value has bits outside mask"
                )
            if raw[0] == 0 and len(raw) > 1:
                ternary.value = p4bytes.canonical(raw)
            if raw_mask[0] == 0 and len(raw_mask) > 1:
                ternary.mask = p4bytes.canonical(raw_mask)
            values[idx] = (value, mask)
        else:  # range and optional: fabric.p4 has none, the model matches none
            _kind_error(spec, name, kind, kind)
    if None in values:
        for idx in spec.exact:
            if values[idx] is None:
                raise P4Error(
                    Code.INVALID_ARGUMENT,
                    f"{spec.table}: exact field {fields[idx][0]!r} missing",
                )
    return tuple(values)


def check_priority(table: TableInfo, priority: int) -> None:
    """§9.1: a priority > 0 exactly when the table has a ternary, range or optional field."""
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


def decode_action(
    actions: dict[int, ActionInfo], action: p4r.Action, allowed: frozenset[int], where: str
) -> ActionCall:
    """A direct action (§9.1.2): an action `allowed` here, every parameter once, in width."""
    info = actions.get(action.action_id)
    if info is None:
        raise P4Error(Code.INVALID_ARGUMENT, f"{where}: no action with id {action.action_id}")
    if info.id not in allowed:
        raise P4Error(Code.INVALID_ARGUMENT, f"{where}: action {info.name!r} not allowed here")
    params = info.params
    args: list[int | None] = [None] * len(params)
    position = info.param_position
    given = action.params
    for i in range(len(given)):  # indexed, as in decode_key
        param = given[i]
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
        value = _from_bytes(raw, "big")
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


def decode_watch_port(
    holder: p4r.ActionProfileAction | p4r.ActionProfileGroup.Member, where: str
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


def encode_action(actions: dict[int, ActionInfo], action: ActionCall) -> p4r.Action:
    """The p4.v1.Action of a decoded one, with canonical values."""
    info = actions[action.action_id]
    return p4r.Action(
        action_id=action.action_id,
        params=[
            p4r.Action.Param(param_id=p.id, value=p4bytes.encode(v))
            for p, v in zip(info.params, action.args, strict=True)
        ],
    )


def _kind_error(spec: KeySpec, name: str, kind: str, which: str | None) -> NoReturn:
    raise P4Error(
        Code.INVALID_ARGUMENT, f"{spec.table}.{name} is a {kind} field, got a {which} match"
    )


def _width_error(spec: KeySpec, field: str, raw: bytes, bitwidth: int) -> NoReturn:
    raise P4Error(
        Code.INVALID_ARGUMENT,
        f"{spec.table}.{field}: value 0x{raw.hex()} is empty or does not fit in {bitwidth} bits",
    )
