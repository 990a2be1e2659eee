"""Lab traffic: a paced UDP sender and a recording receiver, run inside host namespaces as
`python -m mininet_labs.traffic send|recv ...` (stdlib only, so they start fast).

Every datagram is RoCEv2-shaped: a BTH (12 bytes) naming the flow's destination QP, then
(flow id, sequence number, send time on CLOCK_MONOTONIC), so the lab measures loss windows
exactly (namespaces share the host's clock). The switches parse the BTH of every datagram to
UDP 4791, and with `ecmp.hash: five_tuple_qp` hash its QP: it must be the flow's, not bytes of
a sequence number. The receiver records every
datagram with the IP TOS byte it arrived with (ECN CE marks) into a binary file.

The sender behaves like a RoCE NIC with PFC on priority 3: with `--pfc-iface` it listens for
802.1Qbb PAUSE frames on that interface and holds back its lossless-class (DSCP 26) flows for
the paused time (quanta * 512 bit times at `--pfc-rate-mbps`) or until a resume (quanta 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

# BTH: opcode (RC SEND only), flags, partition key (default), reserved, dest QP, ack/PSN.
BTH_HEAD = bytes([0x04, 0x00, 0xFF, 0xFF, 0x00])
# The same for an RC Acknowledge (opcode 0x11), which an AETH (syndrome, MSN) follows.
ACK_HEAD = bytes([0x11, 0x00, 0xFF, 0xFF, 0x00])
BTH_LEN = 12
QP_MAX = (1 << 24) - 1
HEADER = struct.Struct("!IIq")  # flow id, sequence, send monotonic ns, after the BTH
RECORD = struct.Struct("<IIqqB")  # flow, seq, send ns, receive ns, tos
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
DSCP_LOSSLESS = 26
LOSSLESS_PRIORITY = 3
MAX_LATE_NS = 2_000_000
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)


@dataclass(frozen=True)
class FlowSpec:
    flow: int
    src: str
    dst: str
    sport: int
    dport: int
    tos: int
    dst_qp: int = 0
    # An AETH syndrome: the flow is RC Acknowledges carrying it (0x00 an ACK, 0x60 a NAK for a
    # PSN sequence error) instead of SENDs. None: SENDs.
    syndrome: int | None = None

    @classmethod
    def parse(cls, text: str) -> FlowSpec:
        """'FLOW,SRC,DST,SPORT,DPORT,TOS[,QP[,SYNDROME]]'."""
        parts = text.split(",")
        if len(parts) not in (6, 7, 8):
            raise ValueError(
                f"--flow {text!r}: expected FLOW,SRC,DST,SPORT,DPORT,TOS[,QP[,SYNDROME]]"
            )
        flow, src, dst, sport, dport, tos, *rest = parts
        qp = int(rest[0]) if rest else 0
        syndrome = int(rest[1]) if len(rest) > 1 else None
        return cls(int(flow), src, dst, int(sport), int(dport), int(tos), qp, syndrome)

    def __str__(self) -> str:
        text = (
            f"{self.flow},{self.src},{self.dst},{self.sport},{self.dport},{self.tos},{self.dst_qp}"
        )
        return text if self.syndrome is None else f"{text},{self.syndrome}"

    @property
    def bth(self) -> bytes:
        """The BTH every datagram of the flow starts with (and an Acknowledge's AETH)."""
        if not 0 <= self.dst_qp <= QP_MAX:
            raise ValueError(f"flow {self.flow}: QP {self.dst_qp} is outside 0..{QP_MAX}")
        qp = self.dst_qp.to_bytes(3, "big")
        if self.syndrome is None:
            return BTH_HEAD + qp + bytes(BTH_LEN - 8)
        if not 0 <= self.syndrome <= 0xFF:
            raise ValueError(f"flow {self.flow}: syndrome {self.syndrome} is not a byte")
        return ACK_HEAD + qp + bytes(BTH_LEN - 8) + bytes([self.syndrome, 0, 0, 1])


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


class PauseListener:
    """802.1Qbb frames received on one interface, honoured for one priority."""

    def __init__(self, iface: str, rate_mbps: float) -> None:
        self.sock = socket.socket(
            socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_MAC_CONTROL)
        )
        self.sock.bind((iface, ETH_P_MAC_CONTROL))
        self.sock.setblocking(False)
        self.ns_per_quantum = 512 * 1000 / rate_mbps  # 512 bit times at the link rate
        self.paused_until = 0
        self.pauses = 0
        self.resumes = 0
        self.paused_ns = 0

    def poll(self, now: int) -> None:
        while True:
            try:
                frame = self.sock.recv(128)
            except BlockingIOError:
                return
            if len(frame) < 34 or struct.unpack_from("!H", frame, 14)[0] != PFC_OPCODE:
                continue
            enable = struct.unpack_from("!H", frame, 16)[0]
            if not enable & (1 << LOSSLESS_PRIORITY):
                continue
            quanta = struct.unpack_from("!H", frame, 18 + 2 * LOSSLESS_PRIORITY)[0]
            if quanta == 0:
                self.resumes += 1
                self.paused_until = 0
            else:
                self.pauses += 1
                self.paused_until = now + int(quanta * self.ns_per_quantum)

    def wait(self) -> None:
        """Block while the lossless priority is paused."""
        now = time.monotonic_ns()
        self.poll(now)
        start = now
        while now < self.paused_until:
            time.sleep(0.0001)
            now = time.monotonic_ns()
            self.poll(now)
        self.paused_ns += now - start


