"""agent/counters.py: what PortCounters holds per kind of target. A reason a target cannot
count is absent from drops_by_reason (listed at 0 when it can), a queue field it cannot report
is unset, and bmv2 is never asked for a register (PI refuses them)."""

from __future__ import annotations

import grpc
import pytest
from finsy import P4ClientError
from finsy.proto import p4d, p4r

from agent.codec import Codec, Encoded
from agent.counters import (
    ALL_REASONS,
    CAPABILITIES,
    MatrixRow,
    PortCounterReader,
    QueueSource,
    capabilities,
    matrix_counts,
    matrix_requests,
)
from agent.main import TARGET_KINDS
from agent.p4client import P4Target, UpdateError
from railfabric.fabric_counters import (
    PIPELINE_REASONS,
    QUEUE_DEPTH_LEVELS,
    DropReason,
    drop_reason_index,
)
from railfabric.p4bytes import encode
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

SOFTSWITCH = control_pb2.TARGET_KIND_SOFTSWITCH
BMV2 = control_pb2.TARGET_KIND_BMV2
TM_REASONS = {
    DropReason.QUEUE_FULL,
    DropReason.HEADROOM_FULL,
    DropReason.PFC_WATCHDOG,
    DropReason.KERNEL,
}


def test_one_row_per_target_kind_the_agent_accepts() -> None:
    assert set(CAPABILITIES) == set(TARGET_KINDS.values())
    soft = capabilities(SOFTSWITCH)
    assert set(soft.drop_reasons) == set(DropReason) - {DropReason.UNSPECIFIED}
    assert (soft.queue, soft.queue_unit) == (QueueSource.REGISTERS, "bytes")
    bmv2 = capabilities(BMV2)
    assert bmv2.drop_reasons == PIPELINE_REASONS
    assert not TM_REASONS & set(bmv2.drop_reasons)
    assert DropReason.BAD_EGRESS_PORT not in bmv2.drop_reasons  # dropped at transmit by bmv2
    assert (bmv2.queue, bmv2.queue_unit) == (QueueSource.HISTOGRAM, "packets")
    with pytest.raises(ValueError, match="no counter capabilities for target kind 0"):
        capabilities(control_pb2.TARGET_KIND_UNSPECIFIED)


def counter(codec: Codec, counter_id: int, index: int, packets: int) -> p4r.Entity:
    return p4r.Entity(
        counter_entry=p4r.CounterEntry(
            counter_id=counter_id,
            index=p4r.Index(index=index),
            data=p4r.CounterData(packet_count=packets, byte_count=packets * 100),
        )
    )


def register(register_id: int, index: int, value: int) -> p4r.Entity:
    return p4r.Entity(
        register_entry=p4r.RegisterEntry(
            register_id=register_id,
            index=p4r.Index(index=index),
            data=p4d.P4Data(bitstring=encode(value)),
        )
    )


def histogram(codec: Codec, port: int, levels: dict[int, int]) -> list[p4r.Entity]:
    return [
        counter(codec, codec.queue_histogram_id, port * QUEUE_DEPTH_LEVELS + level, n)
        for level, n in ((lv, levels.get(lv, 0)) for lv in range(QUEUE_DEPTH_LEVELS))
    ]


def port_counters(fields: dict[int, dict[str, object]], port: int) -> control_pb2.PortCounters:
    return control_pb2.PortCounters(port=port, **fields.get(port, {}))  # type: ignore[arg-type]


