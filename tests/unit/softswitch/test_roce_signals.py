"""RoceSignals in softswitch: RoCEv2 packets counted by ingress port, traffic class and kind
(roce_counter), NAKs sampled at a bounded rate on nak_sampling's ports and cloned through the
clone session to the CPU port, and the clone session entries themselves (P4Runtime §9.5)."""

from __future__ import annotations

import finsy as fy
import pytest
from finsy.proto import p4r
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import ecmp
from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import (
    NAK_SAMPLE_SESSION,
    ROCE_CELLS_PER_PORT,
    ROCE_KINDS,
    RoceKind,
)
from softswitch.p4state import Code
from softswitch.pipeline import DropReason, Pipeline
from softswitch.switch import Switch
from tests.unit.softswitch.conftest import CPU_PORT, DATA_PORTS, Apply

pytestmark = pytest.mark.unit

HOST_PORT, UPLINK = DATA_PORTS[0], DATA_PORTS[1]
ROCE_DSCP, ROCE_TC = 26, 3


def _roce(opcode: int, syndrome: int | None = None, *, dscp: int = ROCE_DSCP) -> bytes:
    """A RoCEv2 frame from 10.0.0.2 (the responder) to 10.0.0.1, as a NIC sends it."""
    pkt = (
        Ether()
        / IP(src="10.0.0.2", dst="10.0.0.1", tos=dscp << 2)
        / UDP(sport=49152, dport=ecmp.ROCEV2_UDP_PORT)
        / BTH(opcode=opcode, dqpn=0x000123, psn=77)
    )
    if syndrome is not None:
        pkt = pkt / AETH(syndrome=syndrome, msn=1)
    elif opcode == 0x81:
        pkt = pkt / CNPPadding()
    return bytes(pkt)


DATA = _roce(0x04)  # RC SEND only
ACK = _roce(0x11, 0x1F)
NAK_PSN = _roce(0x11, 0x60)
NAK_RNR = _roce(0x11, 0x25)
NAK_INVALID = _roce(0x11, 0x61)
CNP = _roce(0x81)


def _classify_roce(apply: Apply) -> None:
    entry = fy.P4TableEntry(
        p4.QOS_CLASSIFY,
        match=fy.P4TableMatch(dscp=ROCE_DSCP),
        action=fy.P4TableAction(p4.SET_TRAFFIC_CLASS, tc=ROCE_TC),
    )
    assert apply(+entry) == [Code.OK]


def _roce_counts(pipeline: Pipeline) -> dict[tuple[int, int, RoceKind], int]:
    """roce_counter's non-zero cells read back over P4Runtime, as (port, class, kind)."""
    counter_id = pipeline.schema.counter_ids[p4.ROCE_COUNTER]
    query = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=counter_id))
    out = {}
    for e in pipeline.state.read(query):
        if e.counter_entry.data.packet_count:
            port, cell = divmod(e.counter_entry.index.index, ROCE_CELLS_PER_PORT)
            tc, kind = divmod(cell, ROCE_KINDS)
            out[port, tc, RoceKind(kind)] = e.counter_entry.data.packet_count
    return out


def _sampling(port: int, interval_us: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        p4.NAK_SAMPLING,
        match=fy.P4TableMatch(ig_port=port),
        action=fy.P4TableAction(p4.SAMPLE_NAKS, interval_us=interval_us),
    )


def _session(*ports: int, session_id: int = NAK_SAMPLE_SESSION) -> fy.P4CloneSessionEntry:
    return fy.P4CloneSessionEntry(session_id, replicas=[(port, 1) for port in ports])


def test_every_kind_is_counted_by_port_and_class(apply: Apply, pipeline: Pipeline) -> None:
    _classify_roce(apply)
    for frame in (DATA, DATA, ACK, NAK_PSN, NAK_RNR, NAK_INVALID, CNP):
        pipeline.process(frame, HOST_PORT)
    pipeline.process(_roce(0x04, dscp=0), UPLINK)  # best effort: class 0
    pipeline.process(bytes(Ether() / IP() / UDP(dport=53)), HOST_PORT)  # not RoCEv2
    assert _roce_counts(pipeline) == {
        (HOST_PORT, ROCE_TC, RoceKind.DATA): 2,
        (HOST_PORT, ROCE_TC, RoceKind.ACK): 1,
        (HOST_PORT, ROCE_TC, RoceKind.NAK_PSN_SEQUENCE): 1,
        (HOST_PORT, ROCE_TC, RoceKind.NAK_RNR): 1,
        (HOST_PORT, ROCE_TC, RoceKind.NAK_OTHER): 1,
        (HOST_PORT, ROCE_TC, RoceKind.CNP): 1,
        (UPLINK, 0, RoceKind.DATA): 1,
    }


def test_an_acknowledge_cut_before_its_aeth_is_malformed(pipeline: Pipeline) -> None:
    """The parser extracts the AETH of an Acknowledge: a frame that ends first is a parser
    error, which FabricIngress drops as malformed, as bmv2 does (PacketTooShort)."""
    cut = ACK[: 14 + 20 + 8 + 12]
    assert pipeline.process(cut, HOST_PORT) is None
    assert pipeline.drops[DropReason.MALFORMED] == 1
    assert _roce_counts(pipeline) == {}


