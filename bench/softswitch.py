"""`python -m bench.softswitch [--target softswitch|bmv2] [--json]`: forwarding and P4Runtime
write rates of softswitch, and with `--target bmv2` of bmv2's simple_switch_grpc beside it in
the same run, with the ratios softswitch/bmv2.

Builds two namespaces, each holding one end of a veth whose other end is a switch port, and
for each trial starts each target on those ports (alternately, so that the machine's load
falls on both alike), pushes fabric.p4 (P4Info, plus the bmv2 JSON for bmv2) and programs one
route over P4Runtime (raw gRPC, so the client costs little), then measures:
- forwarding: a sender in the first namespace offers up to 200,000 frames/s for a few seconds;
  a receiver in the second counts what arrives through the fabric pipeline (acl, qos,
  routing_v4, next, set_nexthop); packets/s = received / seconds, 64- and 1500-byte frames;
- writes: routing_v4 inserts, 10 WriteRequests of 1,000 updates, and 1,000 WriteRequests of
  one update, one after the other (requests built before the clock starts, entries deleted
  afterwards);
- programming: the agent's writer takes the largest switch of examples/ref-100k.yaml (routes
  and groups from the controller's routing) into a freshly started target, until Applied;
  then a restarted agent reads it all back and writes nothing (bench.agent.program).
Each figure is the best of `--trials` trials (the machine is shared: the best run is the
closest to capacity) and is printed with its sample. bmv2 is measured only when
`simple_switch_grpc` is on PATH and build/p4/fabric.json exists (`make p4`, or p4c-bm2-ss on
PATH to compile it); otherwise one line says why it was skipped. Its build is reported: the
`--version` output, and whether the debug/trace logging macros are compiled in (bmv2's
`--disable-logging-macros`), which a start with `--log-console -L debug` reveals: a build
without them says "You disabled logging macros" (src/bm_sim/options_parse.cpp).
Needs root. Removes its namespaces and stops its processes whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from finsy.proto import U128, p4r, p4r_grpc

from bench.agent import fabric_switch_state, program
from railfabric import fabric_p4 as p4
from railfabric import p4bytes
from railfabric.p4info import DEFAULT_P4INFO, load_p4info

if TYPE_CHECKING:
    from railfabric.v1 import state_pb2

REPO = Path(__file__).resolve().parent.parent
BMV2_BINARY = "simple_switch_grpc"
BMV2_JSON = REPO / "build" / "p4" / "fabric.json"
REF_FABRIC = REPO / "examples" / "ref-100k.yaml"
DEVICE_ID = 1
ELECTION_ID = 1
CPU_PORT = 255
MARK = b"softswitch-bench!"
OFFERED_PPS = 200_000
FRAME_SIZES = (64, 1500)
BATCHES, BATCH_SIZE = 10, 1000  # batched writes: 10 requests of 1,000 updates
SINGLES = 1000  # single writes: 1,000 requests of one update
MACROS_OFF = "You disabled logging macros"  # bmv2's start-up line (options_parse.cpp)
PROBE_SECONDS = 2.0  # how long the logging-macro probe lets bmv2 run

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


@dataclass(frozen=True)
class Sample:
    """A rate and what it was measured on: `count` frames received (or updates written) in
    `seconds`, out of `offered` frames sent (or updates asked), the best of `runs` runs."""

    rate: float
    count: int
    offered: int
    seconds: float
    runs: int = 1


def _best(samples: Sequence[Sample]) -> Sample:
    best = max(samples, key=lambda s: s.rate)
    return Sample(best.rate, best.count, best.offered, best.seconds, len(samples))


@dataclass(frozen=True)
class Target:
    """A switch to measure: its name, how to start it on two ports, the device config it
    needs in SetForwardingPipelineConfig (bmv2: the JSON; softswitch: none)."""

    name: str
    command: tuple[str, ...]  # with {address}, {if1}, {if2} to fill in
    device_config: bytes = b""

    def argv(self, address: str, if1: str, if2: str) -> list[str]:
        return [a.format(address=address, if1=if1, if2=if2) for a in self.command]


SOFTSWITCH = Target(
    "softswitch",
    (
        *(sys.executable, "-m", "softswitch.main", "--device-id", str(DEVICE_ID)),
        *("--grpc-addr", "{address}", "-i", "1@{if1}", "-i", "2@{if2}", "--log-level", "WARNING"),
        "--insecure",  # the bench's own raw gRPC client is plaintext
    ),
)


@dataclass(frozen=True)
class Bmv2Info:
    """How the simple_switch_grpc on PATH was built, or why it cannot be measured."""

    path: str
    version: str
    logging_macros: str  # "compiled in", "compiled out (--disable-logging-macros)", or unknown
    thrift: bool
    skipped: str = ""


def _bmv2_logging_macros(path: str) -> str:
    """Start `path` with console debug logging and no program for a moment: a build
    without the logging macros says so while it parses its options, before anything else."""
    argv = [path, "--device-id", "251", "--log-console", "-L", "debug", "--no-p4", "--"]
    argv += ["--grpc-server-addr", f"127.0.0.1:{_free_port()}", "--cpu-port", str(CPU_PORT)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=PROBE_SECONDS)
        exited = True
    except subprocess.TimeoutExpired:
        exited = False
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: whatever it started goes too
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    text = out.decode(errors="replace")
    if MACROS_OFF in text:
        return "compiled out (--disable-logging-macros)"
    if not exited:
        return "compiled in (no start-up warning with --log-console -L debug)"
    first = text.strip().splitlines()[:1]
    return f"unknown (the probe exited {proc.returncode}: {first[0] if first else 'no output'})"


def bmv2_info(binary: str = BMV2_BINARY) -> Bmv2Info:
    path = shutil.which(binary)
    if path is None:
        return Bmv2Info("", "", "", False, f"{binary} is not on PATH")
    from mininet_labs.processes import Bmv2Build  # noqa: PLC0415  (--target bmv2 only)

    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    version = (done.stdout or done.stderr).strip()
    help_text = subprocess.run([path, "--help"], capture_output=True, text=True, check=False)
    build = Bmv2Build.from_help(help_text.stdout)
    info = Bmv2Info(path, version, _bmv2_logging_macros(path), build.thrift)
    if not BMV2_JSON.exists() and shutil.which("p4c-bm2-ss"):
        from softswitch.p4build import compile_p4  # noqa: PLC0415

        compile_p4(BMV2_JSON.parent)
    if not BMV2_JSON.exists():
        return Bmv2Info(
            path,
            version,
            info.logging_macros,
            build.thrift,
            f"{BMV2_JSON.relative_to(REPO)} is missing (`make p4`; p4c-bm2-ss is not on PATH)",
        )
    return info


def bmv2_target(info: Bmv2Info) -> Target:
    command = [info.path, "--device-id", str(DEVICE_ID)]
    if info.thrift:
        command += ["--thrift-port", str(_free_port())]
    command += ["-i", "1@{if1}", "-i", "2@{if2}", "--no-p4", "--"]
    command += ["--grpc-server-addr", "{address}", "--cpu-port", str(CPU_PORT)]
    return Target("bmv2", tuple(command), BMV2_JSON.read_bytes())


@contextmanager
def _running(target: Target, if1: str, if2: str) -> Iterator[str]:
    """`target` started on the two ports; its P4Runtime address."""
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.Popen(
        target.argv(address, if1, if2),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if target.name == "bmv2" else None,
        start_new_session=True,
    )
    try:
        yield address
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

    async def connect(self, device_config: bytes = b"") -> None:
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
                config=p4r.ForwardingPipelineConfig(
                    p4info=self.p4info, p4_device_config=device_config
                ),
            )
        )

    def route(self, prefix: int, plen: int, next_id: int) -> p4r.Update:
        te = p4r.TableEntry(table_id=self.ids[p4.ROUTING_V4])
        te.match.add(
            field_id=p4.ROUTING_V4_IPV4_DST_ID,
            lpm=p4r.FieldMatch.LPM(value=p4bytes.encode(prefix), prefix_len=plen),
        )
        te.action.action.action_id = self.ids[p4.SET_NEXT_ID]
        te.action.action.params.add(
            param_id=p4.SET_NEXT_ID_NEXT_ID_ID, value=p4bytes.encode(next_id)
        )
        return p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te))

    async def write(self, updates: list[p4r.Update]) -> None:
        await self.stub.Write(
            p4r.WriteRequest(
                device_id=DEVICE_ID, election_id=U128.encode(ELECTION_ID), updates=updates
            )
        )

    async def program_forwarding(self, out_port: int, dmac: int) -> None:
        member = p4r.ActionProfileMember(action_profile_id=self.ids[p4.ECMP_SELECTOR], member_id=1)
        member.action.action_id = self.ids[p4.SET_NEXTHOP]
        for pid, value in (
            (p4.SET_NEXTHOP_PORT_ID, out_port),
            (p4.SET_NEXTHOP_SMAC_ID, 0x020000000001),
            (p4.SET_NEXTHOP_DMAC_ID, dmac),
        ):
            member.action.params.add(param_id=pid, value=p4bytes.encode(value))
        nxt = p4r.TableEntry(table_id=self.ids[p4.NEXT])
        nxt.match.add(
            field_id=p4.NEXT_NEXT_ID_ID, exact=p4r.FieldMatch.Exact(value=p4bytes.encode(1))
        )
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


def _forwarding(ns1: str, if1: str, ns2: str, if2: str, *, size: int, seconds: float) -> Sample:
    receive = [sys.executable, "-c", _RECEIVER, if2, MARK.hex(), str(seconds + 1.0)]
    send = [sys.executable, "-c", _SENDER, if1, _frame(size).hex(), str(seconds)]
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", ns2, *receive],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        receiver.stdout.readline()  # "ready"
        sender = subprocess.run(
            ["ip", "netns", "exec", ns1, *send, str(OFFERED_PPS)],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 30,
        )
        out, _ = receiver.communicate(timeout=seconds + 30)
        received = int(out.strip().splitlines()[-1])
        sent = int(sender.stdout.strip().splitlines()[-1])
        return Sample(received / seconds, received, sent, seconds)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


async def _timed_inserts(client: _Client, requests: list[list[p4r.Update]]) -> Sample:
    """Entries/s for these insert requests, sent one after the other; then removes them."""
    start = time.perf_counter()
    for updates in requests:
        await client.write(updates)
    seconds = time.perf_counter() - start
    entries = sum(len(u) for u in requests)
    for updates in requests:
        deletes = []
        for update in updates:
            delete = p4r.Update()
            delete.CopyFrom(update)
            delete.type = p4r.Update.DELETE
            deletes.append(delete)
        await client.write(deletes)
    return Sample(entries / seconds, entries, len(requests), seconds)


async def _write_rates(client: _Client) -> tuple[Sample, Sample]:
    """(batched, single). Requests are built before the clock starts, so the figures are
    the server's (and the client's sending)."""
    base = 0x0B000000
    batched = [
        [client.route(base + (b * BATCH_SIZE + i) * 256, 24, 1) for i in range(BATCH_SIZE)]
        for b in range(BATCHES)
    ]
    singles = [[client.route(0x0C000000 + i * 256, 24, 1)] for i in range(SINGLES)]
    return await _timed_inserts(client, batched), await _timed_inserts(client, singles)


async def _trial(
    target: Target,
    ports: tuple[str, str, str, str, str, str],
    seconds: float,
    state: state_pb2.DesiredState | None,
) -> dict[str, Sample]:
    """Every figure of `target`, once."""
    ns1, host_if1, sw_if1, ns2, host_if2, sw_if2 = ports
    results: dict[str, Sample] = {}
    with _running(target, sw_if1, sw_if2) as address:
        client = _Client(address)
        try:
            await client.connect(target.device_config)
            await client.program_forwarding(2, 0x020000000002)
            for size in FRAME_SIZES:
                results[f"fwd_pps_{size}"] = _forwarding(
                    ns1, host_if1, ns2, host_if2, size=size, seconds=seconds
                )
            batched, single = await _write_rates(client)
            results["write_entries_per_s_batched"] = batched
            results["write_entries_per_s_single"] = single
        finally:
            await client.close()
    if state is not None:
        with _running(target, sw_if1, sw_if2) as address:
            done = await program(address, state, target.device_config)
        results["agent_program_entries_per_s"] = Sample(
            done.rate, done.written, done.written, done.seconds
        )
        results["agent_reconcile_entries_per_s"] = Sample(
            done.read / done.reconcile_seconds, done.read, done.read, done.reconcile_seconds
        )
    return results


async def measure(
    seconds: float,
    trials: int = 3,
    targets: Sequence[Target] = (SOFTSWITCH,),
    state: state_pb2.DesiredState | None = None,
) -> dict[str, dict[str, Sample]]:
    """target name -> figure -> the best of `trials` samples; the targets take turns."""
    runs: dict[str, dict[str, list[Sample]]] = {t.name: {} for t in targets}
    with _topology() as ports:
        for _ in range(max(1, trials)):
            for target in targets:
                for name, sample in (await _trial(target, ports, seconds, state)).items():
                    runs[target.name].setdefault(name, []).append(sample)
    return {t: {n: _best(s) for n, s in figures.items()} for t, figures in runs.items()}


FIGURES = {
    "fwd_pps_64": ("forwarding, 64-byte frames", "packets/s"),
    "fwd_pps_1500": ("forwarding, 1500-byte frames", "packets/s"),
    "write_entries_per_s_batched": ("writes, 1,000 per request", "entries/s"),
    "write_entries_per_s_single": ("writes, 1 per request", "entries/s"),
    "agent_program_entries_per_s": ("agent programming", "entries/s"),
    "agent_reconcile_entries_per_s": ("agent restart's reconcile", "entries/s"),
}


def _sample_text(name: str, sample: Sample) -> str:
    runs = f"best of {sample.runs} run{'s' if sample.runs != 1 else ''}"
    if name.startswith("fwd_"):
        what = f"{sample.count:,} of {sample.offered:,} frames sent arrived"
    elif name.startswith("write_"):
        what = f"{sample.count:,} updates in {sample.offered:,} requests"
    elif name == "agent_reconcile_entries_per_s":
        what = f"{sample.count:,} entries read back, none written"
    else:
        what = f"{sample.count:,} updates written"
    return f"{runs}; {what} in {sample.seconds:.2f} s"


def report(
    results: dict[str, dict[str, Sample]], bmv2: Bmv2Info | None, state_label: str
) -> list[str]:
    lines: list[str] = []
    if bmv2 is not None:
        if bmv2.path:
            lines.append(f"bmv2: {bmv2.path}, version {bmv2.version or '?'}")
            lines.append(f"bmv2: logging macros {bmv2.logging_macros}; thrift {bmv2.thrift}")
        if bmv2.skipped:
            lines.append(f"bmv2: skipped: {bmv2.skipped}")
    if state_label:
        lines.append(f"agent programming: {state_label}")
    soft, other = results.get("softswitch", {}), results.get("bmv2", {})
    for name, (label, unit) in FIGURES.items():
        for target, figures in (("softswitch", soft), ("bmv2", other)):
            sample = figures.get(name)
            if sample is not None:
                lines.append(
                    f"{target:<10} {label + ':':<30} {sample.rate:>12,.0f} {unit:<9}"
                    f"  ({_sample_text(name, sample)})"
                )
        if name in soft and name in other and other[name].rate > 0:
            ratio = soft[name].rate / other[name].rate
            lines.append(f"{'ratio':<10} {label + ':':<30} {ratio:>12.2f} softswitch/bmv2")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.softswitch", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each rate test")
    parser.add_argument("--trials", type=int, default=3, help="trials per target (best is kept)")
    parser.add_argument(
        "--target",
        choices=("softswitch", "bmv2"),
        default="softswitch",
        help="bmv2: measure bmv2's simple_switch_grpc too, in the same run, with the ratios",
    )
    parser.add_argument(
        "--fabric",
        default=str(REF_FABRIC),
        help="the agent programs the largest switch of this fabric; 'none' skips that figure",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.softswitch: needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    targets = [SOFTSWITCH]
    bmv2 = bmv2_info() if args.target == "bmv2" else None
    if bmv2 is not None and not bmv2.skipped:
        targets.append(bmv2_target(bmv2))
    state = None if args.fabric == "none" else fabric_switch_state(Path(args.fabric))
    state_label = (
        ""
        if state is None
        else f"{Path(args.fabric).name} {state.switch_name}: {len(state.groups)} groups,"
        f" {len(state.routes)} routes"
    )
    results = asyncio.run(measure(args.seconds, args.trials, targets, state))
    if args.json:
        out: dict[str, Any] = {
            target: {name: asdict(sample) for name, sample in figures.items()}
            for target, figures in results.items()
        }
        if bmv2 is not None:
            out["bmv2_build"] = asdict(bmv2)
        if "bmv2" in results:
            out["ratio"] = {
                name: round(sample.rate / results["bmv2"][name].rate, 3)
                for name, sample in results["softswitch"].items()
                if results["bmv2"].get(name) and results["bmv2"][name].rate > 0
            }
        # The flat figures as before, softswitch's.
        out |= {name: round(s.rate, 1) for name, s in results["softswitch"].items()}
        print(json.dumps(out))
    else:
        print("\n".join(report(results, bmv2, state_label)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
