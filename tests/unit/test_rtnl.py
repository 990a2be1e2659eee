"""railfabric.rtnl's decoding of link messages, on messages built here byte by byte (the
integration tests read the kernel's own: tests/integration/agent/test_ports.py)."""

from __future__ import annotations

import errno
import struct

import pytest

from railfabric import rtnl


def _attr(kind: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, body: bytes) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body
    return raw + b"\0" * (-len(raw) % 4)


def _link(kind: int, index: int, flags: int, attrs: bytes) -> bytes:
    return _message(kind, struct.pack("=BxHiII", 0, 1, index, flags, 0) + attrs)


def test_a_datagram_of_link_messages_then_the_end_of_a_dump() -> None:
    up = _link(
        rtnl.RTM_NEWLINK,
        7,
        rtnl.IFF_UP,
        _attr(rtnl.IFLA_IFNAME, b"sw1p1\0")  # 6 bytes: padded to 8
        + _attr(rtnl.IFLA_ADDRESS, bytes.fromhex("020000000101"))
        + _attr(rtnl.IFLA_OPERSTATE, bytes([rtnl.IF_OPER_UP]))
        + _attr(rtnl.IFLA_CARRIER | 0x8000, b"\1"),  # a flag bit in the type is ignored
    )
    no_carrier = _link(
        rtnl.RTM_NEWLINK, 8, rtnl.IFF_UP, _attr(rtnl.IFLA_IFNAME, b"p2\0") + _attr(33, b"\0")
    )
    admin_down = _link(rtnl.RTM_NEWLINK, 9, 0, _attr(rtnl.IFLA_CARRIER, b"\1"))
    old_kernel = _link(rtnl.RTM_NEWLINK, 10, 0, _attr(rtnl.IFLA_OPERSTATE, b"\6"))
    gone = _link(rtnl.RTM_DELLINK, 11, rtnl.IFF_UP, _attr(rtnl.IFLA_CARRIER, b"\1"))
    other = _message(24, b"\0" * 12)  # RTM_NEWROUTE: not a link, skipped
    links, done = rtnl.links_in(up + other + no_carrier + admin_down + old_kernel + gone)
    assert not done
    assert [(x.index, x.ifname, x.mac, x.has_carrier) for x in links] == [
        (7, "sw1p1", 0x020000000101, True),
        (8, "p2", 0, False),
        (9, "", 0, False),
        (10, "", 0, True),
        (11, "", 0, False),
    ]
    assert links[4].deleted and links[0].operstate == rtnl.IF_OPER_UP

    links, done = rtnl.links_in(up + _message(rtnl.NLMSG_DONE, b"\0" * 4) + up)
    assert done and [x.index for x in links] == [7]


def test_an_error_message_is_the_kernels_errno_and_an_ack_is_skipped() -> None:
    ack = _message(rtnl.NLMSG_ERROR, struct.pack("=i", 0) + b"\0" * 16)
    assert rtnl.links_in(ack) == ([], False)
    with pytest.raises(OSError, match="No such device") as err:
        rtnl.links_in(_message(rtnl.NLMSG_ERROR, struct.pack("=i", -errno.ENODEV) + b"\0" * 16))
    assert err.value.errno == errno.ENODEV


def test_a_truncated_message_is_an_error_naming_where() -> None:
    whole = _link(rtnl.RTM_NEWLINK, 7, 0, _attr(rtnl.IFLA_IFNAME, b"sw1p1\0"))
    with pytest.raises(OSError, match="message of 44 bytes at offset 0 is truncated"):
        rtnl.links_in(whole[:-4])


def test_an_attribute_running_past_its_message_ends_the_walk_of_it() -> None:
    name = _attr(rtnl.IFLA_IFNAME, b"p1\0")
    overlong = struct.pack("=HH", 64, rtnl.IFLA_CARRIER) + b"\1\0\0\0"
    (link,), _ = rtnl.links_in(_link(rtnl.RTM_NEWLINK, 3, rtnl.IFF_UP, name + overlong))
    assert (link.ifname, link.carrier) == ("p1", None)


def test_a_dump_that_ends_in_an_error_is_that_error() -> None:
    done = _message(rtnl.NLMSG_DONE, struct.pack("=i", -errno.EINTR))
    with pytest.raises(OSError, match="the dump failed") as err:
        rtnl.links_in(done)
    assert err.value.errno == errno.EINTR
    assert rtnl.links_in(_message(rtnl.NLMSG_DONE, b"")) == ([], True)  # no payload: done
