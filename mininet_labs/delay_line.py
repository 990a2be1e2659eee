"""A slow cable for the labs: copies every frame between two interfaces after a fixed delay,
and drops a random fraction if asked. This kernel has no netem, so a lab that needs a cable with
added latency or loss replaces the cable's tc patch (netlinks.patch) with this process, run in
the wire namespace; `Topology.slow_cable` does both and puts the patch back.

    python -m mininet_labs.delay_line IF_A IF_B --delay-ms 20 [--loss 0.1]
        [--one-way-from IF_B]

It prints "ready" once it listens. Frames are read from AF_PACKET sockets (the interface's own
transmissions skipped) and sent when due; the delay is the same both ways, so a probe's RTT over
the cable grows by twice it.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import random
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence

ETH_P_ALL = 3
MAX_FRAME = 65_535


def _open(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.setblocking(False)
    return s


def run(a: str, b: str, delay_ns: int, loss: float, one_way_from: str | None = None) -> None:
    # Random, not every Nth frame: a probe round is periodic, so every Nth frame would always
    # be the same probe. Seeded, so one frame sequence meets one loss pattern.
    rng = random.Random(0)
    socks = {a: _open(a), b: _open(b)}
    print("ready", flush=True)  # the lab waits for this before it counts on the cable
    other = {a: socks[b], b: socks[a]}
    due: list[tuple[int, int, bytes, str]] = []  # (when, order, frame, out interface)
    order = 0
    while True:
        timeout = None if not due else max(0.0, (due[0][0] - time.monotonic_ns()) / 1e9)
        readable, _, _ = select.select(list(socks.values()), [], [], timeout)
        now = time.monotonic_ns()
        for s in readable:
            frame, addr = s.recvfrom(MAX_FRAME)
            src = addr[0]
            if addr[2] == socket.PACKET_OUTGOING or one_way_from not in (None, src):
                continue
            if loss and rng.random() < loss:
                continue
            order += 1
            heapq.heappush(due, (now + delay_ns, order, frame, src))
        while due and due[0][0] <= time.monotonic_ns():
            _, _, frame, src = heapq.heappop(due)
            # The far end is down (a cut cable): the frame is lost, as on a wire.
            with contextlib.suppress(OSError):
                other[src].send(frame)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mininet_labs.delay_line")
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay, ms")
    parser.add_argument("--loss", type=float, default=0.0, help="fraction of frames dropped")
    parser.add_argument(
        "--one-way-from",
        metavar="IF",
        help="carry only the frames that come in on IF (A or B): a one-way failure",
    )
    args = parser.parse_args(argv)
    if args.delay_ms < 0:
        parser.error(f"--delay-ms {args.delay_ms}: must be >= 0")
    if not 0 <= args.loss < 1:
        parser.error(f"--loss {args.loss}: must be in [0, 1)")
    if args.one_way_from not in (None, args.a, args.b):
        parser.error(f"--one-way-from {args.one_way_from}: must be {args.a} or {args.b}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(args.a, args.b, int(args.delay_ms * 1e6), args.loss, args.one_way_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
