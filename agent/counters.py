"""What the agent reads into `PortCounters`, per kind of target. Pure: entities to ask for,
entities in, PortCounters fields out; `agent/p4client.py` does the reading.

fabric.p4 counts every port's frames and drops the same way on every target (the port-indexed
counters of `agent/codec.py` PORT_COUNTERS). What differs is what a target can see and what
P4Runtime can read there (railfabric/fabric_counters.py, p4/README.md, docs/bmv2.md):

- softswitch: drops_by_reason has every reason: the pipeline's, and the losses of its traffic
  manager and host, which it counts into drop_reason_counter itself. `queue_depth_bytes` and
  `queue_watermark_bytes` come from the registers FabricEgress.queue_depth and
  queue_watermark; the agent writes 0 into the watermark after each read.
- bmv2: the program's own reasons (`PIPELINE_REASONS`): bmv2 drops a full queue's frames, and
  a frame for a port it does not have, where no P4 code runs. `queue_watermark_packets` is the
  highest level of queue_depth_histogram that counted since the previous read (exact to 62
  frames; 63 means 63 or more). No depth now: PI answers register reads UNIMPLEMENTED, and a
  counter only adds.
- tofino, other: the program's own reasons; no queue field the agent knows they can report.

A reason the target cannot count is left out of drops_by_reason and a queue field it cannot
report is left unset: "not available on this target", never a 0 that would read as "none".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from finsy.proto import p4d, p4r

from agent.codec import PORT_COUNTERS, Codec
from railfabric.fabric_counters import (
    DROP_REASONS_PER_PORT,
    PIPELINE_REASONS,
    QUEUE_DEPTH_LEVELS,
    DropReason,
    RoceKind,
    drop_reason_index,
    roce_cell,
    roce_index,
)
from railfabric.p4bytes import decode_unchecked, encode
from railfabric.v1 import control_pb2


class QueueSource(enum.Enum):
    """Where a target's queue occupancy can be read."""

    NONE = "none"
    REGISTERS = "registers"  # depth and watermark, exact; the agent clears the watermark
    HISTOGRAM = "histogram"  # watermark only: the highest level that counted since last read


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one kind of target reports beyond the port counters."""

    drop_reasons: tuple[DropReason, ...]  # listed in drops_by_reason, even at 0
    queue: QueueSource
    queue_unit: str = ""  # "bytes" or "packets": the suffix of the PortCounters queue fields


ALL_REASONS = tuple(r for r in DropReason if r is not DropReason.UNSPECIFIED)

CAPABILITIES: dict[int, Capabilities] = {
    control_pb2.TARGET_KIND_SOFTSWITCH: Capabilities(ALL_REASONS, QueueSource.REGISTERS, "bytes"),
    control_pb2.TARGET_KIND_BMV2: Capabilities(PIPELINE_REASONS, QueueSource.HISTOGRAM, "packets"),
    control_pb2.TARGET_KIND_TOFINO: Capabilities(PIPELINE_REASONS, QueueSource.NONE),
    control_pb2.TARGET_KIND_OTHER: Capabilities(PIPELINE_REASONS, QueueSource.NONE),
}


def capabilities(target_kind: int) -> Capabilities:
    try:
        return CAPABILITIES[target_kind]
    except KeyError:
        raise ValueError(f"no counter capabilities for target kind {target_kind}") from None


class PortCounterReader:
    """The counter reads of one agent: what to ask its target for (`requests`), the
    PortCounters fields of the answer (`decode`), and the writes a read asks for afterwards
    (`resets`). Keeps the previous histogram read, which the next watermark is measured from
    (the first read's watermark is since the target's counters started)."""

    def __init__(self, codec: Codec, target_kind: int, ports: Iterable[int]) -> None:
        self.codec = codec
        self.caps = capabilities(target_kind)
        self.ports = tuple(sorted(set(ports)))
        self._previous: dict[int, tuple[int, ...]] = {}  # port -> histogram levels
        unit = self.caps.queue_unit
        self._depth_field = f"queue_depth_{unit}"
        self._watermark_field = f"queue_watermark_{unit}"

    def requests(self) -> list[list[p4r.Entity]]:
        """The ReadRequests to send, in order: the counters every target serves, then the
        queue occupancy (its own request: a target that refuses it loses only that)."""
        codec = self.codec
        # The switch's own ports by index, not whole arrays: a counter has PORT_COUNTER_SIZE
        # cells, and a wildcard read of every one each period was most of an idle lab
        # switch's CPU (8 counters x 512 cells, built and parsed in Python on softswitch).
        counters = [
            _counter(counter_id, port)
            for counter_id in codec.counters.values()
            for port in self.ports
        ]
        counters += [
            _counter(codec.drop_reason_counter_id, drop_reason_index(port, reason))
            for port in self.ports
            for reason in self.caps.drop_reasons
        ]
        queue: list[p4r.Entity] = []
        if self.caps.queue is QueueSource.REGISTERS:
            queue = [
                p4r.Entity(
                    register_entry=p4r.RegisterEntry(
                        register_id=register_id, index=p4r.Index(index=port)
                    )
                )
                for register_id in (codec.queue_depth_id, codec.queue_watermark_id)
                for port in self.ports
            ]
        elif self.caps.queue is QueueSource.HISTOGRAM:
            queue = [
                _counter(codec.queue_histogram_id, port * QUEUE_DEPTH_LEVELS + level)
                for port in self.ports
                for level in range(QUEUE_DEPTH_LEVELS)
            ]
        return [counters, queue] if queue else [counters]

    def decode(self, entities: Iterable[p4r.Entity]) -> dict[int, dict[str, Any]]:
        """port -> PortCounters field -> value (drops_by_reason as DropCount messages)."""
        codec = self.codec
        ports = set(self.ports)
        out: dict[int, dict[str, Any]] = {}
        drops: dict[tuple[int, int], int] = {}
        levels: dict[int, list[int]] = {}
        for entity in entities:
            if entity.HasField("register_entry"):
                reg = entity.register_entry
                value = decode_unchecked(reg.data.bitstring)
                if reg.register_id == codec.queue_depth_id:
                    out.setdefault(reg.index.index, {})[self._depth_field] = value
                elif reg.register_id == codec.queue_watermark_id:
                    out.setdefault(reg.index.index, {})[self._watermark_field] = value
                continue
            entry = entity.counter_entry
            index = entry.index.index
            if entry.counter_id == codec.drop_reason_counter_id:
                port, reason = divmod(index, DROP_REASONS_PER_PORT)
                drops[port, reason] = entry.data.packet_count
                continue
            if entry.counter_id == codec.queue_histogram_id:
                port, level = divmod(index, QUEUE_DEPTH_LEVELS)
                if port in ports:
                    levels.setdefault(port, [0] * QUEUE_DEPTH_LEVELS)[level] = (
                        entry.data.packet_count
                    )
                continue
            name = codec.counter_names.get(entry.counter_id)
            if name is None:
                continue
            packets_field, bytes_field = PORT_COUNTERS[name]
            fields = out.setdefault(index, {})
            fields[packets_field] = entry.data.packet_count
            if bytes_field is not None:
                fields[bytes_field] = entry.data.byte_count
        for port in self.ports:
            by_reason = [
                control_pb2.DropCount(
                    reason=control_pb2.DropReason.ValueType(reason), packets=drops[port, reason]
                )
                for reason in self.caps.drop_reasons
                if (port, reason) in drops
            ]
            if by_reason:
                out.setdefault(port, {})["drops_by_reason"] = by_reason
        for port, counts in levels.items():
            out.setdefault(port, {})[self._watermark_field] = self._watermark(port, counts)
        return out

    def _watermark(self, port: int, counts: list[int]) -> int:
        """The highest level that counted departures since the previous read (0: none left a
        frame behind, or none left at all). Counts below the previous ones mean the counter
        was reset: measured from 0 then."""
        before = self._previous.get(port)
        now = tuple(counts)
        self._previous[port] = now
        if before is None or any(n < b for n, b in zip(now, before, strict=True)):
            before = (0,) * len(now)
        grew = [level for level, (n, b) in enumerate(zip(now, before, strict=True)) if n > b]
        return grew[-1] if grew else 0

    def resets(self) -> list[p4r.Update]:
        """What a read asks to write next: 0 into each port's queue_watermark register, so
        the next read gives the highest since this one."""
        if self.caps.queue is not QueueSource.REGISTERS:
            return []
        zero = p4d.P4Data(bitstring=encode(0))
        return [
            p4r.Update(
                type=p4r.Update.MODIFY,
                entity=p4r.Entity(
                    register_entry=p4r.RegisterEntry(
                        register_id=self.codec.queue_watermark_id,
                        index=p4r.Index(index=port),
                        data=zero,
                    )
                ),
            )
            for port in self.ports
        ]


def _counter(counter_id: int, index: int) -> p4r.Entity:
    return p4r.Entity(
        counter_entry=p4r.CounterEntry(counter_id=counter_id, index=p4r.Index(index=index))
    )


def matrix_requests(codec: Codec, classes: Iterable[int]) -> list[p4r.Entity]:
    """The reads of a ToR's traffic matrix cells: its installed classes by index (not the
    counter's 4,096 cells)."""
    return [_counter(codec.matrix_counter_id, c) for c in sorted(set(classes))]


