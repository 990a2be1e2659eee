"""Collective-aware ECMP (`ecmp.hash: five_tuple_qp`): the intent option, what the controller
sends, and path prediction spreading one NIC pair's queue pairs over the uplinks while leaving
everything else hashed exactly as before."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from controller.export import desired_state
from controller.fabric import parse_ipv4
from controller.intent import IntentError, load_fabric_text, to_explicit
from controller.path import Flow, PathError, predict_path
from controller.routing import FabricRouting
from railfabric import ecmp
from railfabric.delta import DeltaError, diff_states
from railfabric.digest import state_digest
from railfabric.v1 import state_pb2
from tests.unit.controller.test_path import VECTOR_FABRIC, VECTORS

pytestmark = pytest.mark.unit

QP_FABRIC = VECTOR_FABRIC.replace("rails: 1\n", "rails: 1\necmp: {hash: five_tuple_qp}\n")
SRC, DST = parse_ipv4("10.1.0.1"), parse_ipv4("10.2.0.9")
SPORT = 49152  # one UDP source port for every QP: the case the option exists for


def uplinks_used(
    text: str, qps: range, dport: int = ecmp.ROCEV2_UDP_PORT
) -> collections.Counter[int]:
    routing = FabricRouting(load_fabric_text(text, "qp.yaml"))
    loads: collections.Counter[int] = collections.Counter()
    for qp in qps:
        path = predict_path(routing, Flow(SRC, DST, ecmp.UDP_PROTOCOL, SPORT, dport, qp))
        assert path.delivered_to == "dst/nic1", path.error
        loads[path.hops[0].egress_port] += 1
    return loads


def test_the_option_is_read_defaulted_and_refused_with_its_place() -> None:
    assert load_fabric_text(VECTOR_FABRIC, "v.yaml").ecmp_hash is ecmp.HashFields.FIVE_TUPLE
    fabric = load_fabric_text(QP_FABRIC, "qp.yaml")
    assert fabric.ecmp_hash is ecmp.HashFields.FIVE_TUPLE_QP
    assert to_explicit(fabric)["ecmp"] == {"hash": "five_tuple_qp"}
    with pytest.raises(IntentError) as err:
        load_fabric_text(QP_FABRIC.replace("five_tuple_qp", "qp_only"), "bad.yaml")
    assert "bad.yaml:3" in str(err.value) and "five_tuple_qp" in str(err.value)


def test_qps_of_one_nic_pair_spread_over_every_uplink_only_with_the_option() -> None:
    qps = range(1, 1025)
    without = uplinks_used(VECTOR_FABRIC, qps)
    assert len(without) == 1 and sum(without.values()) == 1024
    with_qp = uplinks_used(QP_FABRIC, qps)
    assert sorted(with_qp) == [2, 3, 4, 5] and sum(with_qp.values()) == 1024
    mean = 1024 / 4
    assert max(with_qp.values()) / mean < 1.25, with_qp


def test_qp_zero_and_traffic_that_is_not_rocev2_hash_as_the_five_tuple() -> None:
    """The bmv2 vectors hold with the option on: QP 0, and flows not to UDP 4791."""
    plain = FabricRouting(load_fabric_text(VECTOR_FABRIC, "v.yaml"))
    qp = FabricRouting(load_fabric_text(QP_FABRIC, "qp.yaml"))
    for v in VECTORS["flows"][:50]:
        flow = Flow(parse_ipv4(v["src"]), parse_ipv4(v["dst"]), v["proto"], v["sport"], v["dport"])
        assert predict_path(qp, dataclasses.replace(flow, dst_qp=0)).hash == v["crc32"]
        assert predict_path(qp, flow).hash == predict_path(plain, flow).hash == v["crc32"]
    tcp = Flow(SRC, DST, 6, SPORT, ecmp.ROCEV2_UDP_PORT, 77)
    udp_other = Flow(SRC, DST, ecmp.UDP_PROTOCOL, SPORT, 5000, 77)
    for flow in (tcp, udp_other):
        assert predict_path(qp, flow).hash == predict_path(plain, flow).hash


def test_the_fold_keeps_the_hash_input_layout() -> None:
    """The QP changes only the two source-port bytes of the 13 hashed."""
    sport = ecmp.hashed_sport(ecmp.HashFields.FIVE_TUPLE_QP, 17, 0x1234, 4791, 0xABCDEF)
    # 0x1234 ^ 0xCDEF (low 16 bits) ^ 0x00AB (top 8 bits)
    assert sport == 0xDF70
    base = ecmp.hash_input(SRC, DST, 17, 0x1234, 4791)
    folded = ecmp.hash_input(SRC, DST, 17, sport, 4791)
    assert [i for i in range(13) if base[i] != folded[i]] == [9, 10]


def test_qp_is_bounded_to_the_bth_field() -> None:
    with pytest.raises(PathError, match="destination QP"):
        Flow(SRC, DST, 17, SPORT, 4791, ecmp.QP_MAX + 1)


def test_the_state_carries_the_option_and_changing_it_needs_a_full_state() -> None:
    plain = desired_state(FabricRouting(load_fabric_text(VECTOR_FABRIC, "v.yaml")), "tor-a", 1)
    qp = desired_state(FabricRouting(load_fabric_text(QP_FABRIC, "qp.yaml")), "tor-a", 1)
    assert plain.ecmp_hash == state_pb2.ECMP_HASH_FIVE_TUPLE
    assert qp.ecmp_hash == state_pb2.ECMP_HASH_FIVE_TUPLE_QP
    assert plain.digest != qp.digest == state_digest(qp)
    # Without the option the digest is the one peers computed before the field existed.
    bare = state_pb2.DesiredState()
    bare.CopyFrom(plain)
    bare.ClearField("ecmp_hash")
    assert state_digest(bare) == plain.digest
    with pytest.raises(DeltaError, match="ECMP hash"):
        diff_states(plain, qp)
