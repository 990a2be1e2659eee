"""drop_reason_counter and QueueDepth (the queue_depth / queue_watermark registers and the
queue_depth_histogram counter) in softswitch, read as a P4Runtime client reads them: each drop
counts once, under its reason, on the port fabric.p4 names (pipeline drops on the ingress
port; a full egress queue on the egress port), beside the total in drop_counter; queue
occupancy in bytes in the registers, in frames in the histogram."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import finsy as fy
import pytest
from finsy.proto import p4d, p4i, p4r
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import (
    DROP_REASONS_PER_PORT,
    QUEUE_DEPTH_LEVELS,
    DropReason,
    drop_reason_index,
)
from railfabric.p4bytes import decode_unchecked, encode
from softswitch.codes import Code, P4Error
from softswitch.dataplane import DataPlane
from softswitch.egress import TmEgress
from softswitch.pipeline import DropReason as ModelReason
from softswitch.pipeline import Pipeline
from softswitch.switch import Switch
from softswitch.tm import TrafficManager
from tests.p4_entries import member, route
from tests.unit.softswitch.conftest import Apply

pytestmark = pytest.mark.unit

FRAME_BYTES = 1000


def udp(dst: str = "10.0.0.9", ttl: int = 64, size: int = FRAME_BYTES) -> bytes:
    pkt = Ether(dst="02:00:00:00:00:fe", src="02:00:00:00:01:01") / IP(dst=dst, ttl=ttl) / UDP()
    return bytes(pkt) + bytes(size - len(pkt))


def next_to_member(member_id: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        p4.NEXT, match=fy.P4TableMatch(next_id=1), action=fy.P4IndirectAction(member_id=member_id)
    )


def counts(pipeline: Pipeline, counter: str, indexes: list[int]) -> list[int]:
    """Packet counts of `counter` at `indexes`, read over P4Runtime (one ReadRequest)."""
    counter_id = pipeline.schema.counter_ids[counter]
    found = pipeline.state.read_all(
        p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=counter_id, index=p4r.Index(index=i)))
        for i in indexes
    )
    return [e.counter_entry.data.packet_count for e in found]


def by_reason(pipeline: Pipeline, port: int) -> dict[DropReason, int]:
    """The port's non-zero drop reasons."""
    reasons = list(DropReason)
    got = counts(pipeline, p4.DROP_REASON_COUNTER, [drop_reason_index(port, r) for r in reasons])
    return {r: n for r, n in zip(reasons, got, strict=True) if n}


def register(pipeline: Pipeline, name: str, port: int) -> int:
    register_id = pipeline.schema.register_ids[name]
    [entity] = pipeline.state.read_all(
        [
            p4r.Entity(
                register_entry=p4r.RegisterEntry(
                    register_id=register_id, index=p4r.Index(index=port)
                )
            )
        ]
    )
    return decode_unchecked(entity.register_entry.data.bitstring)


# --- pipeline drops: the reason, on the ingress port -------------------------------------


def test_no_route_ttl_and_other_pipeline_drops_count_their_reason_on_the_ingress_port(
    apply: Apply, pipeline: Pipeline
) -> None:
    assert apply(+member(1, 2), +next_to_member(1), +route("10.0.0.0/8", 1)) == [Code.OK] * 3
    assert pipeline.process(udp(), 4) is not None  # forwarded: no drop counted anywhere
    for _ in range(3):
        assert pipeline.process(udp(dst="192.0.2.1"), 4) is None  # no route
    assert pipeline.process(udp(ttl=1), 4) is None
    assert pipeline.process(udp(ttl=0), 5) is None
    assert pipeline.process(bytes(udp())[:20], 5) is None  # truncated IPv4
    arp = bytes(Ether(dst="ff:ff:ff:ff:ff:ff", type=0x0806) / bytes(28))
    assert pipeline.process(arp, 5) is None
    assert by_reason(pipeline, 4) == {DropReason.NO_ROUTE: 3, DropReason.TTL_EXPIRED: 1}
    assert by_reason(pipeline, 5) == {
        DropReason.TTL_EXPIRED: 1,
        DropReason.MALFORMED: 1,
        DropReason.NOT_IPV4: 1,
    }
    assert by_reason(pipeline, 2) == {}  # the egress port of the forwarded frame
    # drop_counter is the total of the reasons, port by port.
    assert counts(pipeline, p4.DROP_COUNTER, [2, 4, 5]) == [0, 4, 3]


