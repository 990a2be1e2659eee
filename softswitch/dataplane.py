"""Ports as raw AF_PACKET sockets on named Linux interfaces, driven by the asyncio loop.

Each port's socket is bound to its interface (ETH_P_ALL), promiscuous, and ignores frames it
sent itself (PACKET_IGNORE_OUTGOING, or the PACKET_OUTGOING packet type on older kernels), and
finishes checksums a sending host left to offload (PACKET_AUXDATA, see offload.py).
Reading is batched: a readable socket is drained up to `RX_BUDGET` frames per callback (Python
has no recvmmsg), which keeps packet rates up while the P4Runtime server stays responsive in
the same loop. Carrier comes from /sys/class/net/IF/carrier, polled like bmv2 polls port
status, so a member whose watch_port lost carrier is skipped with no write.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from softswitch import offload
from softswitch.pipeline import Forward
from softswitch.switch import Switch

LOG = logging.getLogger("softswitch.dataplane")

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
RX_BUDGET = 256  # frames read per readable callback before yielding to the loop
MAX_FRAME = 65536  # GSO super-frames from a veth peer can exceed the MTU
SOCKET_BUFFER = 4 * 1024 * 1024
CARRIER_POLL_S = 0.05
ANCILLARY_SPACE = socket.CMSG_SPACE(offload.AUXDATA.size)
STATUS_LOW_BYTE = 0 if sys.byteorder == "little" else 3  # of the native-endian tp_status


class PortError(OSError):
    """A port's interface is missing or cannot be opened."""


def open_port_socket(ifname: str) -> tuple[socket.socket, bool]:
    """A non-blocking raw socket on `ifname`; True when the kernel drops our own frames."""
    try:
        ifindex = socket.if_nametoindex(ifname)
    except OSError:
        raise PortError(f"interface {ifname!r} does not exist") from None
    # Protocol 0 receives nothing until bind names the protocol: no frames from other ports.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.bind((ifname, ETH_P_ALL))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        # Tell us (auxdata) when a frame's checksum was left to offload or its tag stripped.
        sock.setsockopt(SOL_PACKET, offload.PACKET_AUXDATA, 1)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            ignores_outgoing = True
        except OSError:
            ignores_outgoing = False
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise PortError(f"cannot open interface {ifname!r}: {err}") from err
    return sock, ignores_outgoing


def read_carrier(ifname: str) -> bool:
    """True when `ifname` has carrier (false when it is down, missing or unreadable)."""
    try:
        return Path(f"/sys/class/net/{ifname}/carrier").read_bytes().strip() == b"1"
    except OSError:
        return False


class Port:
    """One switch port: its number, interface and socket."""

    def __init__(self, number: int, ifname: str) -> None:
        self.number = number
        self.ifname = ifname
        self.sock, self.ignores_outgoing = open_port_socket(ifname)
        self.tx_errors = 0

    def send(self, frame: bytes | bytearray) -> bool:
        try:
            self.sock.send(frame)
            return True
        except OSError as err:
            # ENOBUFS/EAGAIN: the kernel queue is full; ENETDOWN/ENXIO: no carrier or gone.
            # EMSGSIZE: a GSO super-frame from a peer that is larger than our MTU.
            if err.errno not in (
                errno.ENOBUFS,
                errno.EAGAIN,
                errno.ENETDOWN,
                errno.ENXIO,
                errno.EMSGSIZE,
            ):
                LOG.warning("port %d (%s): send failed: %s", self.number, self.ifname, err)
            self.tx_errors += 1
            return False

    def close(self) -> None:
        self.sock.close()


class DataPlane:
    """Every port of a switch, attached to the running asyncio loop."""

    def __init__(self, switch: Switch) -> None:
        self.switch = switch
        self.ports: dict[int, Port] = {}
        try:
            for number, ifname in switch.ports.items():
                self.ports[number] = Port(number, ifname)
        except PortError:
            self.close()
            raise
        self._buf = bytearray(MAX_FRAME)
        self._view = memoryview(self._buf)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._carrier_task: asyncio.Task[None] | None = None
        self.rx_frames = 0
        self.internal_errors = 0

    def transmit_direct(self, fwd: Forward, in_port: int | None) -> None:
        """Send a frame out of its port now (no traffic manager)."""
        port = self.ports.get(fwd.port)
        pipeline = self.switch.pipeline
        if port is None or pipeline is None:
            return
        if port.send(fwd.frame):
            pipeline.count_egress(fwd.port, len(fwd.frame))
        else:
            pipeline.count_tm_drop(fwd.port, len(fwd.frame))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for port in self.ports.values():
            self.switch.set_carrier(port.number, read_carrier(port.ifname))
            loop.add_reader(port.sock.fileno(), self._reader(port))
        self._carrier_task = loop.create_task(self._poll_carrier(), name="softswitch-carrier")

    def _reader(self, port: Port) -> Callable[[], None]:
        recvmsg_into = port.sock.recvmsg_into
        buffers = [self._view]
        view = self._view
        number = port.number
        switch = self.switch
        filter_outgoing = not port.ignores_outgoing

        def on_readable() -> None:
            count = 0
            while count < RX_BUDGET:
                try:
                    n, ancdata, _flags, addr = recvmsg_into(buffers, ANCILLARY_SPACE)
                except BlockingIOError:
                    break
                except OSError as err:
                    LOG.debug("port %d: recv failed: %s", number, err)
                    break
                count += 1
                if filter_outgoing and addr[2] == PACKET_OUTGOING:
                    continue
                frame = bytes(view[:n])
                # Only look closer when tp_status (low byte) has a flag offload.py handles.
                try:
                    if ancdata and ancdata[0][2][STATUS_LOW_BYTE] & offload.FIXABLE_STATUS:
                        frame = offload.fix_received(frame, ancdata)
                    switch.receive(frame, number)
                except Exception:  # a model bug must cost one frame, never the switch
                    self.internal_errors += 1
                    if self.internal_errors & (self.internal_errors - 1) == 0:  # 1, 2, 4, ...
                        LOG.exception(
                            "port %d: frame dropped by an internal error (%d so far): %s",
                            number,
                            self.internal_errors,
                            frame[:64].hex(),
                        )
            self.rx_frames += count

        return on_readable

    async def _poll_carrier(self) -> None:
        while True:
            for port in self.ports.values():
                up = read_carrier(port.ifname)
                if self.switch.carrier.get(port.number) != up:
                    LOG.info(
                        "port %d (%s) carrier %s", port.number, port.ifname, "up" if up else "down"
                    )
                    self.switch.set_carrier(port.number, up)
            await asyncio.sleep(CARRIER_POLL_S)

    def close(self) -> None:
        if self._carrier_task is not None:
            self._carrier_task.cancel()
        for port in self.ports.values():
            if self._loop is not None:
                self._loop.remove_reader(port.sock.fileno())
            port.close()
        self.ports.clear()