class MatrixRow(NamedTuple):
    """A ToR's traffic matrix as read, dense by class (Counters.matrix_packets/_bytes)."""

    packets: list[int]
    octets: list[int]


def matrix_counts(codec: Codec, entities: Iterable[p4r.Entity]) -> MatrixRow:
    """The cells read back, by class up to the highest read (a class not read is 0)."""
    cells = {
        e.counter_entry.index.index: e.counter_entry.data
        for e in entities
        if e.HasField("counter_entry") and e.counter_entry.counter_id == codec.matrix_counter_id
    }
    size = max(cells, default=-1) + 1
    packets, octets = [0] * size, [0] * size
    for c, data in cells.items():
        packets[c], octets[c] = data.packet_count, data.byte_count
    return MatrixRow(packets, octets)


def roce_requests(
    codec: Codec, ports: Iterable[int], traffic_classes: Iterable[int]
) -> list[p4r.Entity]:
    """The reads of the RoCEv2 counts of `ports` in the classes the switch's QoS map uses (a
    port has 64 cells, 8 classes x 8 kinds; reading them all would triple a period's read)."""
    classes = sorted(set(traffic_classes))
    return [
        _counter(codec.roce_counter_id, roce_index(port, tc, kind))
        for port in sorted(set(ports))
        for tc in classes
        for kind in RoceKind
    ]


@dataclass(frozen=True, slots=True)
class RoceCounts:
    """Counters.roce_cells / roce_packets: the roce_counter cells that counted, in order."""

    cells: list[int]
    packets: list[int]


def roce_counts(codec: Codec, entities: Iterable[p4r.Entity]) -> RoceCounts:
    """The (class, kind) cells read back that counted something, by cell."""
    found: dict[int, int] = {}
    for e in entities:
        if not e.HasField("counter_entry"):
            continue
        entry = e.counter_entry
        if entry.counter_id != codec.roce_counter_id or not entry.data.packet_count:
            continue
        if roce_cell(entry.index.index)[2] not in RoceKind.__members__.values():
            continue  # a cell the program never counts into
        found[entry.index.index] = entry.data.packet_count
    cells = sorted(found)
    return RoceCounts(cells, [found[c] for c in cells])
