"""Whatever the intent file holds, SIGHUP never ends the controller: a file that cannot be
served is refused (an `intent_refused` event and an ERROR line) and the previous intent keeps
being served; and `railctl check` answers every damaged file with `file:line:` or OK, never a
traceback. Mutations are seeded, so a failure names a case that can be replayed."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from controller.intent import IntentError, load_fabric
from railfabric.v1 import admin_pb2, admin_pb2_grpc
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, start

if TYPE_CHECKING:  # only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub

pytestmark = pytest.mark.integration

RAILCTL = str(Path(sys.executable).parent / "railctl")
INTENT_KINDS = ("intent_reloaded", "intent_refused")
# Bytes that tend to reach the loader's corners: numbers past every width, YAML tags,
# anchors and flow syntax, bytes that are not UTF-8, characters YAML refuses.
TOKENS = [
    b"9",
    b"0",
    b"-",
    b".",
    b"99999999999999999999",
    b"18446744073709551623",
    b"1000000000000",
    b".inf",
    b".nan",
    b"0x_",
    b"!!int ",
    b"!!float ",
    b"!foo ",
    b"&a ",
    b"*a",
    b"~",
    b"[",
    b"{",
    b"}",
    b": ",
    b"\n  ",
    b"\t",
    b"'",
    b'"',
    b"\xff",
    b"\xc3",
    b"\x00",
    b"\x85",
    b"---\n",
    b"255",
    b"511",
]


def mutate(seed: int, data: bytes) -> bytes:
    """One to five random edits of `data`, the same for the same seed. Digits and tokens are
    favoured over raw bytes, which mostly stop the file at its first non-UTF-8 byte."""
    rng = random.Random(seed)
    b = bytearray(data)
    printable = bytes(range(0x20, 0x7F))
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(len(b))
        op = rng.choices(range(7), weights=(2, 2, 1, 3, 4, 1, 1))[0]
        if op == 0:
            b[i] = rng.choice(printable)
        elif op == 1:
            b.insert(i, rng.choice(printable))
        elif op == 2:
            del b[i]
        elif op == 3:
            b[i:i] = rng.choice(TOKENS)
        elif op == 4:
            b[i] = rng.choice(b"0123456789")
        elif op == 5:
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randrange(1, 40)]
        else:
            b[i] = rng.randrange(256)
    return bytes(b)


def _served_after_reload(path: Path, serving: str) -> tuple[str, int] | None:
    """(fabric name, switch count) the controller serves once it takes `path`, or None when
    it must refuse it (this process's loader is the daemon's)."""
    try:
        fabric = load_fabric(path)
    except IntentError:
        return None
    return (fabric.name, len(fabric.switches)) if fabric.name == serving else None


class Reloader:
    """Writes a case, sends SIGHUP, and waits for the daemon's answer to that reload."""

    def __init__(self, proc: subprocess.Popen[bytes], admin: FabricAdminAsyncStub) -> None:
        self.proc = proc
        self.admin = admin
        self.last_ns = 0

    async def newest(self) -> admin_pb2.Event | None:
        events = (await self.admin.ListEvents(admin_pb2.ListEventsRequest(limit=50))).events
        found = [e for e in events if e.kind in INTENT_KINDS and e.wall_ns > self.last_ns]
        return found[-1] if found else None

    async def reload(self, case: str) -> admin_pb2.Event:
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120  # a busy machine: wide, the usual wait is ms
        while (event := await self.newest()) is None:
            assert self.proc.poll() is None, (
                f"{case}: the controller exited ({self.proc.returncode})"
            )
            assert time.monotonic() < deadline, f"{case}: no answer to SIGHUP"
            await asyncio.sleep(0.05)
        self.last_ns = event.wall_ns
        return event

    async def topology(self) -> tuple[str, int]:
        topo = await self.admin.GetTopology(admin_pb2.GetTopologyRequest(), timeout=30)
        return topo.fabric_name, len(topo.switches)


