"""`--store etcd://...`: the endpoints, the gRPC target that fails over between them, and the
key prefix; bad URLs refused naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.daemon.etcd_channel import DEFAULT_PREFIX, EtcdUrlError, parse
from railfabric import pki, tls
from railfabric.tls import Identity, Kind

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "target", "prefix"),
    [
        ("etcd://127.0.0.1:2379", "127.0.0.1:2379", DEFAULT_PREFIX),
        ("etcd://etcd.mgmt:2379/rf/prod", "etcd.mgmt:2379", "/rf/prod"),
        (
            "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/",
            "ipv4:10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379",
            DEFAULT_PREFIX,
        ),
        ("etcd://[::1]:2379,[::2]:2379/x", "ipv6:[::1]:2379,[::2]:2379", "/x"),
    ],
)
def test_endpoints_become_one_target_with_failover(url: str, target: str, prefix: str) -> None:
    endpoints = parse(url)
    assert endpoints.target == target
    assert endpoints.prefix == prefix
    assert endpoints.key("leader") == f"{prefix}/leader".encode()
    assert str(endpoints) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("etcd://", "no endpoint"),
        ("etcd://a:1,b:2", "'a' is a name; several endpoints must be IP addresses"),
        ("etcd://10.0.0.1:2379,[::1]:2379", "mix of IPv4 and IPv6"),
        ("etcd://10.0.0.1:2379,10.0.0.1:2379", "listed twice"),
        ("etcd://10.0.0.1", "lacks HOST:PORT"),
        ("etcd://10.0.0.1:x", "port 'x' is not a number"),
        ("etcd://10.0.0.1:0", "out of range"),
        ("etcd://10.0.0.1:1//a", "empty part"),
        ("http://10.0.0.1:2379", "expected etcds://"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(EtcdUrlError, match=says.replace("[", r"\[")) as refused:
        parse(url)
    assert repr(url) in str(refused.value)


def test_etcds_is_mutual_tls_with_the_controllers_files(tmp_path: Path) -> None:
    endpoints = parse("etcds://10.0.0.1:2379,10.0.0.2:2379/rf")
    assert endpoints.secure and endpoints.target == "ipv4:10.0.0.1:2379,10.0.0.2:2379"
    with pytest.raises(EtcdUrlError, match="--tls-ca/--tls-cert/--tls-key, or etcd:// for"):
        endpoints.with_tls(None)
    with pytest.raises(EtcdUrlError, match="no TLS files"):
        endpoints.channel()
    pki.init_ca(tmp_path)
    issued = pki.issue(tmp_path, Identity(Kind.CONTROLLER, "10.0.0.9"), ["10.0.0.9"])
    files = tls.TlsFiles(tmp_path / pki.CA_CERT, issued.cert, issued.key)
    assert endpoints.with_tls(files).tls == files
    endpoints.with_tls(files).channel().close()
    # Plaintext asked for: the files change nothing.
    plain = parse("etcd://10.0.0.1:2379")
    assert not plain.secure and plain.with_tls(files).tls is None