def test_next_miss_and_a_missing_egress_port_are_their_own_reasons(
    apply: Apply, pipeline: Pipeline
) -> None:
    assert apply(+route("10.0.0.0/8", 1)) == [Code.OK]
    assert pipeline.process(udp(), 1) is None  # next has no entry for next id 1
    assert apply(+member(1, 9), +next_to_member(1)) == [Code.OK] * 2
    assert pipeline.process(udp(), 1) is None  # port 9 is not one of the switch's
    assert by_reason(pipeline, 1) == {DropReason.NO_NEXT_HOP: 1, DropReason.BAD_EGRESS_PORT: 1}


def test_the_reasons_are_the_ones_the_p4_program_sets_at_each_drop_site() -> None:
    """softswitch's finer statistics map onto fabric.p4's reasons (define.p4)."""
    assert {r: r.code for r in ModelReason} == {
        ModelReason.MALFORMED: DropReason.MALFORMED,
        ModelReason.ACL: DropReason.ACL,
        ModelReason.TTL: DropReason.TTL_EXPIRED,
        ModelReason.NO_ROUTE: DropReason.NO_ROUTE,
        ModelReason.NEXT_MISS: DropReason.NO_NEXT_HOP,
        ModelReason.NO_LIVE_MEMBER: DropReason.NO_NEXT_HOP,
        ModelReason.NOT_IPV4: DropReason.NOT_IPV4,
        ModelReason.BAD_EGRESS_PORT: DropReason.BAD_EGRESS_PORT,
    }
    assert max(DropReason) < DROP_REASONS_PER_PORT


# --- registers over P4Runtime ---------------------------------------------------------------


def test_registers_read_and_modify(pipeline: Pipeline, fy_schema: fy.P4Schema) -> None:
    state = pipeline.state
    watermark = pipeline.schema.register_ids[p4.QUEUE_WATERMARK]
    pipeline.r_queue_watermark[3] = 7000
    assert register(pipeline, p4.QUEUE_WATERMARK, 3) == 7000
    everything = list(state.read(p4r.Entity(register_entry=p4r.RegisterEntry())))
    assert len(everything) == sum(r.size for r in pipeline.schema.registers.values())
    one = p4r.Entity(register_entry=p4r.RegisterEntry(register_id=watermark))
    assert len(list(state.read(one))) == 512

    def write(utype: p4r.Update.Type.ValueType, index: int | None, value: bytes) -> None:
        entry = p4r.RegisterEntry(register_id=watermark, data=p4d.P4Data(bitstring=value))
        if index is not None:
            entry.index.index = index
        state.apply(p4r.Update(type=utype, entity=p4r.Entity(register_entry=entry)))

    write(p4r.Update.MODIFY, 3, encode(0))
    assert register(pipeline, p4.QUEUE_WATERMARK, 3) == 0
    write(p4r.Update.MODIFY, None, b"\x00\x00\x00\x05")  # every index, padded value
    assert {pipeline.r_queue_watermark[i] for i in range(512)} == {5}
    # finsy's own encoding of a register write is accepted as well
    state.apply(fy.P4RegisterEntry(p4.QUEUE_WATERMARK, index=1, data=9).encode_update(fy_schema))
    assert pipeline.r_queue_watermark[1] == 9
    for utype, index, value, code, message in (
        (p4r.Update.INSERT, 3, encode(0), Code.INVALID_ARGUMENT, "can only be modified"),
        (p4r.Update.MODIFY, 512, encode(0), Code.OUT_OF_RANGE, "index 512 out of 0..511"),
        (p4r.Update.MODIFY, 3, encode(1 << 32), Code.INVALID_ARGUMENT, "does not fit in 32"),
    ):
        with pytest.raises(P4Error) as err:
            write(utype, index, value)
        assert (err.value.code, message in err.value.message) == (code, True), err.value.message
    with pytest.raises(P4Error) as err:
        list(state.read(p4r.Entity(register_entry=p4r.RegisterEntry(register_id=12345))))
    assert err.value.code == Code.NOT_FOUND