def send(args: argparse.Namespace) -> int:
    flows = [FlowSpec.parse(text) for text in args.flow]
    socks = []
    for f in flows:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, f.tos)
        s.bind((f.src, f.sport))
        s.connect((f.dst, f.dport))
        socks.append(s)
    pause = PauseListener(args.pfc_iface, args.pfc_rate_mbps) if args.pfc_iface else None
    lossless = [f.tos >> 2 == DSCP_LOSSLESS for f in flows]
    bths = [f.bth for f in flows]
    pad = b"\0" * max(0, args.size - BTH_LEN - HEADER.size)
    sent = [0] * len(flows)
    errors = 0
    interval = int(1e9 / args.rate)
    signal.signal(signal.SIGTERM, _raise_stop)
    start = time.monotonic_ns()
    deadline = start + int(args.duration * 1e9) if args.duration else None
    total = args.count * len(flows) if args.count else None
    i = 0
    due = start
    print("ready", flush=True)
    try:
        while (total is None or i < total) and (deadline is None or time.monotonic_ns() < deadline):
            k = i % len(flows)
            now = time.monotonic_ns()
            if due - now > 150_000:
                time.sleep((due - now - 100_000) / 1e9)
            elif now - due > MAX_LATE_NS:
                due = now  # late (a pause, a busy CPU): carry on at the rate, never burst
            if pause is not None and lossless[k]:
                pause.wait()
                due = max(due, time.monotonic_ns())
            due += interval
            try:
                socks[k].send(
                    bths[k] + HEADER.pack(flows[k].flow, sent[k], time.monotonic_ns()) + pad
                )
                sent[k] += 1
            except OSError:
                errors += 1  # e.g. no route while a test cuts links: counted, not fatal
            i += 1
    except (_Stop, KeyboardInterrupt):
        pass
    summary = {
        "sent": {str(f.flow): n for f, n in zip(flows, sent, strict=True)},
        "errors": errors,
        "duration_s": (time.monotonic_ns() - start) / 1e9,
        "pauses": pause.pauses if pause else 0,
        "resumes": pause.resumes if pause else 0,
        "paused_ms": pause.paused_ns / 1e6 if pause else 0.0,
    }
    print(json.dumps(summary), flush=True)
    return 0


