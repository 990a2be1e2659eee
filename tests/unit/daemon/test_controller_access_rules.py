"""Who may call what on the controller's admin API (controller.daemon.main.access_rules
through railfabric.tls.RoleGuard): readers read, and what changes the fabric (drains, reloads)
is the operator's alone."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from controller.daemon.main import access_rules
from railfabric import tls
from railfabric.tls import Identity, Kind
from railfabric.v1 import admin_pb2

pytestmark = pytest.mark.unit

ADMIN = admin_pb2.DESCRIPTOR.services_by_name["FabricAdmin"]
# The admin methods that change the fabric. A new one belongs here and in access_rules.
CHANGES = {"Drain", "Undrain", "ReloadIntent"}
GUARD = tls.RoleGuard(access_rules(), insecure=False)


class Context:
    def __init__(self, who: Identity) -> None:
        self.who = who

    def auth_context(self) -> Mapping[str, Collection[bytes]]:
        return {
            "transport_security_type": [b"ssl"],
            "x509_subject_alternative_name": [self.who.uri.encode()],
        }


def allowed(method: str, who: Identity) -> bool:
    return GUARD.refusal(f"/{ADMIN.full_name}/{method}", Context(who)) is None


@pytest.mark.parametrize("method", [m.name for m in ADMIN.methods])
def test_readers_read_and_only_operators_change_the_fabric(method: str) -> None:
    assert allowed(method, Identity(Kind.OPERATOR, "alice"))
    assert allowed(method, Identity(Kind.READER, "bob")) is (method not in CHANGES)
    assert not allowed(method, Identity(Kind.SWITCH, "tor-r1-b1"))
    assert not allowed(method, Identity(Kind.CONTROLLER, "ctl"))


def test_the_refusal_of_a_drain_to_a_reader_says_who_may() -> None:
    why = GUARD.refusal(f"/{ADMIN.full_name}/Drain", Context(Identity(Kind.READER, "bob")))
    assert why == f"/{ADMIN.full_name}/Drain is for operator; the peer is reader/bob"
