"""The installed `railfabric-softswitch` refuses bad starts with one line on stderr that names
the flag (or interface), no traceback, and exit 2 (bad command line or TLS files) or 1 (cannot
start)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mininet_labs.processes import free_port as _free_port
from railfabric.tls import Kind
from tests import pki

pytestmark = pytest.mark.unit

EXE = Path(sys.executable).parent / "railfabric-softswitch"
PREFIX = "railfabric-softswitch: error: "
HELD = "HELD"  # stands for the address of a softswitch that is already serving


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *argv], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.fixture(scope="module")
def held_address() -> Iterator[str]:
    """A first softswitch serving on a port (as the second one would find it)."""
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.Popen(
        [
            str(EXE),
            "--device-id",
            "1",
            "--grpc-addr",
            address,
            "--insecure",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(address.rpartition(":")[2]))) == 0:
                    break
            assert time.monotonic() < deadline, "the first softswitch did not listen"
            time.sleep(0.05)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


CASES = [
    # (argv after --device-id 1 --grpc-addr FREE, exit code, what the line must say)
    (["-i", "veth1"], 2, "-i 'veth1': expected PORT@IFNAME"),
    (["-i", "x@veth1"], 2, "-i 'x@veth1': expected PORT@IFNAME"),
    (["-i", "1@"], 2, "-i '1@': expected PORT@IFNAME"),
    (["-i", "@veth1"], 2, "-i '@veth1': expected PORT@IFNAME"),
    (["-i", "0@veth1"], 2, "-i '0@veth1': port must be in 1..510"),
    (["-i", "600@veth1"], 2, "-i '600@veth1': port must be in 1..510"),
    (["-i", "255@veth1"], 2, "not the CPU port 255"),
    (["-i", "1@a", "-i", "1@b"], 2, "port 1 given twice"),
    (["-i", "1@no-such-if0"], 1, "-i 1@no-such-if0: interface 'no-such-if0' does not exist"),
    (["--grpc-addr", "nohost"], 2, "--grpc-addr 'nohost': expected HOST:PORT"),
    (["--grpc-addr", "127.0.0.1:70000"], 2, "--grpc-addr '127.0.0.1:70000'"),
    (["--grpc-addr", "192.0.2.1:9559"], 1, "--grpc-addr 192.0.2.1:9559: cannot listen"),
    (["--grpc-addr", HELD], 1, "--grpc-addr {held} is in use"),
    (["--log-level", "loud"], 2, "argument --log-level: invalid choice: 'loud'"),
    (["--port-rate-mbps", "0"], 2, "--port-rate-mbps 0.0: must be > 0"),
    (["--bogus"], 2, "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("argv", "code", "needle"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_start_is_one_clear_line(
    argv: list[str], code: int, needle: str, request: pytest.FixtureRequest
) -> None:
    held = request.getfixturevalue("held_address") if HELD in argv else ""
    argv = [held if a == HELD else a for a in argv]
    free = f"127.0.0.1:{_free_port()}"
    done = _run(["--device-id", "1", "--grpc-addr", free, "--insecure", *argv])
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(PREFIX), lines[0]
    assert needle.format(held=held) in lines[0]
    assert done.returncode == code


def test_missing_device_id_is_one_line() -> None:
    done = _run(["-i", "1@veth1"])
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        PREFIX + "the following arguments are required: --device-id"
    ]


def test_version_and_help_show_the_shared_flags() -> None:
    version = _run(["--version"])
    assert version.returncode == 0
    assert version.stdout.startswith("railfabric-softswitch ")
    shown = _run(["--help"])
    assert shown.returncode == 0
    assert "--log-level {debug,info,warning,error}" in shown.stdout
    assert "(default: 127.0.0.1:9559)" in shown.stdout
    assert "(default: 255)" in shown.stdout


def test_log_level_is_case_insensitive() -> None:
    # Existing scripts pass WARNING: accepted, so the start gets as far as the interface.
    address = f"127.0.0.1:{_free_port()}"
    done = _run(
        ["--device-id", "1", "--grpc-addr", address, "--log-level", "WARNING", "-i", "1@nx0",
         "--insecure"]
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [PREFIX + "-i 1@nx0: interface 'nx0' does not exist"]


def _tls_cases() -> list[tuple[list[str], str]]:
    switch, operator = pki.switch("tor-r1-b1"), pki.operator()
    return [
        ([], "TLS needs --tls-ca, --tls-cert, --tls-key (railctl pki issues them); or --insecure"),
        (["--tls-ca", str(switch.ca)], "TLS needs --tls-cert, --tls-key"),
        (["--insecure", "--tls-key", str(switch.key)], "--insecure and --tls-key contradict"),
        (
            [*pki.flags(switch)[:3], "/nonexistent.crt", *pki.flags(switch)[4:]],
            "--tls-cert /nonexistent.crt: No such file or directory",
        ),
        (
            [*pki.flags(switch)[:5], str(operator.key)],
            f"--tls-key {operator.key} is not the key of --tls-cert {switch.cert}",
        ),
        (pki.flags(operator), f"--tls-cert {operator.cert} names {Kind.OPERATOR}/tests; a switch"),
    ]


def test_a_start_without_tls_or_with_unusable_tls_is_refused_naming_the_flags() -> None:
    """TLS or --insecure must be said; files that cannot serve are named, before anything
    else is opened (the interface here does not exist: it is never reached)."""
    for argv, needle in _tls_cases():
        free = f"127.0.0.1:{_free_port()}"
        done = _run(["--device-id", "1", "--grpc-addr", free, "-i", "1@nx0", *argv])
        lines = done.stderr.splitlines()
        assert done.returncode == 2, (argv, done.stderr)
        assert len(lines) == 1 and lines[0].startswith(PREFIX), done.stderr
        assert needle in lines[0], (needle, lines[0])
