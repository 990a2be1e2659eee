"""softswitch's command line: bmv2's shape, clear errors naming the bad flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from softswitch.main import UsageError, build_parser, parse_options

pytestmark = pytest.mark.unit


def options(*argv: str) -> object:
    return parse_options(build_parser().parse_args([*argv, "--insecure"]))


def test_good_command_line() -> None:
    opts = options(
        "--device-id", "3", "--grpc-addr", "127.0.0.1:9600", "-i", "1@veth1", "-i", "2@v2"
    )
    assert opts.ports == {1: "veth1", 2: "v2"}  # type: ignore[attr-defined]
    assert opts.cpu_port == 255  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-i", "veth1"], "expected PORT@IFNAME"),
        (["-i", "x@veth1"], "expected PORT@IFNAME"),
        (["-i", "1@a", "-i", "1@b"], "given twice"),
        (["-i", "1@a", "-i", "2@a"], "given twice"),
        (["-i", "255@a"], "not the CPU port"),
        (["-i", "600@a"], "port must be in"),
        (["--grpc-addr", "nohost"], "--grpc-addr"),
        (["--port-rate-mbps", "0"], "--port-rate-mbps"),
    ],
)
def test_bad_flags_are_named(argv: list[str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        options("--device-id", "1", *argv)


def test_missing_interface_is_a_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "softswitch.main", "--device-id", "1", "--insecure", "-i", "1@nx0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "nx0" in done.stderr and "does not exist" in done.stderr
