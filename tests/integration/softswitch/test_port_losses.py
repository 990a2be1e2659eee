"""Frames lost in the kernel on a softswitch port are drops the switch counts, not silence:
a receive socket that overflowed while the process was not reading, a send the kernel refused."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from softswitch.dataplane import Port
from tests.conftest import Netns, ip

pytestmark = pytest.mark.integration

FRAME = bytes.fromhex("020000000001020000000002") + b"\x88\xb5" + bytes(986)  # local ethertype


def test_a_receive_queue_overflow_and_refused_sends_are_lost_frames(netns: Netns) -> None:
    a, b = f"l{netns.tag}a", f"l{netns.tag}b"
    netns.veth(a, None, b, None)
    for end in (a, b):  # nothing but our frames on the pair
        Path(f"/proc/sys/net/ipv6/conf/{end}/disable_ipv6").write_text("1")
    port = Port(1, a)
    peer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        assert port.lost_frames() == 0
        # Nobody reads the port while its peer sends: a small receive queue overflows.
        port.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        peer.bind((b, 0))
        for _ in range(200):
            peer.send(FRAME)
        overflowed = port.lost_frames()
        assert 0 < overflowed < 200 and port.tx_errors == 0
        # The kernel's tally resets when read; ours does not (a frame still on its way to the
        # socket may add to it).
        assert 200 > port.lost_frames() >= overflowed
        # A send the kernel refuses (the interface is down) is a lost frame as well.
        ip("link", "set", a, "down")
        before = port.lost_frames()
        assert port.send(FRAME) is False
        assert port.tx_errors == 1 and port.lost_frames() == before + 1
    finally:
        peer.close()
        port.close()