# --- the traffic manager's drops and queue occupancy, through TmEgress ---------------------


class FakePort:
    """A data-plane port that records what it sends (`fail`: the kernel refuses)."""

    def __init__(self, number: int, fail: bool = False) -> None:
        self.number = number
        self.ifname = "lo"  # TmEgress reads the port's MAC from /sys/class/net/IF/address
        self.fail = fail
        self.sent: list[bytes] = []
        self.tx_errors = 0
        self.rx_dropped = 0

    def send(self, frame: bytes | bytearray) -> bool:
        if self.fail:
            self.tx_errors += 1
            return False
        self.sent.append(bytes(frame))
        return True

    def lost_frames(self) -> int:
        return self.tx_errors + self.rx_dropped


class FakeDataPlane:
    def __init__(self, ports: dict[int, FakePort]) -> None:
        self.ports = ports


@dataclasses.dataclass
class Rig:
    switch: Switch
    egress: TmEgress
    ports: dict[int, FakePort]

    @property
    def pipeline(self) -> Pipeline:
        assert self.switch.pipeline is not None
        return self.switch.pipeline


def rig(p4info: p4i.P4Info, fy_schema: fy.P4Schema, *, fail_port_2: bool = False) -> Rig:
    """Ports 1..3, frames to 10/8 leaving on port 2, whose buffer holds five frames."""
    ports = {n: FakePort(n, fail=fail_port_2 and n == 2) for n in (1, 2, 3)}
    switch = Switch(1, {n: "lo" for n in ports})
    egress = TmEgress(
        switch, cast(DataPlane, FakeDataPlane(ports)), asyncio.get_running_loop(), None
    )
    switch.commit(p4r.ForwardingPipelineConfig(p4info=p4info))
    assert switch.pipeline is not None
    for entity in (member(1, 2), next_to_member(1), route("10.0.0.0/8", 1)):
        switch.pipeline.state.apply((+entity).encode_update(fy_schema))
    egress.tm.set_buffer_limit(2, 5 * FRAME_BYTES)
    return Rig(switch, egress, ports)


async def test_a_tail_drop_counts_queue_full_on_the_egress_port(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema
) -> None:
    r = rig(p4info, fy_schema)
    for _ in range(8):  # one burst, before the loop lets the queue drain
        r.switch.receive(udp(), 1)
    assert by_reason(r.pipeline, 2) == {DropReason.QUEUE_FULL: 3}
    assert by_reason(r.pipeline, 1) == {}  # the ingress port dropped nothing
    assert counts(r.pipeline, p4.DROP_COUNTER, [1, 2]) == [0, 3]
    drop_id = r.pipeline.schema.counter_ids[p4.DROP_COUNTER]
    assert r.pipeline.counter_get(drop_id, 2) == (3, 3 * FRAME_BYTES)
    # Five frames wait: the depth now, and the watermark, in bytes over the port's classes.
    assert register(r.pipeline, p4.QUEUE_DEPTH, 2) == 5 * FRAME_BYTES
    assert register(r.pipeline, p4.QUEUE_WATERMARK, 2) == 5 * FRAME_BYTES
    levels = [2 * QUEUE_DEPTH_LEVELS + level for level in range(QUEUE_DEPTH_LEVELS)]
    assert sum(counts(r.pipeline, p4.QUEUE_DEPTH_HISTOGRAM, levels)) == 0  # none left yet

    await asyncio.sleep(0)  # the flush: all five leave at once (no port rate)
    assert len(r.ports[2].sent) == 5
    assert register(r.pipeline, p4.QUEUE_DEPTH, 2) == 0
    assert register(r.pipeline, p4.QUEUE_WATERMARK, 2) == 5 * FRAME_BYTES  # kept until reset
    # Each departure left 4, 3, 2, 1, 0 frames of its class behind it.
    assert counts(r.pipeline, p4.QUEUE_DEPTH_HISTOGRAM, levels)[:6] == [1, 1, 1, 1, 1, 0]

    # The agent's reset: 0, then the highest since (nothing queued: 0).
    watermark = r.pipeline.schema.register_ids[p4.QUEUE_WATERMARK]
    reset = p4r.RegisterEntry(
        register_id=watermark, index=p4r.Index(index=2), data=p4d.P4Data(bitstring=encode(0))
    )
    r.pipeline.state.apply(
        p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(register_entry=reset))
    )
    assert register(r.pipeline, p4.QUEUE_WATERMARK, 2) == 0
    for _ in range(3):
        r.switch.receive(udp(), 1)
    await asyncio.sleep(0)
    assert register(r.pipeline, p4.QUEUE_WATERMARK, 2) == 2 * FRAME_BYTES  # left by the first
    assert by_reason(r.pipeline, 2) == {DropReason.QUEUE_FULL: 3}  # no new drop
    r.egress.close()