def test_naks_are_sampled_once_per_interval_on_listed_ports(
    apply: Apply, pipeline: Pipeline
) -> None:
    now = [5_000_000]
    pipeline.clock_us = lambda: now[0]
    assert apply(+_sampling(HOST_PORT, 1000), +_session(CPU_PORT)) == [Code.OK] * 2

    def sampled(frame: bytes, port: int = HOST_PORT) -> list[tuple[int, bytes]]:
        pipeline.process(frame, port)
        out = [(c.port, bytes(c.frame)) for c in pipeline.clones]
        pipeline.clones.clear()
        return out

    assert sampled(NAK_PSN) == [(CPU_PORT, NAK_PSN)]  # the frame as it arrived
    now[0] += 999
    assert sampled(NAK_PSN) == []  # within the interval
    assert sampled(NAK_RNR, UPLINK) == []  # not a sampled port
    now[0] += 1
    assert sampled(NAK_RNR) == [(CPU_PORT, NAK_RNR)]
    now[0] += 5000
    for frame in (DATA, ACK, CNP):
        assert sampled(frame) == []  # only NAKs
    assert sampled(NAK_INVALID) == [(CPU_PORT, NAK_INVALID)]
    # The clock wraps at 2**32 us as the program's 32-bit register does.
    now[0] = 2**32 + 10
    assert sampled(NAK_PSN) == [(CPU_PORT, NAK_PSN)]
    # Without the clone session nothing is copied (bmv2 clones only to a configured one).
    now[0] += 10_000
    assert apply(-_session(CPU_PORT)) == [Code.OK]
    assert sampled(NAK_PSN) == []
    # Nor after the port's entry is deleted.
    assert apply(+_session(CPU_PORT), -_sampling(HOST_PORT, 1000)) == [Code.OK] * 2
    now[0] += 10_000
    assert sampled(NAK_PSN) == []


def test_a_sampled_nak_reaches_the_agent_even_when_the_nak_itself_is_dropped(
    p4info: object,
) -> None:
    switch = Switch(1, {port: f"p{port}" for port in DATA_PORTS}, CPU_PORT)
    config = p4r.ForwardingPipelineConfig(p4info=p4info)  # type: ignore[arg-type]
    switch.commit(config)
    pipeline = switch.pipeline
    assert pipeline is not None
    schema = fy.P4Schema(p4info)  # type: ignore[arg-type]
    for entity in (_sampling(HOST_PORT, 1), _session(CPU_PORT)):
        pipeline.state.apply((+entity).encode_update(schema))
    packet_ins: list[tuple[bytes, int]] = []
    sent: list[int] = []
    switch.packet_in = lambda frame, port: packet_ins.append((frame, port))
    switch.transmit = lambda fwd, in_port: sent.append(fwd.port)
    switch.receive(NAK_PSN, HOST_PORT)
    assert packet_ins == [(NAK_PSN, HOST_PORT)]
    assert not pipeline.clones
    assert sent == []  # no route here: the NAK itself is dropped after the copy


@pytest.mark.parametrize(
    ("update", "code"),
    [
        (+fy.P4CloneSessionEntry(0, replicas=[CPU_PORT]), Code.OUT_OF_RANGE),
        (+fy.P4CloneSessionEntry(1, replicas=[99]), Code.INVALID_ARGUMENT),
        (+fy.P4CloneSessionEntry(1, replicas=[1, 1]), Code.INVALID_ARGUMENT),
        (+fy.P4CloneSessionEntry(1, class_of_service=2, replicas=[1]), Code.UNIMPLEMENTED),
        (~fy.P4CloneSessionEntry(1, replicas=[1]), Code.NOT_FOUND),
        (-fy.P4CloneSessionEntry(1), Code.NOT_FOUND),
        (+fy.P4MulticastGroupEntry(1, replicas=[1]), Code.UNIMPLEMENTED),
    ],
)
def test_clone_session_writes_are_checked(apply: Apply, update: object, code: Code) -> None:
    assert apply(update) == [code]


def test_clone_sessions_read_back_as_written(apply: Apply, pipeline: Pipeline) -> None:
    assert apply(+_session(CPU_PORT), +_session(2, 3, session_id=7)) == [Code.OK] * 2
    assert apply(+_session(CPU_PORT)) == [Code.ALREADY_EXISTS]
    assert apply(~_session(4, session_id=7)) == [Code.OK]
    query = p4r.Entity(
        packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
            clone_session_entry=p4r.CloneSessionEntry()
        )
    )
    got = {
        e.packet_replication_engine_entry.clone_session_entry.session_id: [
            (r.egress_port, r.instance)
            for r in e.packet_replication_engine_entry.clone_session_entry.replicas
        ]
        for e in pipeline.state.read(query)
    }
    assert got == {NAK_SAMPLE_SESSION: [(CPU_PORT, 1)], 7: [(4, 1)]}
