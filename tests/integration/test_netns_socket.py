"""railfabric.netns: a netlink socket in a named namespace, made without forking the caller."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from railfabric.netns import netlink_socket
from tests.conftest import Netns, ip

pytestmark = pytest.mark.integration


# Forks seen while `_counting` holds True (os.register_at_fork has no unregister).
_forks: list[int] = []
_counting = [False]


def _count_fork() -> None:
    if _counting[0]:
        _forks.append(os.getpid())


os.register_at_fork(before=_count_fork)


@pytest.fixture
def forks() -> Iterator[list[int]]:
    """The forks of this process during the test (pyroute2's netns= forks one per socket)."""
    _forks.clear()
    _counting[0] = True
    try:
        yield _forks
    finally:
        _counting[0] = False


def test_the_socket_sees_and_sets_the_namespaces_links_and_nothing_forks(
    netns: Netns, forks: list[int]
) -> None:
    wire = netns.add("wire")
    a, b = f"rf{netns.tag}x", f"rf{netns.tag}y"
    netns.veth(a, wire, b, wire)
    own_ns = os.readlink("/proc/thread-self/ns/net")
    threads = threading.active_count()

    with IPRoute(fileno=netlink_socket(wire).detach()) as ipr:
        names = {msg.get("ifname") for msg in ipr.get_links()}
        assert {a, b} <= names
        assert "lo" in names and len(names) == 3  # the wire's own links, not the host's
        ipr.link("set", index=ipr.link_lookup(ifname=a)[0], state="up")
    assert "UP" in ip("-br", "link", "show", a, netns=wire).split()[1]

    assert forks == [], "the process forked to make the socket"
    assert os.readlink("/proc/thread-self/ns/net") == own_ns
    assert threading.active_count() == threads


def test_a_missing_namespace_is_an_error_naming_it() -> None:
    with pytest.raises(OSError, match="netns rf-no-such-ns: cannot open /var/run/netns/"):
        netlink_socket("rf-no-such-ns")
