"""The pipeline's controls one by one where the end-to-end tests do not pin them: HashConfig
(the RoCEv2 QP folded into the hashed source port), the IPv4 checksum recomputed whatever the
frame arrived with, and remembered direct actions that still canonicalise padded values."""

from __future__ import annotations

import ipaddress

import finsy as fy
import pytest
from finsy.proto import p4r
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railfabric import ecmp, latency
from railfabric import fabric_p4 as p4
from railfabric.v1 import control_pb2
from softswitch.p4state import Code
from softswitch.pipeline import Pipeline
from tests.p4_entries import SELECTOR, member, route
from tests.unit.softswitch.conftest import CPU_PORT, DATA_PORTS, Apply

pytestmark = pytest.mark.unit

SRC, DST, SPORT = "192.0.2.1", "10.0.0.9", 49152
BROADCAST = 0xFFFF_FFFF_FFFF


def _group_of_all_ports(apply: Apply) -> None:
    members = [member(port, port) for port in DATA_PORTS]
    group = fy.P4ActionProfileGroup(
        SELECTOR, group_id=1, members=[fy.P4Member(port, weight=1) for port in DATA_PORTS]
    )
    nxt = fy.P4TableEntry(
        p4.NEXT, match=fy.P4TableMatch(next_id=1), action=fy.P4IndirectAction(group_id=1)
    )
    codes = apply(*(+m for m in members), +group, +nxt, +route("10.0.0.0/8", 1))
    assert codes == [Code.OK] * (len(members) + 3)


def _rocev2(qp: int) -> bytes:
    bth = bytes([0x04, 0, 0xFF, 0xFF, 0]) + qp.to_bytes(3, "big") + bytes(4)
    pkt = Ether() / IP(src=SRC, dst=DST) / UDP(sport=SPORT, dport=ecmp.ROCEV2_UDP_PORT) / bth
    return bytes(pkt)


def _expected_port(qp: int | None) -> int:
    sport = SPORT if qp is None else ecmp.fold_qp(SPORT, qp)
    flow = ecmp.flow_hash(
        int(ipaddress.IPv4Address(SRC)),
        int(ipaddress.IPv4Address(DST)),
        ecmp.UDP_PROTOCOL,
        sport,
        ecmp.ROCEV2_UDP_PORT,
    )
    return ecmp.choose_member(flow, DATA_PORTS)  # members created in port order


def test_hash_config_folds_the_qp_only_when_hash_qp_is_its_action(
    apply: Apply, pipeline: Pipeline
) -> None:
    _group_of_all_ports(apply)
    qps = range(0x100, 0x100 + 64)
    for qp in qps:  # NoAction (the initial default): the 5-tuple alone
        out = pipeline.process(_rocev2(qp), 1)
        assert out is not None and out.port == _expected_port(None)
    hash_qp = fy.P4TableEntry(
        p4.HASH_CONFIG, is_default_action=True, action=fy.P4TableAction(p4.HASH_QP)
    )
    assert apply(~hash_qp) == [Code.OK]
    ports = set()
    for qp in qps:
        out = pipeline.process(_rocev2(qp), 1)
        assert out is not None and out.port == _expected_port(qp)
        ports.add(out.port)
    assert len(ports) > 1  # the QPs of one 5-tuple spread
    reset = fy.P4TableEntry(p4.HASH_CONFIG, is_default_action=True)
    assert apply(~reset) == [Code.OK]
    out = pipeline.process(_rocev2(qps[0]), 1)
    assert out is not None and out.port == _expected_port(None)


def test_ipv4_checksum_is_recomputed_not_patched(apply: Apply, pipeline: Pipeline) -> None:
    _group_of_all_ports(apply)
    frame = bytearray(bytes(Ether() / IP(src=SRC, dst=DST, ttl=9) / UDP(sport=1, dport=2)))
    frame[24:26] = b"\x12\x34"  # a wrong checksum on arrival
    out = pipeline.process(bytes(frame), 1)
    assert out is not None
    left = IP(bytes(out.frame)[14:])
    assert left.ttl == 8
    del left.chksum
    assert IP(bytes(left)).chksum == int.from_bytes(bytes(out.frame)[24:26], "big")


