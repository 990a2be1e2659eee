"""rtnetlink's link messages, read and made by hand: the agent's carrier events and the lab's
cable cuts.

Only what those need: a link's index, name, flags, carrier, operational state and address,
and the one request that sets a link up or down. pyroute2 decodes every attribute of every
message (statistics, link info, address families) in Python: 0.48 ms a message on an idle
machine, and an agent on the lab's root namespace decodes every port's change, its own or
not. Here a message costs microseconds, so a carrier event is stamped as it is read. A
cut's request built by pyroute2 spent 0.4 ms of Python before it left (1.2 ms p50 on the
loaded lab), all counted in the failover figures' detection.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from railfabric.netns import netlink_socket

# linux/netlink.h, linux/rtnetlink.h, linux/if.h, linux/if_link.h
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTMGRP_LINK = 0x1
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
IFF_UP = 0x1
IF_OPER_UP = 6
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
IFLA_CARRIER = 33
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change mask
_NLATTR = struct.Struct("=HH")  # length, type
_ERRNO = struct.Struct("=i")  # NLMSG_ERROR: -errno, 0 for an ack
# Dumps come in datagrams of at most 32 KiB (af_netlink.c caps them so); one link's message
# is a few KiB.
RECV_BYTES = 65536
# A subscriber's receive buffer (net.core.rmem_max caps it): a burst of link changes (a peer
# rebooting, many cables cut) that overflows it loses events (ENOBUFS); the reader dumps again.
SUBSCRIBER_RCVBUF = 1 << 20


@dataclass(frozen=True, slots=True)
class Link:
    """One link as an RTM_NEWLINK (or RTM_DELLINK: `deleted`) message describes it."""

    index: int
    ifname: str
    flags: int
    carrier: bool | None  # IFLA_CARRIER; None when the message has none
    operstate: int | None
    mac: int  # IFLA_ADDRESS of an Ethernet link; 0 when it has none
    deleted: bool = False

    @property
    def has_carrier(self) -> bool:
        """Up and with carrier: the port can pass frames. A kernel that sends no carrier
        attribute says so by the operational state."""
        if self.deleted:
            return False
        if self.carrier is not None:
            return self.carrier and bool(self.flags & IFF_UP)
        return self.operstate == IF_OPER_UP


def _link(kind: int, data: bytes, start: int, end: int) -> Link:
    _, _, index, flags, _ = _IFINFOMSG.unpack_from(data, start)
    ifname, carrier, operstate, mac = "", None, None, 0
    at = start + _IFINFOMSG.size
    while at + _NLATTR.size <= end:
        length, kind_bits = _NLATTR.unpack_from(data, at)
        if length < _NLATTR.size or at + length > end:
            break  # malformed: the rest cannot be walked
        value = at + _NLATTR.size
        attr = kind_bits & _NLA_TYPE_MASK
        if attr == IFLA_IFNAME:
            ifname = data[value : at + length].split(b"\0", 1)[0].decode(errors="replace")
        elif attr == IFLA_CARRIER:
            carrier = bool(data[value])
        elif attr == IFLA_OPERSTATE:
            operstate = data[value]
        elif attr == IFLA_ADDRESS and length - _NLATTR.size == 6:
            mac = int.from_bytes(data[value : value + 6], "big")
        at += (length + 3) & ~3
    return Link(index, ifname, flags, carrier, operstate, mac, kind == RTM_DELLINK)


def links_in(data: bytes) -> tuple[list[Link], bool]:
    """The link messages of one netlink datagram, in order, and whether it ends a dump
    (NLMSG_DONE). OSError (the kernel's errno) for an error message; an ack is skipped."""
    links: list[Link] = []
    at = 0
    while at + _NLMSGHDR.size <= len(data):
        length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, at)
        if length < _NLMSGHDR.size or at + length > len(data):
            raise OSError(f"rtnetlink: a message of {length} bytes at offset {at} is truncated")
        body = at + _NLMSGHDR.size
        if kind == NLMSG_DONE:  # its payload, when there is one, is the dump's -errno
            code = _ERRNO.unpack_from(data, body)[0] if length >= body - at + 4 else 0
            if code:
                raise OSError(-code, f"rtnetlink: the dump failed: {os.strerror(-code)}")
            return links, True
        if kind == NLMSG_ERROR:
            (code,) = _ERRNO.unpack_from(data, body)
            if code:
                raise OSError(-code, f"rtnetlink: {os.strerror(-code)}")
        elif kind in (RTM_NEWLINK, RTM_DELLINK):
            links.append(_link(kind, data, body, at + length))
        at += (length + 3) & ~3
    return links, False


def route_socket(netns: str | None = None) -> socket.socket:
    """A NETLINK_ROUTE socket in the named namespace (railfabric.netns), or in this process's
    own when `netns` is None."""
    if netns:
        return netlink_socket(netns)
    return socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)


def subscribe_links(netns: str | None = None) -> socket.socket:
    """A non-blocking socket that receives every link change of the namespace."""
    sock = route_socket(netns)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SUBSCRIBER_RCVBUF)
    sock.bind((0, RTMGRP_LINK))
    sock.setblocking(False)
    return sock


def dump_links(netns: str | None = None, timeout_s: float = 5.0) -> list[Link]:
    """Every link of the namespace now (blocking: the kernel answers at once)."""
    with route_socket(netns) as sock:
        sock.settimeout(timeout_s)
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        flags = NLM_F_REQUEST | NLM_F_DUMP
        sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETLINK, flags, 1, 0) + body)
        links: list[Link] = []
        while True:
            more, done = links_in(sock.recv(RECV_BYTES))
            links.extend(more)
            if done:
                return links


def set_link_up(sock: socket.socket, index: int, up: bool, seq: int) -> None:
    """Set interface `index` of `sock`'s namespace up or down, as `ip link set` does, with one
    RTM_NEWLINK on the blocking NETLINK_ROUTE socket `sock`: the kernel makes the change
    inside send() and then acks. OSError with the kernel's errno (ENODEV: no interface
    `index`)."""
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, IFF_UP if up else 0, IFF_UP)
    flags = NLM_F_REQUEST | NLM_F_ACK
    sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_NEWLINK, flags, seq, 0) + body)
    while True:  # an ack left by a request that raised before reading it is skipped
        reply = sock.recv(RECV_BYTES)
        _, kind, _, got, _ = _NLMSGHDR.unpack_from(reply)
        if kind == NLMSG_ERROR and got == seq:
            (code,) = _ERRNO.unpack_from(reply, _NLMSGHDR.size)
            if code:
                raise OSError(-code, f"RTM_NEWLINK index {index}: {os.strerror(-code)}")
            return
