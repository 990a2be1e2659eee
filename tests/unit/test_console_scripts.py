"""The installed console scripts meet bad input with one line and an exit code, never a
traceback: 2 when the command line is wrong, 1 when the machine refuses (an address in use,
an unreachable controller). Every script has --version, --log-level and help with defaults,
and railctl stays quiet when its reader goes away (`railctl ... | head -1`)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.daemon.main import build_parser as controller_parser
from railfabric import __version__
from railfabric.p4info import DEFAULT_P4INFO
from tests import pki

pytestmark = pytest.mark.unit

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
LAB = str(REPO / "examples" / "lab-2rail.yaml")
SCRIPTS = ("railfabric-controller", "railfabric-agent", "railctl")
# Python's own complaints when something escapes: none may ever reach the operator.
NOISE = ("Traceback", "Exception ignored", "Task was destroyed", "was never awaited")

AGENT = [
    "--switch", "tor-r1-b1",
    "--controller", "127.0.0.1:1",
    "--target", "127.0.0.1:1",
    "--device-id", "1",
    "--port-map", "1=lo",
    "--p4info", str(DEFAULT_P4INFO),
]  # fmt: skip
ANY_PORT = ["--listen", "127.0.0.1:0"]
# The controller's certificate: the checks below come after TLS's at start.
CTL = ["--fabric", LAB, *pki.controller_flags()]
OPERATOR = pki.flags(pki.operator())


def run(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_clean(done: subprocess.CompletedProcess[str]) -> None:
    for noise in NOISE:
        assert noise not in (done.stderr or "") + (done.stdout or ""), done.stderr


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A port something else listens on (plain socket, no SO_REUSEPORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


BAD = [
    # (script, arguments, exit code, a fragment of the one line on stderr)
    ("railfabric-controller", ["--fabric", LAB, "--listen", "foo"], 2, "--listen: 'foo'"),
    ("railfabric-controller", ["--fabric", LAB, "--listen", ":50051"], 2, "--listen"),
    ("railfabric-controller", ["--fabric", LAB, "--listen", "127.0.0.1:99999"], 2, "99999"),
    ("railfabric-controller", ["--fabric", LAB, "--metrics", ":9100"], 2, "--metrics: ':9100'"),
    ("railfabric-controller", ["--fabric", LAB, "--metrics", "9100"], 2, "--metrics"),
    ("railfabric-controller", ["--fabric", LAB, "--log-level", "loud"], 2, "--log-level"),
    ("railfabric-controller", ["--fabric", LAB, "--hold-down-s", "nan"], 2, "--hold-down-s"),
    ("railfabric-controller", ["--fabric", LAB, "--hold-down-s", "-1"], 2, "--hold-down-s"),
    ("railfabric-controller", [*CTL, "--damping-reuse", "5000"], 2, "reuse"),
    ("railfabric-controller", [*CTL, "--fabric", "/nonexistent.yaml"], 2, "/nonexistent.yaml"),
    ("railfabric-controller", [], 2, "--fabric"),
    ("railfabric-controller", [*CTL, *ANY_PORT, "--state-dir", LAB], 1, "--state-dir"),
    ("railfabric-controller", ["--fabric", LAB, *ANY_PORT], 2, "TLS needs --tls-ca"),
    ("railfabric-agent", [*AGENT, "--log-level", "loud"], 2, "--log-level"),
    ("railfabric-agent", [*AGENT, "--lldp-interval", "0"], 2, "--lldp-interval"),
    ("railfabric-agent", [*AGENT, "--counters-interval", "inf"], 2, "--counters-interval"),
    ("railfabric-agent", [*AGENT, "--device-id", "one"], 2, "--device-id"),
    ("railfabric-agent", [*AGENT, "--port-map", "1=a,1=b"], 2, "mapped twice"),
    ("railfabric-agent", [*AGENT, "--device-config", "/nonexistent.json"], 2, "/nonexistent"),
    ("railfabric-agent", AGENT[2:], 2, "--switch"),
    ("railctl", ["--log-level", "loud", "check", LAB], 2, "--log-level"),
    ("railctl", ["--controller", "127.0.0.1:99999", "switches"], 2, "--controller"),
    ("railctl", ["events", "--limit", "-1"], 2, "--limit"),
    ("railctl", ["path", "10.0.0.2", "10.0.0.18", "--sport", "-1"], 2, "--sport"),
    ("railctl", ["path", "10.0.0.2", "10.0.0.18", "--sport", "1", "--qp", "-3"], 2, "--qp"),
    ("railctl", ["path", "10.0.0.2", "10.0.0.18", "--sport", "1", "--proto", "300"], 2, "--proto"),
    ("railctl", ["path", LAB, "10.0.0.2", "nope", "--sport", "1"], 1, "nope"),
    ("railctl", ["check", "/nonexistent.yaml"], 1, "/nonexistent.yaml"),
    ("railctl", ["--controller", "127.0.0.1:1", *OPERATOR, "switches"], 1, "UNAVAILABLE"),
    ("railctl", ["--controller", "127.0.0.1:1", "switches"], 1, "TLS needs --tls-ca"),
    ("railctl", ["bogus"], 2, "bogus"),
]


@pytest.mark.parametrize(
    ("script", "args", "code", "says"),
    BAD,
    # The test CA's directory is random: ids name it PKI, so every process collects one set.
    ids=[f"{b[0]} {' '.join(b[1])}".replace(str(pki.ca_dir()), "PKI")[-70:] for b in BAD],
)
def test_bad_arguments_get_one_line_and_an_exit_code(
    script: str, args: list[str], code: int, says: str
) -> None:
    done = run(script, *args)
    assert_clean(done)
    assert done.returncode == code, done.stderr
    assert says in done.stderr.strip().splitlines()[-1], done.stderr


def test_a_controller_address_in_use_is_named() -> None:
    with held_port() as port:
        done = run("railfabric-controller", *CTL, "--listen", f"127.0.0.1:{port}")
    assert_clean(done)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"railfabric-controller: --listen 127.0.0.1:{port}: address in use"
    ]


def test_a_metrics_address_in_use_is_named_without_server_noise() -> None:
    with held_port() as port:
        done = run("railfabric-controller", *CTL, *ANY_PORT, "--store", "memory:",
                   "--metrics", f"127.0.0.1:{port}")  # fmt: skip
    assert_clean(done)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"railfabric-controller: --metrics 127.0.0.1:{port}: address in use"
    ]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_version_log_level_and_defaults_in_help(script: str) -> None:
    done = run(script, "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"{script} {__version__}")
    done = run(script, "--help")
    assert done.returncode == 0
    assert "--log-level {debug,info,warning,error}" in done.stdout
    assert "(default: info)" in done.stdout
    # A flag without a default says so by its help, not by "(default: None)".
    assert "None)" not in " ".join(done.stdout.split())


def test_controller_keeps_v_as_debug() -> None:
    parse = controller_parser().parse_args
    assert parse(["--fabric", LAB]).log_level == "info"
    assert parse(["-v", "--fabric", LAB]).log_level == "debug"
    assert parse(["--verbose", "--fabric", LAB]).log_level == "debug"
    assert parse(["--log-level", "WARNING", "--fabric", LAB]).log_level == "warning"


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """railctl with its stdout a pipe nobody reads any more (`railctl ... | head -1` after
    head has exited): every write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [str(BIN / "railctl"), *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)


PATH = ["path", LAB, "10.0.0.2", "10.0.0.18", "--sport", "49152"]


@pytest.mark.parametrize(
    "args",
    [
        ["check", LAB],
        ["--json", "check", LAB],
        ["expand", LAB],
        ["--json", "expand", LAB],
        PATH,
        ["--json", *PATH],
        ["--json", "check", "/nonexistent.yaml"],
        ["--help"],
        ["path", "--help"],
        ["--version"],
    ],
    ids=" ".join,
)
def test_railctl_offline_output_into_a_closed_pipe_is_quiet(args: list[str]) -> None:
    done = closed_pipe_run(*args)
    assert_clean(done)
    assert "BrokenPipe" not in done.stderr
    assert done.returncode in (0, 1), done.stderr


def test_railctl_into_head_through_a_real_pipe() -> None:
    """The shell's way: `railctl expand FABRIC | head -1`."""
    done = subprocess.run(
        f"{BIN / 'railctl'} expand {LAB} | head -1; echo rc=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert_clean(done)
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[1] in ("rc=0", "rc=1"), done.stdout
