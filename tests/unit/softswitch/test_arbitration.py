"""Arbitration rules (P4Runtime §5): highest election id is primary, answers carry the
primary's id, duplicates refused, promotion when the primary leaves."""

from __future__ import annotations

import pytest

from softswitch.arbitration import Arbiter
from softswitch.p4state import Code, P4Error

pytestmark = pytest.mark.unit


def test_primary_backup_and_promotion() -> None:
    arb = Arbiter(device_id=1)
    [a] = arb.update("a", 1, "", 10)
    assert (a.client, a.election_id, a.code) == ("a", 10, Code.OK)
    [b] = arb.update("b", 1, "", 5)
    assert (b.client, b.election_id, b.code) == ("b", 10, Code.ALREADY_EXISTS)
    # A higher bid takes over and everyone of the role is told.
    answers = {x.client: (x.election_id, x.code) for x in arb.update("c", 1, "", 20)}
    assert answers == {
        "a": (20, Code.ALREADY_EXISTS),
        "b": (20, Code.ALREADY_EXISTS),
        "c": (20, Code.OK),
    }
    assert arb.remove("b") == []  # a backup leaving changes nothing
    answers = {x.client: (x.election_id, x.code) for x in arb.remove("c")}
    assert answers == {"a": (10, Code.OK)}
    assert arb.is_primary("a")
    # The server checks a Write's election id against its primary client's own.
    assert (arb.primary(""), arb.election_id("a"), arb.election_id("c")) == ("a", 10, None)


def test_duplicate_id_wrong_device_and_roles() -> None:
    arb = Arbiter(device_id=1)
    arb.update("a", 1, "", 10)
    with pytest.raises(P4Error) as err:
        arb.update("b", 1, "", 10)
    assert err.value.code is Code.INVALID_ARGUMENT and "already used" in err.value.message
    with pytest.raises(P4Error) as err:
        arb.update("b", 2, "", 11)
    assert err.value.code is Code.NOT_FOUND
    [r] = arb.update("r", 1, "other-role", 10)  # same id, another role: fine
    assert r.code is Code.OK
    [n] = arb.update("n", 1, "third", None)  # no election id: backup, no primary
    assert n.code is Code.NOT_FOUND