def test_bmv2_is_asked_for_counters_only(codec: Codec) -> None:
    reader = PortCounterReader(codec, BMV2, [2, 1])
    requests = reader.requests()
    assert len(requests) == 2  # the counters, then the queue histogram on its own
    entities = [e for request in requests for e in request]
    assert not any(e.HasField("register_entry") for e in entities)
    # The switch's ports by index, never a whole counter array.
    port_cells = {
        (e.counter_entry.counter_id, e.counter_entry.index.index)
        for e in requests[0]
        if e.counter_entry.counter_id in codec.counters.values()
    }
    assert port_cells == {(c, p) for c in codec.counters.values() for p in (1, 2)}
    assert all(e.counter_entry.HasField("index") for e in entities)
    reasons = [
        e.counter_entry.index.index
        for e in requests[0]
        if e.counter_entry.counter_id == codec.drop_reason_counter_id
    ]
    assert reasons == [drop_reason_index(p, r) for p in (1, 2) for r in PIPELINE_REASONS]
    levels = {e.counter_entry.index.index for e in requests[1]}
    assert levels == {p * QUEUE_DEPTH_LEVELS + lv for p in (1, 2) for lv in range(64)}
    assert {e.counter_entry.counter_id for e in requests[1]} == {codec.queue_histogram_id}
    assert reader.resets() == []


def test_bmv2_reports_pipeline_reasons_and_the_watermark_in_packets(codec: Codec) -> None:
    reader = PortCounterReader(codec, BMV2, [1])
    drops = [
        counter(codec, codec.drop_reason_counter_id, drop_reason_index(1, r), n)
        for r, n in ((DropReason.NO_ROUTE, 5), (DropReason.TTL_EXPIRED, 2))
    ]
    drops += [  # zeros for the rest of the pipeline's reasons, as a target answers
        counter(codec, codec.drop_reason_counter_id, drop_reason_index(1, r), 0)
        for r in PIPELINE_REASONS
        if r not in (DropReason.NO_ROUTE, DropReason.TTL_EXPIRED)
    ]
    total = counter(codec, codec.counters["FabricIngress.drop_counter"], 1, 7)
    first = port_counters(reader.decode([total, *drops, *histogram(codec, 1, {0: 9, 12: 1})]), 1)
    assert first.drops == 7
    assert [(d.reason, d.packets) for d in first.drops_by_reason] == [
        (int(r), {DropReason.NO_ROUTE: 5, DropReason.TTL_EXPIRED: 2}.get(r, 0))
        for r in PIPELINE_REASONS
    ]
    # Not available on bmv2: absent, not 0.
    assert not {d.reason for d in first.drops_by_reason} & {int(r) for r in TM_REASONS}
    assert first.HasField("queue_watermark_packets") and first.queue_watermark_packets == 12
    for field in ("queue_depth_packets", "queue_depth_bytes", "queue_watermark_bytes"):
        assert not first.HasField(field), field
    # The next read: the highest level that counted since this one.
    second = reader.decode(histogram(codec, 1, {0: 30, 3: 4, 12: 1}))
    assert second[1]["queue_watermark_packets"] == 3
    idle = reader.decode(histogram(codec, 1, {0: 30, 3: 4, 12: 1}))
    assert idle[1]["queue_watermark_packets"] == 0  # nothing left: nothing queued
    # Counts below the previous ones: the counter was reset; measured from 0.
    reset = reader.decode(histogram(codec, 1, {0: 1, 63: 2}))
    assert reset[1]["queue_watermark_packets"] == 63


def test_softswitch_reports_every_reason_and_the_queue_in_bytes(codec: Codec) -> None:
    reader = PortCounterReader(codec, SOFTSWITCH, [3])
    [counters, queue] = reader.requests()
    reasons = [e for e in counters if e.counter_entry.counter_id == codec.drop_reason_counter_id]
    assert len(reasons) == len(ALL_REASONS)
    assert all(e.counter_entry.HasField("index") for e in counters)
    assert {e.register_entry.register_id for e in queue} == {
        codec.queue_depth_id,
        codec.queue_watermark_id,
    }
    assert all(e.register_entry.index.index == 3 for e in queue)
    answer = [
        counter(codec, codec.drop_reason_counter_id, drop_reason_index(3, r), 0)
        for r in ALL_REASONS
    ]
    answer[ALL_REASONS.index(DropReason.QUEUE_FULL)] = counter(
        codec, codec.drop_reason_counter_id, drop_reason_index(3, DropReason.QUEUE_FULL), 40
    )
    answer += [register(codec.queue_depth_id, 3, 1500), register(codec.queue_watermark_id, 3, 9000)]
    got = port_counters(reader.decode(answer), 3)
    listed = {d.reason: d.packets for d in got.drops_by_reason}
    assert listed == {int(r): 40 if r is DropReason.QUEUE_FULL else 0 for r in ALL_REASONS}
    assert (got.queue_depth_bytes, got.queue_watermark_bytes) == (1500, 9000)
    assert not got.HasField("queue_depth_packets") and not got.HasField("queue_watermark_packets")
    [reset] = reader.resets()
    entry = reset.entity.register_entry
    assert (reset.type, entry.register_id, entry.index.index, entry.data.bitstring) == (
        p4r.Update.MODIFY,
        codec.queue_watermark_id,
        3,
        b"\x00",
    )


