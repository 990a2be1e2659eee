"""`--store etcd://...`: the endpoints, the gRPC target that fails over between them, and the
key prefix; bad URLs refused naming what is wrong."""

from __future__ import annotations

import pytest

from controller.daemon.etcd_channel import DEFAULT_PREFIX, EtcdUrlError, parse

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
        ("http://10.0.0.1:2379", "expected etcd://"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(EtcdUrlError, match=says.replace("[", r"\[")) as refused:
        parse(url)
    assert repr(url) in str(refused.value)
