"""`python -m softswitch.bench [--json]`: softswitch's forwarding and P4Runtime write rates.

Builds two namespaces, each holding one end of a veth whose other end is a softswitch port,
starts `railfabric-softswitch` on them, programs one route over P4Runtime (raw gRPC, so the
client costs little), then:
- forwarding: a sender in the first namespace offers frames as fast as a raw socket allows for
  a few seconds; a receiver in the second counts what arrives; packets/s = received / seconds,
  for 64-byte and 1500-byte frames;
- writes: routing_v4 inserts, 1,000 updates per WriteRequest, and one update per request,
  best of `--trials` runs (the entries are deleted between runs); forwarding is the best of
  `--trials - 1` runs.
Needs root. Removes its namespaces and stops its process whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
from finsy.proto import U128, p4r, p4r_grpc

from railfabric import p4bytes
from railfabric.p4info import DEFAULT_P4INFO, load_p4info

DEVICE_ID = 1
ELECTION_ID = 1
MARK = b"softswitch-bench!"
OFFERED_PPS = 200_000

# Offers at most `rate` frames/s in bursts of 256: enough to saturate softswitch, without the
# sender burning a whole core the switch needs (two shared cores).
_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
frame = bytes.fromhex(sys.argv[2]); seconds = float(sys.argv[3]); rate = float(sys.argv[4])
burst = 256; slot = burst / rate; n = 0
start = time.monotonic(); end = start + seconds
send = s.send
while (now := time.monotonic()) < end:
    for _ in range(burst):
        try:
            send(frame)
        except OSError:
            pass
    n += burst
    ahead = start + n / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
print(n)
"""

_RECEIVER = """
import select, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
s.setblocking(False)
mark = bytes.fromhex(sys.argv[2]); end = time.monotonic() + float(sys.argv[3]); n = 0
print("ready", flush=True)
while (left := end - time.monotonic()) > 0:
    select.select([s], [], [], left)
    try:
        while True:
            if mark in s.recv(4096):
                n += 1
    except BlockingIOError:
        pass
print(n)
"""


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _topology() -> Iterator[tuple[str, str, str, str, str, str]]:
    """(ns1, host_if1, switch_if1, ns2, host_if2, switch_if2), removed afterwards."""
    tag = uuid.uuid4().hex[:6]
    ns1, ns2 = f"rfbench{tag}-1", f"rfbench{tag}-2"
    links = []
    try:
        for ns in (ns1, ns2):
            _run("ip", "netns", "add", ns)
        for ns, i in ((ns1, 1), (ns2, 2)):
            sw_if, host_if = f"rfb{tag}s{i}", f"rfb{tag}h{i}"
            _run("ip", "link", "add", sw_if, "type", "veth", "peer", "name", host_if)
            links.append(sw_if)
            _run("ip", "link", "set", host_if, "netns", ns)
            _run("ip", "link", "set", sw_if, "up")
            _run("ip", "-n", ns, "link", "set", host_if, "up")
            for path in (f"/proc/sys/net/ipv6/conf/{sw_if}/disable_ipv6",):
                with suppress(OSError):
                    Path(path).write_text("1")
            _run(
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                f"net.ipv6.conf.{host_if}.disable_ipv6=1",
            )
        yield ns1, f"rfb{tag}h1", f"rfb{tag}s1", ns2, f"rfb{tag}h2", f"rfb{tag}s2"
    finally:
        for ns in (ns1, ns2):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)


