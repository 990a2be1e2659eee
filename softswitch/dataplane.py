"""Ports as raw AF_PACKET sockets on named Linux interfaces, driven by the asyncio loop.

Each port's socket is bound to its interface (ETH_P_ALL), promiscuous, and ignores frames it
sent itself (PACKET_IGNORE_OUTGOING, or the PACKET_OUTGOING packet type on older kernels), and
finishes checksums a sending host left to offload (PACKET_AUXDATA, see offload.py).
Reading is batched: a readable socket is drained up to `RX_BUDGET` frames per callback (Python
has no recvmmsg), which keeps packet rates up while the P4Runtime server stays responsive in
the same loop. Carrier comes from /sys/class/net/IF/carrier, so a member whose watch_port lost
carrier is skipped with no write. It is read when the kernel announces a link change
(rtnetlink's link group: a cable pull is seen in well under a millisecond, as an ASIC's
link-down interrupt) and every CARRIER_CHECK_S besides; without rtnetlink, every
CARRIER_POLL_S (bmv2 polls every 200 ms: docs/bmv2.md).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from railfabric.fabric_counters import DropReason
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
PACKET_STATISTICS = 6
TPACKET_STATS = struct.Struct("II")  # struct tpacket_stats: tp_packets, tp_drops
RX_BUDGET = 256  # frames read per readable callback before yielding to the loop
MAX_FRAME = 65536  # GSO super-frames from a veth peer can exceed the MTU
SOCKET_BUFFER = 4 * 1024 * 1024
CARRIER_POLL_S = 0.05  # without rtnetlink link events
CARRIER_CHECK_S = 1.0  # with them: a check that a lost event (a full socket) cannot outlast
RTMGRP_LINK = 1  # rtnetlink multicast group of link changes (linux/rtnetlink.h)
ANCILLARY_SPACE = socket.CMSG_SPACE(offload.AUXDATA.size)
STATUS_LOW_BYTE = 0 if sys.byteorder == "little" else 3  # of the native-endian tp_status


class PortError(OSError):
    """A port's interface is missing or cannot be opened; the message names the interface."""

    def __init__(self, ifname: str, reason: str) -> None:
        super().__init__(f"interface {ifname!r} {reason}")
        self.ifname = ifname


def open_port_socket(ifname: str) -> tuple[socket.socket, socket.socket, bool, bool]:
    """Non-blocking raw sockets on `ifname`: (receive, transmit, the kernel drops our own
    frames, received frames carry a virtio_net_hdr)."""
    try:
        ifindex = socket.if_nametoindex(ifname)
    except OSError:
        raise PortError(ifname, "does not exist") from None
    try:
        # Protocol 0 receives nothing until bind names the protocol: no frames from other
        # ports. Transmit on a socket of its own (protocol 0: it never receives), without the
        # virtio_net_hdr that the receive socket asks for.
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except OSError as err:  # EPERM without CAP_NET_RAW
        raise PortError(
            ifname, f"cannot be opened: {err.strerror} (raw sockets need root)"
        ) from err
    try:
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except OSError as err:
        rx.close()
        raise PortError(ifname, f"cannot be opened: {err.strerror}") from err
    try:
        tx.bind((ifname, 0))
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        tx.setblocking(False)
        # Tell us what offload left undone: virtio_net_hdr (checksum, GSO) and auxdata (VLAN).
        try:
            rx.setsockopt(SOL_PACKET, offload.PACKET_VNET_HDR, 1)
            vnet = True
        except OSError:
            vnet = False
        rx.setsockopt(SOL_PACKET, offload.PACKET_AUXDATA, 1)
        rx.bind((ifname, ETH_P_ALL))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        rx.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        try:
            rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            ignores_outgoing = True
        except OSError:
            ignores_outgoing = False
        rx.setblocking(False)
    except OSError as err:
        rx.close()
        tx.close()
        raise PortError(ifname, f"cannot be opened: {err.strerror or err}") from err
    return rx, tx, ignores_outgoing, vnet


class Port:
    """One switch port: its number, interface and socket."""

    def __init__(self, number: int, ifname: str) -> None:
        self.number = number
        self.ifname = ifname
        self.sock, self.tx, self.ignores_outgoing, self.vnet = open_port_socket(ifname)
        self._carrier_fd: int | None = None
        self.tx_errors = 0  # frames the kernel refused to send (full queue, no carrier)
        self.rx_dropped = 0  # frames the kernel dropped because our receive queue was full

    def lost_frames(self) -> int:
        """Frames lost on this port outside the pipeline so far: refused sends and receive
        queue overflows (the kernel's tally resets when read, so it is summed here)."""
        try:
            raw = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size)
        except OSError:
            pass
        else:
            self.rx_dropped += TPACKET_STATS.unpack(raw)[1]
        return self.tx_errors + self.rx_dropped

    def carrier(self) -> bool:
        """True when the interface has carrier (false when it is down, missing or unreadable).
        Read from /sys/class/net/IF/carrier kept open: sysfs answers a pread at offset 0
        afresh, and a spine polls dozens of ports 20 times a second (opening the path per
        read cost a few % of a core per idle switch)."""
        try:
            if self._carrier_fd is None:
                self._carrier_fd = os.open(f"/sys/class/net/{self.ifname}/carrier", os.O_RDONLY)
            return os.pread(self._carrier_fd, 4, 0).strip() == b"1"
        except OSError:  # EINVAL: administratively down; ENODEV: gone (then reopened)
            if self._carrier_fd is not None and not Path(f"/sys/class/net/{self.ifname}").exists():
                os.close(self._carrier_fd)
                self._carrier_fd = None
            return False

    def send(self, frame: bytes | bytearray) -> bool:
        try:
            self.tx.send(frame)
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
        self.tx.close()
        if self._carrier_fd is not None:
            os.close(self._carrier_fd)
            self._carrier_fd = None


