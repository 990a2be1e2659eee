"""railfabric.netns: a netlink socket in a named namespace, made without forking the caller."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from railfabric.netns import netlink_socket
from railfabric.rtnl import set_link_up
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


def test_set_link_up_takes_a_link_down_and_up_and_names_a_missing_one(netns: Netns) -> None:
    """mininet_labs' cuts: one hand-built RTM_NEWLINK, the change made when it returns."""
    wire = netns.add("wire")
    a, b = f"rf{netns.tag}x", f"rf{netns.tag}y"
    netns.veth(a, wire, b, wire)
    sock = netlink_socket(wire)
    sock.settimeout(5)
    with sock, IPRoute(fileno=netlink_socket(wire).detach()) as ipr:
        index_a, index_b = ipr.link_lookup(ifname=a)[0], ipr.link_lookup(ifname=b)[0]
        set_link_up(sock, index_b, True, 1)
        set_link_up(sock, index_a, True, 2)
        assert ip("-br", "link", "show", a, netns=wire).split()[1] == "UP"  # carrier too
        set_link_up(sock, index_b, False, 3)
        # The peer's carrier went with it: a pulled cable, seen from the other end.
        assert ip("-br", "link", "show", a, netns=wire).split()[1] == "LOWERLAYERDOWN"
        assert ip("-br", "link", "show", b, netns=wire).split()[1] == "DOWN"
        set_link_up(sock, index_b, True, 4)
        assert ip("-br", "link", "show", a, netns=wire).split()[1] == "UP"

        missing = max(index_a, index_b) + 1000
        with pytest.raises(OSError, match=f"RTM_NEWLINK index {missing}") as err:
            set_link_up(sock, missing, False, 5)
        assert err.value.errno == errno.ENODEV
        set_link_up(sock, index_b, False, 6)  # the socket still answers the next request
        assert ip("-br", "link", "show", b, netns=wire).split()[1] == "DOWN"
