"""Registers (P4Runtime spec §9.6, RegisterEntry): reads and MODIFY writes, of one index or of
every index when `index` is unset, the cells as P4Data bitstrings of the P4Info's width.

fabric.p4's registers (FabricEgress.queue_depth, queue_watermark) are written by the data
path: the values live where it keeps them (the pipeline's port-indexed lists, the traffic
manager's occupancy folded in by `sync_counters`, as for counters); this store checks ids,
indexes and values and goes through the hooks. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from finsy.proto import p4d, p4r

from railfabric.p4bytes import ValueWidthError, decode, encode
from softswitch.codes import Code, P4Error
from softswitch.entities import UpdateType
from softswitch.schema import FabricSchema, RegisterInfo


class RegisterHooks(Protocol):
    def sync_counters(self) -> None: ...

    def register_get(self, register_id: int, index: int) -> int: ...

    def register_set(self, register_id: int, index: int, value: int) -> None: ...


class RegisterStore:
    """The registers of one pipeline config."""

    def __init__(self, schema: FabricSchema, hooks: RegisterHooks) -> None:
        self.schema = schema
        self._hooks = hooks

    def _register(self, register_id: int) -> RegisterInfo:
        info = self.schema.registers.get(register_id)
        if info is None:
            raise P4Error(Code.NOT_FOUND, f"no register with id {register_id}")
        return info

    def write(self, msg: p4r.RegisterEntry, utype: UpdateType) -> None:
        if utype is not UpdateType.MODIFY:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"register entries can only be modified, not {utype.name}"
            )
        info = self._register(msg.register_id)
        if msg.data.WhichOneof("data") != "bitstring":
            raise P4Error(
                Code.INVALID_ARGUMENT,
                f"{info.name}: data must be a bitstring of bit<{info.bitwidth}>",
            )
        try:
            value = decode(msg.data.bitstring, info.bitwidth, info.name)
        except ValueWidthError as err:
            raise P4Error(Code.INVALID_ARGUMENT, str(err)) from None
        for index in _indexes(info, msg):
            self._hooks.register_set(info.id, index, value)

    def read(self, query: p4r.RegisterEntry, *, sync: bool = True) -> Iterator[p4r.Entity]:
        if sync:
            self._hooks.sync_counters()
        if query.register_id:
            infos = [self._register(query.register_id)]
        else:
            infos = list(self.schema.registers.values())
        for info in infos:
            for index in _indexes(info, query):
                yield p4r.Entity(
                    register_entry=p4r.RegisterEntry(
                        register_id=info.id,
                        index=p4r.Index(index=index),
                        data=p4d.P4Data(bitstring=encode(self._hooks.register_get(info.id, index))),
                    )
                )


def _indexes(info: RegisterInfo, msg: p4r.RegisterEntry) -> range | list[int]:
    if not msg.HasField("index"):
        return range(info.size)
    index = msg.index.index
    if index < 0:
        raise P4Error(Code.INVALID_ARGUMENT, f"{info.name}: index {index} is negative")
    if index >= info.size:
        raise P4Error(Code.OUT_OF_RANGE, f"{info.name}: index {index} out of 0..{info.size - 1}")
    return [index]
