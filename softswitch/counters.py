"""Indirect counters (P4Runtime spec §9.3): CounterEntry reads (every counter, every index
when `index` is unset) and writes (MODIFY only: sets an index, e.g. resets it to 0).

The counts themselves live where the data path keeps them (the pipeline's port-indexed lists,
the traffic manager's tallies folded in by `sync_counters`); this store checks ids and indexes
and goes through the hooks. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from finsy.proto import p4r

from softswitch.codes import Code, P4Error
from softswitch.entities import UpdateType
from softswitch.schema import CounterInfo, FabricSchema


class CounterHooks(Protocol):
    def sync_counters(self) -> None: ...

    def counter_get(self, counter_id: int, index: int) -> tuple[int, int]: ...

    def counter_set(self, counter_id: int, index: int, packets: int, octets: int) -> None: ...


class CounterStore:
    """The counters of one pipeline config."""

    def __init__(self, schema: FabricSchema, hooks: CounterHooks) -> None:
        self.schema = schema
        self._hooks = hooks

    def _counter(self, counter_id: int) -> CounterInfo:
        info = self.schema.counters.get(counter_id)
        if info is None:
            raise P4Error(Code.INVALID_ARGUMENT, f"no counter with id {counter_id}")
        return info

    def write(self, msg: p4r.CounterEntry, utype: UpdateType) -> None:
        if utype is not UpdateType.MODIFY:
            raise P4Error(
                Code.INVALID_ARGUMENT, f"counter entries can only be modified, not {utype.name}"
            )
        info = self._counter(msg.counter_id)
        if not msg.HasField("index"):
            raise P4Error(Code.INVALID_ARGUMENT, f"{info.name}: a counter write needs an index")
        index = _checked_index(info, msg.index.index)
        self._hooks.counter_set(info.id, index, msg.data.packet_count, msg.data.byte_count)

    def read(self, query: p4r.CounterEntry, *, sync: bool = True) -> Iterator[p4r.Entity]:
        if sync:
            self._hooks.sync_counters()
        if query.counter_id:
            infos = [self._counter(query.counter_id)]
        else:
            infos = list(self.schema.counters.values())
        for info in infos:
            if query.HasField("index"):
                indexes: range | list[int] = [_checked_index(info, query.index.index)]
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


def _checked_index(info: CounterInfo, index: int) -> int:
    if not 0 <= index < info.size:
        raise P4Error(Code.OUT_OF_RANGE, f"{info.name}: index {index} out of 0..{info.size - 1}")
    return index
