"""The bmv2 target as the lab builds it, from `simple_switch_grpc --help` texts of a build with
Thrift and one without (tests/lab/bmv2_help.py, reconstructions): the command line, the help
read once per binary, and queue pacing through simple_switch_CLI. No bmv2 needed: fake
binaries on PATH stand in where a process is run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mininet_labs.netlinks import LabError
from mininet_labs.processes import (
    BMV2_PORT_RATE_MBPS,
    NO_THRIFT,
    PACED_FRAME_BYTES,
    Bmv2,
    Bmv2Build,
    Softswitch,
    bmv2_build,
    make_target,
    queue_rate_commands,
)
from railfabric.tls import TlsFiles
from tests.lab.bmv2_help import HELP_WITH_THRIFT, HELP_WITHOUT_THRIFT

pytestmark = pytest.mark.unit

THRIFT = Bmv2Build.from_help(HELP_WITH_THRIFT)
NO_THRIFT_BUILD = Bmv2Build.from_help(HELP_WITHOUT_THRIFT)
PORTS = {1: "rfl0001s1p1", 3: "rfl0001s1p3"}


def fake_binary(directory: Path, name: str, script: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only directory on PATH, for fake binaries (a real bmv2 stays out of sight)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


# --- what the help says -------------------------------------------------------------------


def test_the_help_tells_a_thrift_build_from_one_without() -> None:
    assert THRIFT.thrift and not NO_THRIFT_BUILD.thrift
    assert THRIFT.own - NO_THRIFT_BUILD.own == {"thrift-port"}
    assert THRIFT.target == NO_THRIFT_BUILD.target
    assert {"grpc-server-addr", "cpu-port", "priority-queues"} <= THRIFT.target
    assert {"interface", "device-id", "no-p4", "help", "log-level"} <= THRIFT.own
    # Target options are not bmv2's own: before `--` they make bmv2 exit 1.
    assert not THRIFT.own & {"grpc-server-addr", "cpu-port", "priority-queues"}
    assert THRIFT.missing() == NO_THRIFT_BUILD.missing() == []


def test_a_description_mentioning_an_option_is_not_an_option() -> None:
    # "--interface" and "--log-file" appear inside wrapped descriptions only.
    lines = [line for line in HELP_WITH_THRIFT.splitlines() if "--interface" in line]
    assert any(not line.startswith("  -") for line in lines)
    assert "log-file" in THRIFT.own  # listed as an option of its own, too
    assert Bmv2Build.from_help("").missing() == [
        "--interface",
        "--device-id",
        "--no-p4",
        "--grpc-server-addr (after --)",
        "--cpu-port (after --)",
        "--priority-queues (after --)",
        "--grpc-server-ssl (after --)",
        "--grpc-server-cacert (after --)",
        "--grpc-server-cert (after --)",
        "--grpc-server-key (after --)",
        "--grpc-server-with-client-auth (after --)",
    ]


def test_a_build_without_an_option_the_lab_needs_is_refused_naming_it() -> None:
    text = HELP_WITHOUT_THRIFT.replace("  --priority-queues arg", "  --priority-queuez arg")
    old = Bmv2(build=Bmv2Build.from_help(text))
    assert old.unavailable() == (
        "simple_switch_grpc's --help lists no --priority-queues (after --)"
    )


# --- the command line ---------------------------------------------------------------------


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    before, dashes, after = argv[1:], [], []
    if "--" in before:
        at = before.index("--")
        before, dashes, after = before[:at], before[at : at + 1], before[at + 1 :]
    assert dashes == ["--"], argv
    return before, after


def options_in(args: list[str]) -> set[str]:
    short = {"-i": "interface", "-L": "log-level"}
    return {a[2:] if a.startswith("--") else short[a] for a in args if a.startswith("-")}


@pytest.mark.parametrize("build", [THRIFT, NO_THRIFT_BUILD], ids=["thrift", "no-thrift"])
def test_every_option_is_on_the_side_of_double_dash_its_build_lists_it(
    build: Bmv2Build,
) -> None:
    tls = TlsFiles(Path("/pki/ca.crt"), Path("/pki/sw.crt"), Path("/pki/sw.key"))
    argv = build.argv("simple_switch_grpc", 7, "127.0.0.1:50001", PORTS, 9091, tls=tls)
    before, after = split(argv)
    assert options_in(before) <= build.own
    assert options_in(after) <= build.target
    assert "--grpc-server-with-client-auth" in after


def test_tls_options_name_the_switchs_files() -> None:
    tls = TlsFiles(Path("/pki/ca.crt"), Path("/pki/sw.crt"), Path("/pki/sw.key"))
    argv = NO_THRIFT_BUILD.argv("simple_switch_grpc", 7, "127.0.0.1:50001", PORTS, 9091, tls=tls)
    assert argv[-8:] == [
        "--grpc-server-ssl",
        "--grpc-server-with-client-auth",
        "--grpc-server-cacert", "/pki/ca.crt",
        "--grpc-server-cert", "/pki/sw.crt",
        "--grpc-server-key", "/pki/sw.key",
    ]  # fmt: skip


def test_thrift_port_only_on_a_build_with_thrift() -> None:
    assert THRIFT.argv("simple_switch_grpc", 7, "127.0.0.1:50001", PORTS, 9091) == [
        "simple_switch_grpc",
        "--device-id", "7",
        "--thrift-port", "9091",
        "-i", "1@rfl0001s1p1",
        "-i", "3@rfl0001s1p3",
        "--no-p4",
        "--",
        "--grpc-server-addr", "127.0.0.1:50001",
        "--cpu-port", "255",
        "--priority-queues", "8",
    ]  # fmt: skip
    without = NO_THRIFT_BUILD.argv("simple_switch_grpc", 7, "127.0.0.1:50001", PORTS, 9091)
    assert "--thrift-port" not in without and "9091" not in without
    assert without[:3] == ["simple_switch_grpc", "--device-id", "7"]
    assert without[-7:] == [
        "--",
        "--grpc-server-addr", "127.0.0.1:50001",
        "--cpu-port", "255",
        "--priority-queues", "8",
    ]  # fmt: skip


def test_the_help_is_read_once_per_binary(bin_dir: Path) -> None:
    calls = bin_dir / "calls"
    help_file = bin_dir / "help.txt"
    help_file.write_text(HELP_WITHOUT_THRIFT)
    fake = fake_binary(bin_dir, "simple_switch_grpc", f'echo "$@" >> {calls}\ncat {help_file}\n')
    assert bmv2_build() == bmv2_build() == NO_THRIFT_BUILD
    assert calls.read_text() == "--help\n"
    # Another binary (here: the same path, rebuilt with Thrift) is read again.
    help_file.write_text(HELP_WITH_THRIFT)
    os.utime(fake, ns=(fake.stat().st_atime_ns, fake.stat().st_mtime_ns + 10**9))
    assert bmv2_build().thrift
    assert calls.read_text() == "--help\n--help\n"
    target = Bmv2()
    assert target.argv(3, "127.0.0.1:1", PORTS, 4242, None)[3:5] == ["--thrift-port", "4242"]


def test_a_help_that_fails_says_so(bin_dir: Path) -> None:
    fake_binary(bin_dir, "simple_switch_grpc", "echo broken >&2\nexit 3\n")
    with pytest.raises(LabError, match=r"simple_switch_grpc --help exited with 3: broken"):
        bmv2_build()
    fake = bin_dir / "simple_switch_grpc"
    assert Bmv2().unavailable() == f"{fake} --help exited with 3: broken"


def test_absent_bmv2_is_named(bin_dir: Path) -> None:
    assert Bmv2().unavailable() == "simple_switch_grpc (bmv2) is not on PATH"


# --- rates and pacing ---------------------------------------------------------------------


def test_each_target_has_its_own_port_rate() -> None:
    assert make_target("softswitch").port_rate_mbps == 20.0
    assert make_target("softswitch", 7.5).port_rate_mbps == 7.5
    assert make_target("bmv2").port_rate_mbps == BMV2_PORT_RATE_MBPS == 5.0
    # 5 Mb/s of the QoS scenarios' 1,042-byte frames: 600 frames/s; 20 Mb/s: 2,399.
    assert PACED_FRAME_BYTES == 1042
    assert Bmv2(build=THRIFT).queue_rate_pps == 600
    assert Bmv2(20.0, build=THRIFT).queue_rate_pps == 2399
    assert Softswitch(7.5).describe() == "softswitch, ports at 7.5 Mb/s"


def test_only_the_lossless_queue_of_each_port_is_paced() -> None:
    assert queue_rate_commands(600, [3, 1, 2]) == [
        "set_queue_rate 600 1 3",
        "set_queue_rate 600 2 3",
        "set_queue_rate 600 3 3",
    ]


def test_without_thrift_nothing_is_paced_and_says_why(bin_dir: Path) -> None:
    target = Bmv2(build=NO_THRIFT_BUILD)
    assert target.unpaced() == NO_THRIFT
    assert NO_THRIFT == "bmv2 built without Thrift: no simple_switch_CLI to pace queues"
    assert NO_THRIFT in target.describe()
    target.after_pipeline(9090, [1, 2])  # nothing to do, nothing run
    assert Bmv2(build=THRIFT).unpaced() == (
        "simple_switch_grpc has Thrift, but simple_switch_CLI is not on PATH to pace queues"
    )


def test_a_thrift_build_paces_through_simple_switch_cli(bin_dir: Path) -> None:
    record = bin_dir / "cli"
    fake_binary(
        bin_dir,
        "simple_switch_CLI",
        f'echo "$@" > {record}\ncat >> {record}\n'
        "echo 'Obtaining JSON from switch...'; echo Done\n",
    )
    target = Bmv2(build=THRIFT)
    assert target.unpaced() is None
    assert target.describe() == (
        "bmv2, 8 priority queues per port; priority 3 (lossless class) paced at 600 frames/s "
        "= 5 Mb/s of 1,042-byte frames"
    )
    target.after_pipeline(9091, [2, 1])
    assert record.read_text().splitlines() == [
        "--thrift-port 9091",
        "set_queue_rate 600 1 3",
        "set_queue_rate 600 2 3",
    ]


@pytest.mark.parametrize(
    "script",
    [
        "cat > /dev/null; echo 'RuntimeCmd: Error: Invalid rate_pps'\n",
        "cat > /dev/null; echo 'Error when requesting JSON config from switch'; exit 1\n",
    ],
    ids=["refused", "no-switch"],
)
def test_pacing_that_fails_fails_the_lab_with_the_cli_output(bin_dir: Path, script: str) -> None:
    fake_binary(bin_dir, "simple_switch_CLI", script)
    with pytest.raises(LabError, match=r"simple_switch_CLI --thrift-port 9091 <<< "):
        Bmv2(build=THRIFT).after_pipeline(9091, [1])
