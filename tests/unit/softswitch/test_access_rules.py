"""Who may call what on a softswitch serving TLS (softswitch.server.access_rules through
railfabric.tls.RoleGuard): its own switch identity everything, operators and readers only the
reads, another switch or the controller nothing but health; a method nobody named is closed."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from railfabric import tls
from railfabric.tls import Identity, Kind
from softswitch.server import P4RUNTIME, access_rules

pytestmark = pytest.mark.unit

OWN = Identity(Kind.SWITCH, "tor-r1-b1")
WRITES = ("Write", "SetForwardingPipelineConfig", "StreamChannel")
READS = ("Read", "GetForwardingPipelineConfig", "Capabilities")


class Context:
    """What the guard asks of a call: the peer's certificate (None: no identity in it)."""

    def __init__(self, who: Identity | None) -> None:
        self.who = who

    def auth_context(self) -> Mapping[str, Collection[bytes]]:
        if self.who is None:
            return {"transport_security_type": [b"ssl"]}
        return {
            "transport_security_type": [b"ssl"],
            "x509_subject_alternative_name": [b"127.0.0.1", self.who.uri.encode()],
        }


GUARD = tls.RoleGuard(access_rules(OWN), insecure=False)


def allowed(method: str, who: Identity | None) -> bool:
    return GUARD.refusal(method, Context(who)) is None


@pytest.mark.parametrize(
    ("who", "writes", "reads"),
    [
        (OWN, True, True),
        (Identity(Kind.OPERATOR, "alice"), False, True),
        (Identity(Kind.READER, "bob"), False, True),
        (Identity(Kind.SWITCH, "tor-r1-b2"), False, False),
        (Identity(Kind.CONTROLLER, "ctl"), False, False),
        (None, False, False),
    ],
)
def test_p4runtime_methods_by_identity(who: Identity | None, writes: bool, reads: bool) -> None:
    for method in WRITES:
        assert allowed(f"/{P4RUNTIME}/{method}", who) is writes, (method, who)
    for method in READS:
        assert allowed(f"/{P4RUNTIME}/{method}", who) is reads, (method, who)


def test_the_refusal_names_who_may_and_who_asked() -> None:
    why = GUARD.refusal(f"/{P4RUNTIME}/Write", Context(Identity(Kind.SWITCH, "tor-r1-b2")))
    assert why == f"/{P4RUNTIME}/Write is for switch/tor-r1-b1; the peer is switch/tor-r1-b2"
    why = GUARD.refusal(f"/{P4RUNTIME}/Read", Context(Identity(Kind.CONTROLLER, "ctl")))
    assert why is not None
    assert "is for operator or reader or switch/tor-r1-b1; the peer is controller/ctl" in why


def test_health_for_any_identity_reflection_for_readers_the_rest_closed() -> None:
    health = "/grpc.health.v1.Health/Check"
    assert all(allowed(health, Identity(kind, "x")) for kind in Kind)
    assert not allowed(health, None)
    reflection = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
    assert allowed(reflection, Identity(Kind.READER, "bob")) and allowed(reflection, OWN)
    assert not allowed(reflection, Identity(Kind.SWITCH, "tor-r1-b2"))
    assert not allowed(f"/{P4RUNTIME}/SomethingNew", OWN)  # a method nobody named
    assert not allowed("/other.Service/Method", OWN)


def test_insecure_lets_everything_through() -> None:
    guard = tls.RoleGuard(access_rules(OWN), insecure=True)
    assert guard.refusal(f"/{P4RUNTIME}/Write", Context(None)) is None