def test_padded_action_values_are_canonical_every_time(
    apply: Apply, pipeline: Pipeline, fy_schema: fy.P4Schema
) -> None:
    table_id = pipeline.schema.table_ids[p4.ROUTING_V4]
    for prefix in ("10.0.0.0/8", "11.0.0.0/8", "12.0.0.0/8"):
        msg = (+route(prefix, 1)).encode_update(fy_schema)
        if prefix != "11.0.0.0/8":  # the middle one canonical: remembered, then reused
            msg.entity.table_entry.action.action.params[0].value = b"\x00\x00\x00\x01"
        assert apply(msg) == [Code.OK]
    query = p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id))
    values = [e.table_entry.action.action.params[0].value for e in pipeline.state.read(query)]
    assert values == [b"\x01"] * 3
    too_wide = (+route("13.0.0.0/8", 1)).encode_update(fy_schema)
    too_wide.entity.table_entry.action.action.params[0].value = b"\x01\x00\x00\x00\x01"
    assert apply(too_wide, too_wide) == [Code.INVALID_ARGUMENT] * 2


def test_pfc_watchdog_default_action_is_the_timing_the_traffic_manager_gets(
    apply: Apply, pipeline: Pipeline
) -> None:
    assert pipeline.pfc_watchdog_us is None  # NoAction: the traffic manager's own
    generation = pipeline.tm_generation
    timing = fy.P4TableEntry(
        p4.PFC_WATCHDOG,
        is_default_action=True,
        action=fy.P4TableAction(p4.SET_PFC_WATCHDOG, detect_us=1_000_000, restore_us=200_000),
    )
    assert apply(~timing) == [Code.OK]
    assert pipeline.pfc_watchdog_us == (1_000_000, 200_000)
    assert pipeline.tm_generation > generation  # egress.py re-reads it on the next frame
    assert apply(~fy.P4TableEntry(p4.PFC_WATCHDOG, is_default_action=True)) == [Code.OK]
    assert pipeline.pfc_watchdog_us is None


def _matrix_counts(pipeline: Pipeline) -> dict[int, tuple[int, int]]:
    """matrix_counter's non-zero cells, read back over P4Runtime as an agent reads them."""
    counter_id = pipeline.schema.counter_ids[p4.MATRIX_COUNTER]
    query = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=counter_id))
    return {
        e.counter_entry.index.index: (e.counter_entry.data.packet_count,
                                      e.counter_entry.data.byte_count)
        for e in pipeline.state.read(query)
        if e.counter_entry.data.packet_count
    }  # fmt: skip


def test_traffic_matrix_counts_host_port_arrivals_by_destination_class(
    apply: Apply, pipeline: Pipeline
) -> None:
    _group_of_all_ports(apply)
    host_port, uplink = DATA_PORTS[0], DATA_PORTS[1]

    def source() -> fy.P4TableEntry:
        return fy.P4TableEntry(
            p4.MATRIX_SOURCE,
            match=fy.P4TableMatch(ig_port=host_port),
            action=fy.P4TableAction(p4.NO_ACTION),
        )

    classes = {"10.0.0.0/16": 7, "10.0.9.0/24": 9}  # the longer prefix wins
    dests = [
        fy.P4TableEntry(
            p4.MATRIX_DEST,
            match=fy.P4TableMatch(ipv4_dst=prefix),
            action=fy.P4TableAction(p4.COUNT_MATRIX, dst_class=dst_class),
        )
        for prefix, dst_class in classes.items()
    ]
    assert apply(+source(), *(+d for d in dests)) == [Code.OK] * 3

    def frame(dst: str, size: int) -> bytes:
        return bytes(Ether() / IP(src=SRC, dst=dst) / UDP(sport=1, dport=2) / bytes(size))

    for _ in range(3):
        assert pipeline.process(frame("10.0.9.9", 100), host_port) is not None  # class 9
    assert pipeline.process(frame("10.0.1.1", 200), host_port) is not None  # class 7
    assert pipeline.process(frame("10.1.0.1", 300), host_port) is not None  # no class: a miss
    assert pipeline.process(frame("10.0.9.9", 100), uplink) is not None  # not a host port
    small, large = len(frame("10.0.9.9", 100)), len(frame("10.0.1.1", 200))
    assert _matrix_counts(pipeline) == {9: (3, 3 * small), 7: (1, large)}
    # Entries deleted: nothing more is counted.
    assert apply(-source()) == [Code.OK]
    assert pipeline.process(frame("10.0.1.1", 200), host_port) is not None
    assert _matrix_counts(pipeline) == {9: (3, 3 * small), 7: (1, large)}


