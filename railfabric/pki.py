"""A small PKI for one fabric: a CA, and certificates that name a railfabric identity.

`railctl pki init DIR` makes the CA (DIR/ca.crt, DIR/ca.key); `railctl pki issue DIR
--switch NAME | --controller HOST | --operator NAME | --reader NAME` writes DIR/KIND-NAME.crt
and .key, signed by it. Each certificate carries its identity as a URI SAN (railfabric.tls)
plus the DNS names and IP addresses it may serve on (`--host`), so the usual host name check
of a TLS client holds. Keys are ECDSA P-256; private keys are written 0600 and never
overwritten unless asked (`--force`), so a typo cannot destroy a CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from railfabric.tls import ETCD_NAME, Identity, Kind

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CA_DAYS = 3650
LEAF_DAYS = 365
# Switch and operator names: what a URI path segment and a file name both take unchanged.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class PkiError(Exception):
    """What the operator asked cannot be done; the text says what and where."""


@dataclass(frozen=True)
class Issued:
    identity: Identity
    cert: Path
    key: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, *, private: bool, force: bool) -> None:
    if path.exists() and not force:
        raise PkiError(f"{path} exists; --force replaces it")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def init_ca(directory: Path, *, name: str = "railfabric CA", force: bool = False) -> Path:
    """Make a CA in `directory`; the path of its certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    # The key first: a certificate without its key is useless, the reverse is harmless.
    _write(directory / CA_KEY, _key_pem(key), private=True, force=force)
    _write(
        directory / CA_CERT,
        cert.public_bytes(serialization.Encoding.PEM),
        private=False,
        force=force,
    )
    return directory / CA_CERT


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), None)
    except FileNotFoundError as err:
        raise PkiError(f"{err.filename}: no CA here; run 'railctl pki init {directory}'") from None
    except ValueError as err:
        raise PkiError(f"{directory}: the CA cannot be read ({err})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{directory / CA_KEY}: not an ECDSA key")
    return cert, key


def _san_host(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def issue(
    directory: Path,
    identity: Identity,
    hosts: Sequence[str] = (),
    *,
    days: int = LEAF_DAYS,
    force: bool = False,
) -> Issued:
    """Sign a certificate for `identity` (and `hosts`, its DNS names or IP addresses) with
    the CA in `directory`; writes DIR/KIND-NAME.crt and .key."""
    if not _NAME.match(identity.name):
        raise PkiError(
            f"{identity.kind} name {identity.name!r}: use letters, digits, '.', '_' and '-' "
            "(at most 63, starting with a letter or digit)"
        )
    if days <= 0:
        raise PkiError(f"--days {days}: must be > 0")
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    serves = identity.kind in (Kind.SWITCH, Kind.CONTROLLER, Kind.ETCD)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if serves:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity.uri)]
    if identity.kind == Kind.ETCD and ETCD_NAME not in hosts:
        hosts = [ETCD_NAME, *hosts]  # the name controllers check every member against
    names += [_san_host(host) for host in hosts]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(identity))]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    stem = f"{identity.kind}-{identity.name}"
    key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
    _write(key_path, _key_pem(key), private=True, force=force)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False, force=force)
    return Issued(identity, cert_path, key_path)
