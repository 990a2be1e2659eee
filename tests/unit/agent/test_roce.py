"""The agent's side of RoCEv2 signals: the NAK sampler's entries and clone session from the
desired state, their wire shapes, the RoCE counter cells it reads, and the NAKs it parses out
of packet-ins (frames built by scapy, as a NIC sends them)."""

from __future__ import annotations

import ipaddress

import pytest
from finsy.proto import p4r
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from agent.codec import Codec
from agent.counters import RoceCounts, roce_counts, roce_requests
from agent.roce import MAX_NAK_SAMPLES, NakSamples, parse_nak
from agent.translate import CPU_PORT, CloneSessionEntry, NakSamplingEntry, Pipeline, diff, translate
from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import NAK_SAMPLE_SESSION, RoceKind, roce_index
from railfabric.p4bytes import decode_unchecked
from railfabric.v1 import control_pb2
from tests.unit.agent.samples import tor_state, with_nak_sampling

pytestmark = pytest.mark.unit


def test_nak_sampling_becomes_port_entries_and_the_cpu_clone_session() -> None:
    pipeline, problems = translate(with_nak_sampling(tor_state(), 2500))
    assert problems == []
    mine = {k: e for k, e in pipeline.entries.items() if k[0] in ("nak_sampling", "clone_session")}
    assert mine == {
        ("nak_sampling", 3): NakSamplingEntry(3, 2500),
        ("clone_session", NAK_SAMPLE_SESSION): CloneSessionEntry(NAK_SAMPLE_SESSION, (CPU_PORT,)),
    }
    # Without sampling (a spine, or sampling off): no entry and no session.
    assert not any(k[0] in mine for k in translate(tor_state())[0].entries)
    # Both ride in the first write batch: no entry references them.
    batches = diff(Pipeline({}), pipeline)
    assert {u.entry.key for u in batches[0]} >= set(mine)


def test_bad_sampling_is_a_named_problem_and_the_rest_is_kept() -> None:
    bad = with_nak_sampling(tor_state(), 0)
    assert [p.object for p in translate(bad)[1]] == ["nak sampling"]
    assert not any(k[0] == "clone_session" for k in translate(bad)[0].entries)
    cpu = with_nak_sampling(tor_state())
    cpu.nak_sampling.ports.append(CPU_PORT)
    pipeline, problems = translate(cpu)
    assert [p.object for p in problems] == [f"nak sampling port {CPU_PORT}"]
    assert ("nak_sampling", 3) in pipeline.entries


def test_sampler_entries_round_trip_with_the_contract_shapes(codec: Codec) -> None:
    pipeline, _ = translate(with_nak_sampling(tor_state(), 2500))
    port = pipeline.entries[("nak_sampling", 3)]
    session = pipeline.entries[("clone_session", NAK_SAMPLE_SESSION)]
    for entry in (port, session):
        wire = p4r.Entity()
        wire.ParseFromString(codec.encode(entry).SerializeToString())
        assert codec.decode(wire) == entry
    te = codec.encode(port).table_entry
    assert te.table_id == codec.tables[p4.NAK_SAMPLING].id
    assert te.action.action.action_id == codec.actions[p4.SAMPLE_NAKS].id
    assert decode_unchecked(te.action.action.params[0].value) == 2500
    pre = codec.encode(session).packet_replication_engine_entry.clone_session_entry
    assert pre.session_id == NAK_SAMPLE_SESSION
    # The replica names its port in egress_port, the field PI reads.
    assert [(r.WhichOneof("port_kind"), r.egress_port) for r in pre.replicas] == [
        ("egress_port", CPU_PORT)
    ]
    # A P4Runtime 1.4 target answering with `port` bytes reads back the same.
    bytes_port = p4r.Entity(
        packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
            clone_session_entry=p4r.CloneSessionEntry(
                session_id=NAK_SAMPLE_SESSION, replicas=[p4r.Replica(port=b"\xff", instance=1)]
            )
        )
    )
    assert codec.decode(bytes_port) == session


