"""Collective-aware ECMP, measured: one NIC pair, one UDP source port, N queue pairs, and how
many of a ToR's uplinks they use, with and without `ecmp.hash: five_tuple_qp`.

    python -m bench.ecmp_qp [--qps 1024] [--uplinks 4] [--json]      (root: veths)

Two figures per setting. *predicted*: railfabric.ecmp, the hash path prediction and both
targets compute (crc32 over the 13 bytes, the QP folded into the source port). *softswitch*:
a real softswitch process whose ports are veths, programmed over P4Runtime with one group of
`--uplinks` members, sent the N RoCEv2 frames from its port 1; the frames each uplink's peer
received are read from the kernel's counters. Every figure carries its sample (frames sent,
received). bmv2 is measured by tests/bmv2/test_qp_hash.py where it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import finsy as fy
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from mininet_labs.processes import free_port, wait_listening
from railfabric import ecmp
from railfabric import fabric_p4 as p4
from railfabric.p4info import DEFAULT_P4INFO

SRC, DST, SPORT = "10.0.1.1", "10.2.0.9", 49152
ROUTER_MAC, HOST_MAC = 0x0200000000FE, 0x020000000101


@dataclass(frozen=True)
class Spread:
    setting: str  # five_tuple | five_tuple_qp
    how: str  # predicted | softswitch
    uplinks: int
    qps: int
    sent: int
    received: int
    uplinks_used: int
    max_over_mean: float
    per_uplink: tuple[int, ...]


def _spread(setting: str, how: str, loads: list[int], qps: int, sent: int) -> Spread:
    received = sum(loads)
    mean = received / len(loads) if received else float("nan")
    return Spread(
        setting,
        how,
        len(loads),
        qps,
        sent,
        received,
        sum(1 for n in loads if n),
        round(max(loads) / mean, 3) if received else float("nan"),
        tuple(loads),
    )


def predicted(fields: ecmp.HashFields, qps: int, uplinks: int) -> Spread:
    src, dst = int(ipaddress.IPv4Address(SRC)), int(ipaddress.IPv4Address(DST))
    loads = [0] * uplinks
    for qp in range(1, qps + 1):
        sport = ecmp.hashed_sport(fields, ecmp.UDP_PROTOCOL, SPORT, ecmp.ROCEV2_UDP_PORT, qp)
        h = ecmp.flow_hash(src, dst, ecmp.UDP_PROTOCOL, sport, ecmp.ROCEV2_UDP_PORT)
        loads[ecmp.choose_member(h, range(uplinks))] += 1
    return _spread(fields.value, "predicted", loads, qps, qps)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def _ports(count: int) -> Iterator[dict[int, tuple[str, str]]]:
    """`count` veth pairs in this namespace: port -> (switch end, peer end)."""
    tag = uuid.uuid4().hex[:5]
    ports = {p: (f"rfq{tag}s{p}", f"rfq{tag}h{p}") for p in range(1, count + 1)}
    try:
        for sw, peer in ports.values():
            _ip("link", "add", sw, "type", "veth", "peer", "name", peer)
            for end in (sw, peer):
                with contextlib.suppress(OSError):  # no IPv6 chatter on the counted links
                    Path(f"/proc/sys/net/ipv6/conf/{end}/disable_ipv6").write_text("1")
                _ip("link", "set", end, "up")
        yield ports
    finally:
        for sw, _ in ports.values():
            subprocess.run(["ip", "link", "del", sw], capture_output=True, check=False)


def _rx_packets(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/rx_packets").read_text())


def _frame(qp: int) -> bytes:
    bth = bytes([0x04, 0, 0xFF, 0xFF, 0]) + qp.to_bytes(3, "big") + bytes(4)
    return bytes(
        Ether(dst=ROUTER_MAC.to_bytes(6, "big"), src=HOST_MAC.to_bytes(6, "big"))
        / IP(src=SRC, dst=DST)
        / UDP(sport=SPORT, dport=ecmp.ROCEV2_UDP_PORT)
        / (bth + bytes(32))
    )


async def _program(sw: fy.Switch, uplinks: list[int]) -> None:
    members = [
        fy.P4ActionProfileMember(
            p4.ECMP_SELECTOR,
            member_id=port,
            action=fy.P4TableAction(p4.SET_NEXTHOP, port=port, smac=ROUTER_MAC, dmac=port),
        )
        for port in uplinks  # ascending: the member order both targets use
    ]
    await sw.insert(members)
    group = fy.P4ActionProfileGroup(
        p4.ECMP_SELECTOR, group_id=1, members=[fy.P4Member(p, weight=(1, p)) for p in uplinks]
    )
    await sw.insert([group])
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.NEXT, match=fy.P4TableMatch(next_id=1), action=fy.P4IndirectAction(group_id=1)
            )
        ]
    )
    await sw.insert(
        [
            fy.P4TableEntry(
                p4.ROUTING_V4,
                match=fy.P4TableMatch(ipv4_dst="10.2.0.0/16"),
                action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=1),
            )
        ]
    )


async def on_softswitch(qps: int, uplinks: int) -> list[Spread]:
    out = []
    with _ports(uplinks + 1) as ports, tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{free_port()}"
        argv = [sys.executable, "-m", "softswitch.main", "--device-id", "1", "--grpc-addr", address]
        argv += ["--log-level", "warning", "--insecure"]
        for port, (sw_if, _) in ports.items():
            argv += ["-i", f"{port}@{sw_if}"]
        log = Path(tmp) / "softswitch.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=sink)  # noqa: ASYNC220 - once
        try:
            wait_listening(address, 30, proc, log)
            opts = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=b"softswitch", device_id=1)
            async with fy.Switch("softswitch", address, opts) as sw:
                up = list(range(2, uplinks + 2))
                await _program(sw, up)
                tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                tx.bind((ports[1][1], 0))
                for fields, action in (
                    (ecmp.HashFields.FIVE_TUPLE, p4.NO_ACTION),
                    (ecmp.HashFields.FIVE_TUPLE_QP, p4.HASH_QP),
                ):
                    entry = fy.P4TableEntry(
                        p4.HASH_CONFIG, action=fy.P4TableAction(action), is_default_action=True
                    )
                    await sw.modify([entry])
                    before = {p: _rx_packets(ports[p][1]) for p in up}
                    for qp in range(1, qps + 1):
                        tx.send(_frame(qp))
                        if qp % 64 == 0:
                            await asyncio.sleep(0.01)  # within what the port's queue holds
                    await asyncio.sleep(1.0)
                    loads = [_rx_packets(ports[p][1]) - before[p] for p in up]
                    out.append(_spread(fields.value, "softswitch", loads, qps, qps))
                tx.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ecmp_qp", description=__doc__)
    parser.add_argument("--qps", type=int, default=1024, help="queue pairs of the NIC pair")
    parser.add_argument("--uplinks", type=int, default=4, help="members of the ToR's group")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    results = [predicted(f, args.qps, args.uplinks) for f in ecmp.HashFields]
    started = time.monotonic()
    results += asyncio.run(on_softswitch(args.qps, args.uplinks))
    lost = [r for r in results if r.received != r.sent]
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
        return 1 if lost else 0
    print(
        f"{args.qps} QPs, one NIC pair, UDP source port {SPORT}, {args.uplinks} uplinks "
        f"(softswitch run {time.monotonic() - started:.1f} s)"
    )
    for r in results:
        print(
            f"  {r.how:<10} {r.setting:<13} uplinks used {r.uplinks_used}/{r.uplinks}  "
            f"max/mean {r.max_over_mean}  per uplink {list(r.per_uplink)}  "
            f"(sent {r.sent}, received {r.received})"
        )
    for r in lost:  # a spread over a partial sample is no figure
        print(f"bench.ecmp_qp: {r.how} {r.setting}: {r.sent - r.received} of {r.sent} frames lost")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