@contextmanager
def _softswitch(address: str, if1: str, if2: str) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "softswitch.main", "--device-id", str(DEVICE_ID)]
    argv += ["--grpc-addr", address, "-i", f"1@{if1}", "-i", f"2@{if2}", "--log-level", "WARNING"]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class _Client:
    """Just enough P4Runtime: arbitration, pipeline, writes."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        # The generated stub is typed for sync gRPC; on an aio channel its calls are awaitable.
        self.stub: Any = p4r_grpc.P4RuntimeStub(self.channel)
        self.p4info = load_p4info(DEFAULT_P4INFO)
        self.ids = {t.preamble.name: t.preamble.id for t in self.p4info.tables}
        self.ids |= {a.preamble.name: a.preamble.id for a in self.p4info.actions}
        self.ids |= {p.preamble.name: p.preamble.id for p in self.p4info.action_profiles}
        self.stream: (
            grpc.aio.StreamStreamCall[p4r.StreamMessageRequest, p4r.StreamMessageResponse] | None
        ) = None

    async def connect(self) -> None:
        for _ in range(200):
            try:
                await self.stub.Capabilities(p4r.CapabilitiesRequest(), timeout=0.5)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        self.stream = self.stub.StreamChannel()
        arbitration = p4r.MasterArbitrationUpdate(
            device_id=DEVICE_ID, election_id=U128.encode(ELECTION_ID)
        )
        await self.stream.write(p4r.StreamMessageRequest(arbitration=arbitration))
        await self.stream.read()
        await self.stub.SetForwardingPipelineConfig(
            p4r.SetForwardingPipelineConfigRequest(
                device_id=DEVICE_ID,
                election_id=U128.encode(ELECTION_ID),
                action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                config=p4r.ForwardingPipelineConfig(p4info=self.p4info),
            )
        )

    def route(self, prefix: int, plen: int, next_id: int) -> p4r.Update:
        te = p4r.TableEntry(table_id=self.ids["FabricIngress.routing_v4"])
        te.match.add(
            field_id=1, lpm=p4r.FieldMatch.LPM(value=p4bytes.encode(prefix), prefix_len=plen)
        )
        te.action.action.action_id = self.ids["FabricIngress.set_next_id"]
        te.action.action.params.add(param_id=1, value=p4bytes.encode(next_id))
        return p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te))

    async def write(self, updates: list[p4r.Update]) -> None:
        await self.stub.Write(
            p4r.WriteRequest(
                device_id=DEVICE_ID, election_id=U128.encode(ELECTION_ID), updates=updates
            )
        )

    async def program_forwarding(self, out_port: int, dmac: int) -> None:
        member = p4r.ActionProfileMember(
            action_profile_id=self.ids["FabricIngress.ecmp_selector"], member_id=1
        )
        member.action.action_id = self.ids["FabricIngress.set_nexthop"]
        for pid, value in ((1, out_port), (2, 0x020000000001), (3, dmac)):
            member.action.params.add(param_id=pid, value=p4bytes.encode(value))
        nxt = p4r.TableEntry(table_id=self.ids["FabricIngress.next"])
        nxt.match.add(field_id=1, exact=p4r.FieldMatch.Exact(value=p4bytes.encode(1)))
        nxt.action.action_profile_member_id = 1
        await self.write(
            [
                p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(action_profile_member=member)),
                p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=nxt)),
                self.route(0x0A000000, 8, 1),
            ]
        )

    async def close(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        await self.channel.close(None)


def _frame(size: int) -> bytes:
    eth = bytes.fromhex("0200000000010200000000020800")
    udp_len = size - 14 - 20
    ip = bytearray(
        bytes.fromhex("4500")
        + (size - 14).to_bytes(2, "big")
        + bytes.fromhex("000040004011 0000")
        + bytes([192, 0, 2, 1, 10, 0, 0, 9])
    )
    total = sum(int.from_bytes(ip[i : i + 2], "big") for i in range(0, 20, 2))
    total = (total & 0xFFFF) + (total >> 16)
    ip[10:12] = (~total & 0xFFFF).to_bytes(2, "big")
    udp = (
        (4000).to_bytes(2, "big") + (4791).to_bytes(2, "big") + udp_len.to_bytes(2, "big") + b"\0\0"
    )
    payload = MARK + bytes(udp_len - 8 - len(MARK))
    return eth + bytes(ip) + udp + payload


def _forwarding_rate(ns1: str, if1: str, ns2: str, if2: str, *, size: int, seconds: float) -> float:
    receiver = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns2,
            sys.executable,
            "-c",
            _RECEIVER,
            if2,
            MARK.hex(),
            str(seconds + 1.0),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        receiver.stdout.readline()  # "ready"
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns1,
                sys.executable,
                "-c",
                _SENDER,
                if1,
                _frame(size).hex(),
                str(seconds),
                str(OFFERED_PPS),
            ],
            capture_output=True,
            check=True,
            timeout=seconds + 30,
        )
        out, _ = receiver.communicate(timeout=seconds + 30)
        return int(out.strip().splitlines()[-1]) / seconds
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


async def _timed_inserts(client: _Client, requests: list[list[p4r.Update]]) -> float:
    """Entries/s for these insert requests, sent one after the other; then removes them."""
    start = time.perf_counter()
    for updates in requests:
        await client.write(updates)
    rate = sum(len(u) for u in requests) / (time.perf_counter() - start)
    for updates in requests:
        deletes = []
        for update in updates:
            delete = p4r.Update()
            delete.CopyFrom(update)
            delete.type = p4r.Update.DELETE
            deletes.append(delete)
        await client.write(deletes)
    return rate


async def _write_rates(client: _Client, trials: int) -> tuple[float, float]:
    """Best of `trials` (the machine is shared: the best run is the closest to capacity).
    Requests are built before the clock starts, so the figures are the server's."""
    batches, batch_size = 10, 1000
    batched_rates, single_rates = [], []
    for _ in range(trials):
        base = 0x0B000000
        batched = [
            [client.route(base + (b * batch_size + i) * 256, 24, 1) for i in range(batch_size)]
            for b in range(batches)
        ]
        batched_rates.append(await _timed_inserts(client, batched))
        singles = [[client.route(0x0C000000 + i * 256, 24, 1)] for i in range(1000)]
        single_rates.append(await _timed_inserts(client, singles))
    return max(batched_rates), max(single_rates)


async def measure(seconds: float, trials: int = 3) -> dict[str, float]:
    with _topology() as (ns1, host_if1, sw_if1, ns2, host_if2, sw_if2):
        address = f"127.0.0.1:{_free_port()}"
        with _softswitch(address, sw_if1, sw_if2):
            client = _Client(address)
            try:
                await client.connect()
                await client.program_forwarding(2, 0x020000000002)
                results = {
                    f"fwd_pps_{size}": max(
                        _forwarding_rate(ns1, host_if1, ns2, host_if2, size=size, seconds=seconds)
                        for _ in range(max(1, trials - 1))
                    )
                    for size in (64, 1500)
                }
                batched, single = await _write_rates(client, trials)
                results["write_entries_per_s_batched"] = batched
                results["write_entries_per_s_single"] = single
            finally:
                await client.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m softswitch.bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each rate test")
    parser.add_argument("--trials", type=int, default=3, help="write-rate runs (best is kept)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("softswitch.bench: needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    results = asyncio.run(measure(args.seconds, args.trials))
    if args.json:
        print(json.dumps({k: round(v, 1) for k, v in results.items()}))
    else:
        print(f"forwarding, 64-byte frames:   {results['fwd_pps_64']:>12,.0f} packets/s")
        print(f"forwarding, 1500-byte frames: {results['fwd_pps_1500']:>12,.0f} packets/s")
        batched = results["write_entries_per_s_batched"]
        single = results["write_entries_per_s_single"]
        print(f"writes, 1,000 per request:    {batched:>12,.0f} entries/s")
        print(f"writes, 1 per request:        {single:>12,.0f} entries/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
