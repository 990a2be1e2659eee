"""railfabric.ecmp reproduces bmv2's action-selector choices, measured on bmv2 (docs/bmv2.md)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from railfabric import ecmp

pytestmark = pytest.mark.unit

# Measured on bmv2 1.15.5 (docs/bmv2.md): 200 flows and the port bmv2 chose.
VECTORS = Path(__file__).resolve().parents[1] / "data" / "bmv2_ecmp_crc32_vectors.json"


def _vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


def _tuple(flow: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return (
        int(ipaddress.IPv4Address(flow["src"])),
        int(ipaddress.IPv4Address(flow["dst"])),
        flow["proto"],
        flow["sport"],
        flow["dport"],
    )


def test_hash_input_and_crc32_match_bmv2_for_every_vector() -> None:
    flows = _vectors()["flows"]
    assert len(flows) == 200
    for flow in flows:
        five = _tuple(flow)
        assert ecmp.hash_input(*five).hex() == flow["hash_input_hex"]
        assert ecmp.flow_hash(*five) == flow["crc32"]


def test_member_choice_matches_bmv2_with_all_members_and_with_one_down() -> None:
    data = _vectors()
    ports = [m["port"] for m in data["members_in_creation_order"]]
    without_3 = [p for p in ports if p != 3]
    for flow in data["flows"]:
        h = ecmp.flow_hash(*_tuple(flow))
        assert ecmp.choose_member(h, ports) == flow["egress_port_all_live"]
        assert ecmp.choose_member(h, without_3) == flow["egress_port_with_port3_down"]


def test_choice_over_no_live_members_is_an_error() -> None:
    with pytest.raises(ValueError, match="no live members"):
        ecmp.choose_member(1, [])