def _cases(fabric: Path, tmp: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """(name, how to put the case at `fabric`): the hostile files, then mutations."""
    lab = LAB.read_bytes()

    def remove() -> None:
        if fabric.is_dir():
            fabric.rmdir()
        else:
            fabric.unlink(missing_ok=True)

    def write(data: bytes) -> Callable[[], None]:
        def put() -> None:
            remove()
            fabric.write_bytes(data)

        return put

    def directory() -> None:
        remove()
        fabric.mkdir()

    def huge() -> None:
        remove()
        with fabric.open("wb") as f:
            f.truncate(64 * 1024 * 1024 + 1)  # sparse, one byte over the limit

    yield "missing file", remove
    yield "a directory", directory
    yield "binary garbage", write(random.Random(7).randbytes(8192))
    yield "a huge file", huge
    yield "another fabric's name", write(lab.replace(b"name: lab-2rail", b"name: other-fabric"))
    yield (
        "a cable length past 64 bits",
        write(lab.replace(b"length_m: 10}", b"length_m: 18446744073709551623}")),
    )
    for seed in range(30):
        yield f"mutation seed {seed}", write(mutate(seed, lab))


async def test_sighup_with_any_file_never_ends_the_controller(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    fabric = tmp_path / "fabric.yaml"
    fabric.write_bytes(LAB.read_bytes())
    port = free_port()
    addr = f"127.0.0.1:{port}"
    log = tmp_path / "controller.log"
    argv = [CONTROLLER, "--fabric", str(fabric), "--listen", addr, "--store", "memory:"]
    with log.open("wb") as out:
        proc = processes.start([*argv, *pki.controller_flags()], stderr=out, stdout=out)
    await start(processes, port, tmp_path / "unused", launch=False)
    refused = 0
    async with pki.channel(addr) as channel:
        daemon = Reloader(proc, admin_pb2_grpc.FabricAdminStub(channel))
        if (startup := await daemon.newest()) is not None:
            daemon.last_ns = startup.wall_ns
        serving = await daemon.topology()
        assert serving == ("lab-2rail", 6)
        for case, put in _cases(fabric, tmp_path):
            put()
            expected = _served_after_reload(fabric, serving[0]) if fabric.is_file() else None
            event = await daemon.reload(case)
            if expected is None:
                refused += 1
                assert event.kind == "intent_refused", (case, event.message)
                assert event.message.startswith(str(fabric)), (case, event.message)
            else:
                assert event.kind == "intent_reloaded", (case, event.message)
                serving = expected
            assert proc.poll() is None, case
            assert await daemon.topology() == serving, case
            if case == "another fabric's name":
                assert "'other-fabric'" in event.message and "'lab-2rail'" in event.message
            if case == "a huge file":
                assert "intent files are at most 67108864 bytes" in event.message

        # A valid file is taken: a third block of servers.
        fabric.unlink()
        fabric.write_bytes(LAB.read_bytes().replace(b"blocks_per_pod: 2", b"blocks_per_pod: 3"))
        event = await daemon.reload("valid file")
        assert event.kind == "intent_reloaded", event.message
        assert await daemon.topology() == ("lab-2rail", 8)
    assert refused >= 6
    errors = [
        line for line in log.read_text(errors="replace").splitlines() if "reload refused" in line
    ]
    assert len(errors) == refused and all(" ERROR " in line for line in errors), errors[:3]


def test_railctl_check_answers_every_damaged_file_with_its_line(tmp_path: Path) -> None:
    lab = LAB.read_bytes()
    outcomes = {0: 0, 1: 0}
    for seed in range(100):
        path = tmp_path / f"mutation-{seed}.yaml"
        path.write_bytes(mutate(1000 + seed, lab))
        done = subprocess.run(
            [RAILCTL, "check", str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        case = f"seed {1000 + seed}: rc {done.returncode}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, case
        assert done.returncode in outcomes, case
        outcomes[done.returncode] += 1
        if done.returncode == 1:
            assert re.match(rf"railctl: {re.escape(str(path))}:\d+: ", done.stderr), case
        else:
            assert f"{path}: OK:" in done.stdout, case
    assert outcomes[1] >= 50, outcomes  # the mutations mostly break the file