def _acl(action: fy.P4TableAction, eth_type: int, ip_proto: int | None = None) -> fy.P4TableEntry:
    match = fy.P4TableMatch(eth_type=(eth_type, 0xFFFF))
    if ip_proto is not None:
        match["ip_proto"] = (ip_proto, 0xFF)
    return fy.P4TableEntry(p4.ACL, match=match, action=action, priority=100)


def test_acl_answers_probe_requests_in_the_data_plane(apply: Apply, pipeline: Pipeline) -> None:
    """answer_probe (acl.p4): a link or mesh probe request goes back out of its port with its
    addresses swapped and op a reply, the sender's payload and the IPv4 checksum kept; a
    reply, a request to a group MAC and a mesh request for another address go to the CPU."""
    _group_of_all_ports(apply)
    me = int(ipaddress.IPv4Address("10.255.0.2"))
    peer = int(ipaddress.IPv4Address("10.255.0.1"))
    assert apply(
        +_acl(fy.P4TableAction(p4.ANSWER_PROBE, address=0), latency.PROBE_ETH_TYPE),
        +_acl(
            fy.P4TableAction(p4.ANSWER_PROBE, address=me),
            latency.ETH_TYPE_IPV4,
            latency.PROBE_IP_PROTO,
        ),
    ) == [Code.OK, Code.OK]
    port, mine, theirs = DATA_PORTS[1], 0x02_00_00_00_00_02, 0x02_00_00_00_00_01
    request = latency.Probe(latency.OP_REQUEST, control_pb2.PROBE_KIND_LINK, 7, 42, 123_456)
    fwd = pipeline.process(latency.link_frame(mine, theirs, request), port)
    assert fwd is not None and fwd.port == port
    parsed = latency.parse_link(bytes(fwd.frame))
    assert parsed == (mine, request.reply(0, 0))
    assert bytes(fwd.frame)[:6] == theirs.to_bytes(6, "big")

    mesh = latency.mesh_frame(mine, theirs, peer, me, dscp=48, probe=request)
    fwd = pipeline.process(mesh, port)
    assert fwd is not None and fwd.port == port
    answer = latency.parse_mesh(bytes(fwd.frame))
    assert answer == latency.MeshFrame(me, peer, 48, mine, request.reply(0, 0))
    ip = IP(bytes(fwd.frame)[14:])
    del ip.chksum
    assert IP(bytes(ip)).chksum == IP(bytes(fwd.frame)[14:]).chksum

    to_cpu = [
        latency.link_frame(mine, theirs, request.reply(0, 0)),  # a reply: the agent's
        latency.link_frame(BROADCAST, theirs, request),  # a group address
        latency.mesh_frame(mine, theirs, peer, me + 1, dscp=48, probe=request),  # not mine
        latency.mesh_frame(mine, theirs, me, peer, dscp=48, probe=request.reply(0, 0)),
    ]
    for frame in to_cpu:
        fwd = pipeline.process(frame, port)
        assert fwd is not None and (fwd.port, bytes(fwd.frame)) == (CPU_PORT, frame)
    # A frame of the probe ethertype too short for probe_t is malformed, as p4c's parser says.
    assert pipeline.process(latency.link_frame(mine, theirs, request)[:18], port) is None