def test_roce_cells_are_read_for_the_ports_and_classes_asked(codec: Codec) -> None:
    requests = roce_requests(codec, [2, 1], [3, 0, 3])
    got = [(e.counter_entry.counter_id, e.counter_entry.index.index) for e in requests]
    assert got == [
        (codec.roce_counter_id, roce_index(port, tc, kind))
        for port in (1, 2)
        for tc in (0, 3)
        for kind in RoceKind
    ]

    def cell(index: int, packets: int, counter_id: int = codec.roce_counter_id) -> p4r.Entity:
        return p4r.Entity(
            counter_entry=p4r.CounterEntry(
                counter_id=counter_id,
                index=p4r.Index(index=index),
                data=p4r.CounterData(packet_count=packets),
            )
        )

    read = [
        cell(roce_index(2, 3, RoceKind.NAK_PSN_SEQUENCE), 4),
        cell(roce_index(2, 3, RoceKind.DATA), 900),
        cell(roce_index(1, 0, RoceKind.CNP), 0),  # counted nothing: not reported
        cell(roce_index(1, 3, RoceKind.CNP), 2, codec.matrix_counter_id),  # another counter
    ]
    # Counters.roce_cells / roce_packets: by cell, in order.
    assert roce_counts(codec, read) == RoceCounts(
        [roce_index(2, 3, RoceKind.DATA), roce_index(2, 3, RoceKind.NAK_PSN_SEQUENCE)], [900, 4]
    )


RESPONDER, REQUESTER = "10.0.0.9", "10.0.0.1"


def _ack(syndrome: int, opcode: int = 0x11) -> bytes:
    return bytes(
        Ether()
        / IP(src=RESPONDER, dst=REQUESTER, tos=26 << 2)
        / UDP(sport=50123, dport=4791)
        / BTH(opcode=opcode, dqpn=0x00ABCD, psn=4242)
        / AETH(syndrome=syndrome, msn=7)
    )


def test_a_sampled_nak_is_parsed_into_its_header_fields() -> None:
    sample = parse_nak(_ack(0x60), port=3, wall_ns=123)
    assert sample == control_pb2.NakSample(
        port=3,
        src_ipv4=int(ipaddress.IPv4Address(RESPONDER)),
        dst_ipv4=int(ipaddress.IPv4Address(REQUESTER)),
        udp_sport=50123,
        dst_qp=0x00ABCD,
        psn=4242,
        kind=control_pb2.ROCE_KIND_NAK_PSN_SEQUENCE,
        syndrome=0x60,
        dscp=26,
        wall_ns=123,
    )
    rnr = parse_nak(_ack(0x21), 3, 0)
    assert rnr is not None and rnr.kind == control_pb2.ROCE_KIND_NAK_RNR
    other = parse_nak(_ack(0x62), 3, 0)
    assert other is not None and other.kind == control_pb2.ROCE_KIND_NAK_OTHER


@pytest.mark.parametrize(
    "frame",
    [
        _ack(0x1F),  # an ACK
        _ack(0x60)[:50],  # cut short
        bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x81) / CNPPadding()),
        bytes(Ether() / IP() / UDP(dport=53) / bytes(20)),
        bytes(Ether(type=0x88CC) / bytes(60)),
    ],
)
def test_what_is_not_a_nak_is_not_a_sample(frame: bytes) -> None:
    assert parse_nak(frame, 3, 0) is None


def test_samples_are_bounded_per_report_and_the_rest_counted() -> None:
    samples = NakSamples()
    nak = parse_nak(_ack(0x60), 3, 0)
    assert nak is not None
    for _ in range(MAX_NAK_SAMPLES + 5):
        samples.add(nak)
    report = control_pb2.Counters()
    samples.take(report)
    assert (len(report.nak_samples), report.nak_samples_dropped) == (MAX_NAK_SAMPLES, 5)
    again = control_pb2.Counters()
    samples.take(again)
    assert (len(again.nak_samples), again.nak_samples_dropped) == (0, 0)
    # The totals the agent's metrics show keep counting across reports.
    assert (samples.received, samples.dropped_total) == (MAX_NAK_SAMPLES + 5, 5)