async def test_kernel_losses_count_on_the_port_that_lost_them(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema
) -> None:
    r = rig(p4info, fy_schema, fail_port_2=True)
    r.ports[3].rx_dropped = 2  # the kernel dropped two frames on port 3's full receive queue
    r.switch.receive(udp(), 1)
    await asyncio.sleep(0)  # port 2 refuses the send
    assert by_reason(r.pipeline, 2) == {DropReason.KERNEL: 1}
    assert by_reason(r.pipeline, 3) == {DropReason.KERNEL: 2}
    assert counts(r.pipeline, p4.DROP_COUNTER, [2, 3]) == [1, 2]
    r.egress.close()


async def test_headroom_and_watchdog_drops_fold_into_their_reasons(
    p4info: p4i.P4Info, fy_schema: fy.P4Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TM counts a full headroom on the ingress port and watchdog drops on the egress
    port (tests/unit/softswitch/test_pfc.py); they reach drop_reason_counter there."""
    r = rig(p4info, fy_schema)
    real = r.egress.tm.counters()
    tallies = {
        1: dataclasses.replace(real[1], headroom_drops=4, headroom_drop_bytes=4000),
        2: dataclasses.replace(real[2], storm_drops=6),
        3: real[3],
    }
    monkeypatch.setattr(TrafficManager, "counters", lambda self: tallies)
    assert by_reason(r.pipeline, 1) == {DropReason.HEADROOM_FULL: 4}
    assert by_reason(r.pipeline, 2) == {DropReason.PFC_WATCHDOG: 6}
    drop_id = r.pipeline.schema.counter_ids[p4.DROP_COUNTER]
    assert r.pipeline.counter_get(drop_id, 1) == (4, 4000)
    assert by_reason(r.pipeline, 1) == {DropReason.HEADROOM_FULL: 4}  # folded once, not twice
    r.egress.close()


def test_the_traffic_manager_counts_departures_by_the_frames_they_leave() -> None:
    tm = TrafficManager(seed=0)
    tm.add_port(1, mac=bytes(6))
    for _ in range(QUEUE_DEPTH_LEVELS + 10):
        tm.enqueue(0, 1, 3, bytes(100), None)
    tm.enqueue(0, 1, 0, bytes(60), None)  # another class: not behind class 3's frames
    sent = tm.next_departure(0)
    assert len(sent) == QUEUE_DEPTH_LEVELS + 11
    depths = tm.port_counters(1).dequeue_depths
    assert len(depths) == QUEUE_DEPTH_LEVELS
    assert depths[0] == 2  # the last of class 3 and the class 0 frame
    assert depths[1:-1] == (1,) * (QUEUE_DEPTH_LEVELS - 2)
    assert depths[-1] == 11  # left 63 .. 73 frames behind
    # The most bytes left queued on the port, over both classes: the class 0 frame, served
    # first, left every class 3 frame.
    assert tm.take_peak_bytes(1) == (QUEUE_DEPTH_LEVELS + 10) * 100
    assert tm.take_peak_bytes(1) == 0