def burst(args: argparse.Namespace) -> int:
    """Interactive: for each stdin line 'FLOW,SRC,DST,SPORT,DPORT,TOS COUNT', send COUNT
    datagrams of that flow at --rate, then print 'sent N'. Lets the lab attribute counters to
    one flow at a time without a process start per flow."""
    pad = b"\0" * max(0, args.size - BTH_LEN - HEADER.size)
    # One socket per 5-tuple and TOS: flows that differ only in QP (one NIC pair's queue
    # pairs) share their UDP source port, as a RoCE NIC's do.
    socks: dict[tuple[str, str, int, int, int], socket.socket] = {}
    interval = 1.0 / args.rate
    print("ready", flush=True)
    for line in sys.stdin:
        spec_text, _, count_text = line.strip().partition(" ")
        if not spec_text:
            continue
        f = FlowSpec.parse(spec_text)
        key = (f.src, f.dst, f.sport, f.dport, f.tos)
        s = socks.get(key)
        if s is None:
            s = socks[key] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, f.tos)
            s.bind((f.src, f.sport))
            s.connect((f.dst, f.dport))
        n = 0
        for seq in range(int(count_text)):
            try:
                s.send(f.bth + HEADER.pack(f.flow, seq, time.monotonic_ns()) + pad)
                n += 1
            except OSError:
                pass
            time.sleep(interval)
        print(f"sent {n}", flush=True)
    return 0


def recv(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    sock.bind(("0.0.0.0", args.port))
    sock.settimeout(0.2)
    records = bytearray()

    def record(data: bytes, ancillary: list[tuple[int, int, bytes]]) -> None:
        now = time.monotonic_ns()
        if len(data) < BTH_LEN + HEADER.size:
            return
        tos = 0
        for level, kind, value in ancillary:
            if level == socket.IPPROTO_IP and kind == IP_TOS_CMSG and value:
                tos = value[0]
        flow, seq, sent_ns = HEADER.unpack_from(data, BTH_LEN)
        records.extend(RECORD.pack(flow, seq, sent_ns, now, tos))

    signal.signal(signal.SIGTERM, _raise_stop)
    print("ready", flush=True)
    try:
        while True:
            try:
                data, ancillary, _flags, _addr = sock.recvmsg(65536, 64)
            except TimeoutError:
                continue
            record(data, ancillary)
    except (_Stop, KeyboardInterrupt):
        # What already arrived is received, even if this process was slow to read it.
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                data, ancillary, _flags, _addr = sock.recvmsg(65536, 64)
                record(data, ancillary)
    finally:
        Path(args.out).write_bytes(bytes(records))
    return 0


IP_TOS_CMSG = socket.IP_TOS  # Linux reports the TOS byte with cmsg type IP_TOS


@dataclass(frozen=True)
class Packet:
    flow: int
    seq: int
    sent_ns: int
    recv_ns: int
    tos: int


def read_records(path: Path) -> list[Packet]:
    """The receiver's file as packets, in arrival order."""
    data = path.read_bytes() if path.exists() else b""
    return [Packet(*RECORD.unpack_from(data, off)) for off in range(0, len(data), RECORD.size)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mininet_labs.traffic")
    parser.add_argument("--lab", default="", help="lab tag (lets `clean` find this process)")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("send", help="paced UDP flows, round robin")
    s.add_argument(
        "--flow", action="append", required=True, help="FLOW,SRC,DST,SPORT,DPORT,TOS[,QP]"
    )
    s.add_argument("--rate", type=float, required=True, help="datagrams per second, all flows")
    s.add_argument("--count", type=int, default=0, help="datagrams per flow (0: until stopped)")
    s.add_argument("--duration", type=float, default=0.0, help="seconds (0: until count)")
    s.add_argument("--size", type=int, default=64, help="UDP payload bytes (BTH included)")
    s.add_argument("--pfc-iface", help="honour PFC PAUSE frames received on this interface")
    s.add_argument("--pfc-rate-mbps", type=float, default=1000.0, help="link rate for quanta")
    b = sub.add_parser("burst", help="send bursts of flows read from stdin")
    b.add_argument("--rate", type=float, default=2000.0, help="datagrams per second")
    b.add_argument("--size", type=int, default=64, help="UDP payload bytes (BTH included)")
    r = sub.add_parser("recv", help="record every datagram to a file until SIGTERM")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--out", required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "send":
        return send(args)
    if args.command == "burst":
        return burst(args)
    return recv(args)


if __name__ == "__main__":
    sys.exit(main())
