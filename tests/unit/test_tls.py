"""railfabric.pki and railfabric.tls without a network: what a certificate names, which files
are refused and how, and which identities a rule lets through."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest
from cryptography import x509

from railfabric import pki, tls
from railfabric.tls import Identity, Kind


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    pki.init_ca(tmp_path)
    return tmp_path


def test_a_certificate_names_its_identity_and_hosts(ca: Path) -> None:
    issued = pki.issue(ca, Identity(Kind.SWITCH, "tor-r1-b1"), ["127.0.0.1", "sw1.example"])
    cert = x509.load_pem_x509_certificate(issued.cert.read_bytes())
    assert tls.identities_in(cert) == [Identity(Kind.SWITCH, "tor-r1-b1")]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["sw1.example"]
    assert issued.cert.name == "switch-tor-r1-b1.crt"
    assert stat.S_IMODE(issued.key.stat().st_mode) == 0o600
    assert stat.S_IMODE((ca / pki.CA_KEY).stat().st_mode) == 0o600
    files = tls.TlsFiles(ca / pki.CA_CERT, issued.cert, issued.key)
    assert files.identity() == Identity(Kind.SWITCH, "tor-r1-b1")


def test_an_etcd_member_serves_under_the_name_controllers_check(ca: Path) -> None:
    issued = pki.issue(ca, Identity(Kind.ETCD, "m1"), ["10.0.0.21"])
    cert = x509.load_pem_x509_certificate(issued.cert.read_bytes())
    assert tls.identities_in(cert) == [Identity(Kind.ETCD, "m1")]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [tls.ETCD_NAME]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.21"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_nothing_is_overwritten_unless_forced(ca: Path) -> None:
    before = (ca / pki.CA_KEY).read_bytes()
    with pytest.raises(pki.PkiError, match=r"ca.key exists; --force replaces it"):
        pki.init_ca(ca)
    assert (ca / pki.CA_KEY).read_bytes() == before
    first = pki.issue(ca, Identity(Kind.OPERATOR, "alice"))
    key = first.key.read_bytes()
    with pytest.raises(pki.PkiError, match=r"operator-alice\.key exists"):
        pki.issue(ca, Identity(Kind.OPERATOR, "alice"))
    assert first.key.read_bytes() == key
    again = pki.issue(ca, Identity(Kind.OPERATOR, "alice"), force=True)
    assert again.key == first.key
    assert again.key.read_bytes() != key  # a rotation: a new key under the same name


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "x" * 64, "-dash"])
def test_names_that_cannot_be_a_file_or_uri_segment_are_refused(ca: Path, name: str) -> None:
    with pytest.raises(pki.PkiError, match="use letters, digits"):
        pki.issue(ca, Identity(Kind.SWITCH, name))


def test_issuing_without_a_ca_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(pki.PkiError, match=r"no CA here; run 'railctl pki init"):
        pki.issue(tmp_path, Identity(Kind.READER, "bob"))


@pytest.mark.parametrize(
    ("uri", "identity"),
    [
        ("spiffe://railfabric/switch/tor-r1-b1", Identity(Kind.SWITCH, "tor-r1-b1")),
        ("spiffe://railfabric/reader/bob", Identity(Kind.READER, "bob")),
        ("spiffe://railfabric/admin/bob", None),
        ("spiffe://railfabric/switch/", None),
        ("spiffe://railfabric/switch/a/b", None),
        ("spiffe://other/switch/tor-r1-b1", None),
        ("https://railfabric/switch/tor-r1-b1", None),
    ],
)
def test_identity_uris(uri: str, identity: Identity | None) -> None:
    assert Identity.parse(uri) == identity
    if identity is not None:
        assert identity.uri == uri


def _args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "tls_ca": None,
        "tls_cert": None,
        "tls_key": None,
        "insecure": False,
    }
    values.update(given)
    return argparse.Namespace(**values)


def test_files_from_flags(ca: Path, tmp_path: Path) -> None:
    issued = pki.issue(ca, Identity(Kind.CONTROLLER, "127.0.0.1"), ["127.0.0.1"])
    good = _args(tls_ca=ca / pki.CA_CERT, tls_cert=issued.cert, tls_key=issued.key)
    assert tls.files_from(good) == tls.TlsFiles(ca / pki.CA_CERT, issued.cert, issued.key)
    assert tls.files_from(_args(insecure=True)) is None
    with pytest.raises(tls.TlsError, match=r"TLS needs --tls-ca, --tls-cert, --tls-key"):
        tls.files_from(_args())
    with pytest.raises(tls.TlsError, match=r"--insecure and --tls-key contradict"):
        tls.files_from(_args(insecure=True, tls_key=issued.key))
    missing = tmp_path / "nope.crt"
    with pytest.raises(tls.TlsError, match=rf"--tls-cert {missing}: No such file"):
        tls.files_from(_args(tls_ca=ca / pki.CA_CERT, tls_cert=missing, tls_key=issued.key))
    with pytest.raises(tls.TlsError, match=r"--tls-ca .*: not a PEM certificate"):
        tls.files_from(_args(tls_ca=issued.key, tls_cert=issued.cert, tls_key=issued.key))
    with pytest.raises(tls.TlsError, match=r"--tls-key .*: not an unencrypted PEM private key"):
        tls.files_from(_args(tls_ca=ca / pki.CA_CERT, tls_cert=issued.cert, tls_key=issued.cert))


def test_a_certificate_without_our_identity_is_refused(ca: Path) -> None:
    # The CA's own certificate and key: a valid pair that names no railfabric identity.
    files = tls.TlsFiles(ca / pki.CA_CERT, ca / pki.CA_CERT, ca / pki.CA_KEY)
    with pytest.raises(tls.TlsError, match="names no railfabric identity"):
        files.read()


def test_rules_pick_the_longest_match_and_close_what_they_do_not_name() -> None:
    guard = tls.RoleGuard(
        {
            "/a.Admin/": tls.READERS,
            "/a.Admin/Drain": tls.OPERATORS,
            "/a.Control/": frozenset({Kind.SWITCH}),
        },
        insecure=False,
    )
    assert guard.allowed("/a.Admin/ListLinks") == tls.READERS
    assert guard.allowed("/a.Admin/Drain") == tls.OPERATORS
    assert guard.allowed("/a.Control/Session") == {Kind.SWITCH}
    assert guard.allowed("/a.Other/Thing") == frozenset()
    assert guard.allowed("/a.AdminX/Thing") == frozenset()