def test_targets_the_agent_knows_nothing_of_report_no_queue(codec: Codec) -> None:
    reader = PortCounterReader(codec, control_pb2.TARGET_KIND_OTHER, [1])
    [counters] = reader.requests()
    assert not any(e.HasField("register_entry") for e in counters)
    got = port_counters(reader.decode([]), 1)
    for field in ("queue_depth_bytes", "queue_watermark_packets"):
        assert not got.HasField(field)


class FakeTarget(P4Target):
    """P4Target whose read and write answer from here: the queue request is refused as PI
    refuses a register read."""

    def __init__(self, codec: Codec, refuse_queue: bool) -> None:
        super().__init__("127.0.0.1:1", 1, 1, codec)
        self.refuse_queue = refuse_queue
        self.writes: list[list[p4r.Update]] = []

    async def read(self, entities: list[p4r.Entity]) -> list[p4r.Entity]:
        if self.refuse_queue and any(e.HasField("register_entry") for e in entities):
            error = grpc.aio.AioRpcError(
                grpc.StatusCode.UNIMPLEMENTED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="Register reads are not supported yet",
                debug_error_string="",
            )
            raise P4ClientError(error, "read")
        return [e for e in entities if not e.HasField("register_entry")]

    async def write(self, updates: Encoded | list[p4r.Update]) -> list[UpdateError]:
        assert isinstance(updates, list)  # the counter poller writes messages
        self.writes.append(updates)
        return []


async def test_a_refused_queue_read_leaves_only_the_queue_fields_out(
    codec: Codec, caplog: pytest.LogCaptureFixture
) -> None:
    reader = PortCounterReader(codec, SOFTSWITCH, [1])
    target = FakeTarget(codec, refuse_queue=True)
    for _ in range(2):
        got = port_counters(await target.read_port_counters(reader), 1)
        assert len(got.drops_by_reason) == len(ALL_REASONS)
        assert not got.HasField("queue_depth_bytes")
    assert caplog.text.count("queue occupancy not read: Register reads are not supported") == 1
    ok = FakeTarget(codec, refuse_queue=False)
    await ok.read_port_counters(reader)
    assert [len(w) for w in ok.writes] == [1]  # the watermark reset, after the read


def test_the_matrix_is_read_by_class_and_reported_where_it_counted(codec: Codec) -> None:
    requests = matrix_requests(codec, [3, 1, 3])
    assert [(e.counter_entry.counter_id, e.counter_entry.index.index) for e in requests] == [
        (codec.matrix_counter_id, 1),
        (codec.matrix_counter_id, 3),
    ]

    def cell(counter_id: int, index: int, packets: int, octets: int) -> p4r.Entity:
        return p4r.Entity(
            counter_entry=p4r.CounterEntry(
                counter_id=counter_id,
                index=p4r.Index(index=index),
                data=p4r.CounterData(packet_count=packets, byte_count=octets),
            )
        )

    read = [
        cell(codec.matrix_counter_id, 3, 5, 500),
        cell(codec.matrix_counter_id, 1, 7, 700),
        cell(codec.counters[next(iter(codec.counters))], 4, 9, 900),  # another counter
    ]
    # Dense up to the highest class read; a class not read (0, 2) is 0.
    assert matrix_counts(codec, read) == MatrixRow([0, 7, 0, 5], [0, 700, 0, 500])
    assert matrix_counts(codec, []) == MatrixRow([], [])
