"""LLDP against the cabling plan: swapped cables are reported naming both ends."""

from __future__ import annotations

import pytest

from controller.core.cabling import Heard, check_switch

pytestmark = pytest.mark.unit

PLAN = {
    ("leaf-r3-b1", 7): ("spine-2", 3),
    ("leaf-r3-b1", 8): ("spine-3", 3),
    ("spine-2", 3): ("leaf-r3-b1", 7),
}


def test_correct_cabling_raises_nothing() -> None:
    miswired, correct = check_switch(
        "leaf-r3-b1", [Heard(7, "spine-2", "3"), Heard(8, "spine-3", "3")], PLAN
    )
    assert miswired == []
    assert sorted(correct) == [7, 8]


def test_wrong_peer_port_names_both_ends() -> None:
    (m,), correct = check_switch("leaf-r3-b1", [Heard(7, "spine-2", "5")], PLAN)
    assert correct == []
    assert m.alarm_id == "miswire:leaf-r3-b1:7"
    assert m.message == "leaf-r3-b1 port 7 expected spine-2 port 3, sees spine-2 port 5"


def test_swapped_cables_flag_both_ports_and_unplanned_ports_too() -> None:
    heard = [Heard(7, "spine-3", "3"), Heard(8, "spine-2", "3"), Heard(9, "spine-4", "x")]
    miswired, _ = check_switch("leaf-r3-b1", heard, PLAN)
    assert [m.message for m in miswired] == [
        "leaf-r3-b1 port 7 expected spine-2 port 3, sees spine-3 port 3",
        "leaf-r3-b1 port 8 expected spine-3 port 3, sees spine-2 port 3",
        "leaf-r3-b1 port 9 is not cabled in the plan, sees spine-4 port 'x'",
    ]