class DataPlane:
    """Every port of a switch, attached to the running asyncio loop."""

    def __init__(self, switch: Switch) -> None:
        self.switch = switch
        self.ports: dict[int, Port] = {}
        self._buf = bytearray(MAX_FRAME)
        self._view = memoryview(self._buf)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._carrier_task: asyncio.Task[None] | None = None
        self._link_events: socket.socket | None = None
        self.rx_frames = 0
        self.internal_errors = 0
        # Every attribute close() reads is set before a port can fail to open.
        try:
            for number, ifname in switch.ports.items():
                self.ports[number] = Port(number, ifname)
        except PortError:
            self.close()
            raise

    def transmit_direct(self, fwd: Forward, in_port: int | None) -> None:
        """Send a frame out of its port now (no traffic manager)."""
        port = self.ports.get(fwd.port)
        pipeline = self.switch.pipeline
        if port is None or pipeline is None:
            return
        if port.send(fwd.frame):
            pipeline.count_egress(fwd.port, len(fwd.frame))
        else:  # the kernel refused it
            pipeline.count_tm_drop(fwd.port, len(fwd.frame), DropReason.KERNEL)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for port in self.ports.values():
            self.switch.set_carrier(port.number, port.carrier())
            loop.add_reader(port.sock.fileno(), self._reader(port))
        self._link_events = _link_events()
        if self._link_events is not None:
            loop.add_reader(self._link_events.fileno(), self._on_link_event)
        self._carrier_task = loop.create_task(self._poll_carrier(), name="softswitch-carrier")

    def _reader(self, port: Port) -> Callable[[], None]:
        recvmsg_into = port.sock.recvmsg_into
        buffers = [self._view]
        view = self._view
        number = port.number
        switch = self.switch
        filter_outgoing = not port.ignores_outgoing
        vnet = port.vnet
        skip = offload.VNET_HDR_LEN if vnet else 0
        # What the auxdata must make us look at: a stripped VLAN tag, and without the
        # virtio_net_hdr also a partial checksum.
        aux_flags = offload.TP_STATUS_VLAN_VALID if vnet else offload.FIXABLE_STATUS

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
                try:
                    if vnet and (view[0] or view[1]):  # checksum or segmentation left to do
                        frames = offload.finish_vnet(bytes(view[:n]))
                    else:
                        frames = [bytes(view[skip:n])]
                    for received in frames:
                        if ancdata and ancdata[0][2][STATUS_LOW_BYTE] & aux_flags:
                            received = offload.fix_received(received, ancdata, vnet)  # noqa: PLW2901
                        switch.receive(received, number)
                except Exception:  # a model bug must cost one frame, never the switch
                    self.internal_errors += 1
                    if self.internal_errors & (self.internal_errors - 1) == 0:  # 1, 2, 4, ...
                        LOG.exception(
                            "port %d: frame dropped by an internal error (%d so far): %s",
                            number,
                            self.internal_errors,
                            bytes(view[: min(n, 64)]).hex(),
                        )
            self.rx_frames += count

        return on_readable

    def check_carrier(self) -> None:
        """Read every port's carrier and tell the switch of each change."""
        for port in self.ports.values():
            up = port.carrier()
            if self.switch.carrier.get(port.number) != up:
                state = "up" if up else "down"
                LOG.info("port %d (%s) carrier %s", port.number, port.ifname, state)
                self.switch.set_carrier(port.number, up)

    def _on_link_event(self) -> None:
        """A link changed in this namespace (any link: the carriers say whether it is ours).
        ENOBUFS says events were lost; the check reads every port either way."""
        assert self._link_events is not None
        while True:
            try:
                self._link_events.recv(65536)
            except BlockingIOError:
                break
            except OSError as err:
                if err.errno != errno.ENOBUFS:
                    LOG.debug("rtnetlink link events: %s", err)
                    break
        self.check_carrier()

    async def _poll_carrier(self) -> None:
        every = CARRIER_CHECK_S if self._link_events is not None else CARRIER_POLL_S
        while True:
            self.check_carrier()
            await asyncio.sleep(every)

    def close(self) -> None:
        if self._carrier_task is not None:
            self._carrier_task.cancel()
        if self._link_events is not None:
            if self._loop is not None:
                self._loop.remove_reader(self._link_events.fileno())
            self._link_events.close()
            self._link_events = None
        for port in self.ports.values():
            if self._loop is not None:
                self._loop.remove_reader(port.sock.fileno())
            port.close()
        self.ports.clear()


def _link_events() -> socket.socket | None:
    """A socket that becomes readable when a link of this namespace changes; None (and a
    warning) where rtnetlink cannot be opened, and carrier is polled instead."""
    sock: socket.socket | None = None
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.bind((0, RTMGRP_LINK))
        sock.setblocking(False)
    except OSError as err:
        if sock is not None:
            sock.close()
        LOG.warning(
            "no rtnetlink link events (%s): carrier is polled every %d ms",
            err,
            CARRIER_POLL_S * 1000,
        )
        return None
    return sock
