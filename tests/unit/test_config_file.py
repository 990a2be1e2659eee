"""`--config FILE` (railfabric.configfile, railfabric.cli.parse_args) on the daemons' real
parsers: keys are the long flags, values go through each flag's own type, the command line
wins, required flags may come from the file, and every bad file gets one error line naming the
file and the key, exit 2, as argparse's own errors."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.main import build_parser as agent_parser
from controller.daemon.main import build_parser as controller_parser
from railfabric import cli
from softswitch.main import build_parser as softswitch_parser

pytestmark = pytest.mark.unit

BIN = Path(sys.executable).parent
LAB = str(Path(__file__).resolve().parents[2] / "examples" / "lab-2rail.yaml")
AGENT_REQUIRED = """\
switch: tor-r1-b1
controller: 127.0.0.1:50051
target: 127.0.0.1:9559
device_id: 7
port_map: 1=veth1
"""


def parse(
    build: Callable[[], argparse.ArgumentParser], tmp_path: Path, text: str, *argv: str
) -> argparse.Namespace:
    config = tmp_path / "daemon.yaml"
    config.write_text(text)
    return cli.parse_args(build(), ["--config", str(config), *argv])


def refusal(
    build: Callable[[], argparse.ArgumentParser],
    tmp_path: Path,
    text: str | bytes,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """The error line of a refused --config, checked to be argparse's: exit 2, PROG: error:."""
    config = tmp_path / "daemon.yaml"
    if isinstance(text, bytes):
        config.write_bytes(text)
    else:
        config.write_text(text)
    parser = build()
    with pytest.raises(SystemExit) as done:
        cli.parse_args(parser, ["--config", str(config), "--fabric", LAB])
    assert done.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    prefix = f"{parser.prog}: error: --config {config}: "
    assert line.startswith(prefix), line
    return line.removeprefix(prefix)


def test_values_go_through_each_flags_type(tmp_path: Path) -> None:
    args = parse(
        controller_parser,
        tmp_path,
        f"fabric: {LAB}\nhold_down_s: 1\nlisten: '[::1]:7000'\nlog_level: WARNING\n"
        "store: 'memory:'\nverbose: false\ninsecure: true\n",
    )
    assert args.fabric == Path(LAB)  # type=Path
    assert args.hold_down_s == 1.0 and isinstance(args.hold_down_s, float)
    assert args.listen == "[::1]:7000"
    assert args.log_level == "warning"  # type=str.lower, then choices
    assert args.store.url == "memory:" and args.store.path is None
    assert args.insecure is True
    assert args.damping_suppress == 3000.0  # not in the file: the default


def test_the_command_line_wins_and_required_flags_may_come_from_the_file(tmp_path: Path) -> None:
    args = parse(agent_parser, tmp_path, AGENT_REQUIRED + "lldp_ttl: 9\n", "--device-id", "8")
    assert (args.switch, args.device_id, args.lldp_ttl) == ("tor-r1-b1", 8, 9)
    # The same flag abbreviated, or written with =, still finds the file.
    config = str(tmp_path / "daemon.yaml")
    for argv in (["--conf", config], [f"--config={config}"]):
        assert cli.parse_args(agent_parser(), argv).switch == "tor-r1-b1"


def test_a_required_flag_in_neither_place_is_still_required(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(agent_parser, tmp_path, AGENT_REQUIRED.replace("switch: tor-r1-b1\n", ""))
    assert "the following arguments are required: --switch" in capsys.readouterr().err
    # A parser used with a file keeps its flags required for the next parse.
    parser = agent_parser()
    config = tmp_path / "daemon.yaml"
    config.write_text(AGENT_REQUIRED)
    cli.parse_args(parser, ["--config", str(config)])
    assert all(a.required for a in parser._actions if a.dest in ("switch", "port_map"))


def test_lists_and_on_off_flags_take_yaml_lists_and_booleans(tmp_path: Path) -> None:
    text = "device_id: 1\ninterfaces: [1@veth1, 3@veth3]\ninsecure: true\n"
    args = parse(softswitch_parser, tmp_path, text)
    assert args.interfaces == ["1@veth1", "3@veth3"] and args.insecure is True
    # -i on the command line replaces the file's list rather than adding to it.
    assert parse(softswitch_parser, tmp_path, text, "-i", "2@veth2").interfaces == ["2@veth2"]
    # A key without a value, or false for an on/off flag: the default.
    args = parse(softswitch_parser, tmp_path, "device_id: 1\nmetrics:\ninsecure: false\n")
    assert (args.metrics, args.insecure, args.interfaces) == (None, False, [])


def test_an_empty_file_sets_nothing(tmp_path: Path) -> None:
    args = parse(softswitch_parser, tmp_path, "# only comments\n", "--device-id", "3")
    assert args.device_id == 3 and args.grpc_addr == "127.0.0.1:9559"


BAD = [
    # (file text, the error after "--config FILE: ")
    ("hold_down: 1\n", "unknown key 'hold_down' (did you mean 'hold_down_s'?)"),
    ("help: true\n", "unknown key 'help' (valid keys: advertise, damping_half_life_s, "),
    ("config: other.yaml\n", "unknown key 'config' "),
    ("1: x\n", "unknown key 1 (valid keys: "),
    ("hold_down_s: nan\n", "hold_down_s (--hold-down-s): 'nan': expected a finite number >= 0"),
    ("listen: foo\n", "listen (--listen): 'foo' is not HOST:PORT (e.g. 127.0.0.1:50051)"),
    (
        "log_level: loud\n",
        "log_level (--log-level): invalid choice: 'loud' (choose from 'debug', 'info', "
        "'warning', 'error')",
    ),
    ("store: etcd://ha\n", "store (--store): 'etcd://ha': endpoint 'ha' lacks HOST:PORT"),
    ("listen: true\n", "listen (--listen): expected a string or a number, got a boolean: True"),
    ("listen: [a, b]\n", "listen (--listen): expected a string or a number, got a YAML list"),
    ("insecure: 1\n", "insecure (--insecure): an on/off flag takes true or false, not 1"),
    ("verbose: yes please\n", "verbose (-v/--verbose): an on/off flag takes true or false"),
    ("- fabric\n", "expected a YAML mapping of key: value (one key per flag), got list"),
    ("just a string\n", "expected a YAML mapping of key: value (one key per flag), got str"),
    ("fabric: [\n", "not YAML: line 2: expected the node content, but found '<stream end>'"),
    ("a: b\n  c: d\n", "not YAML: line 2: mapping values are not allowed here"),
    (b"\xff\xfe", "not YAML (not UTF-8 text)"),
]


@pytest.mark.parametrize(("text", "says"), BAD, ids=[str(b[0])[:30] for b in BAD])
def test_a_bad_file_is_refused_naming_the_file_and_key(
    text: str | bytes, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(controller_parser, tmp_path, text, capsys).startswith(says)


def test_a_repeatable_flag_takes_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "softswitch.yaml"
    config.write_text("interfaces: 1@veth1\n")
    with pytest.raises(SystemExit):
        cli.parse_args(softswitch_parser(), ["--config", str(config), "--device-id", "1"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"railfabric-softswitch: error: --config {config}: interfaces (-i): a repeatable flag "
        "takes a YAML list, not '1@veth1'"
    )


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(controller_parser(), ["--config", str(tmp_path / "absent.yaml")])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"railfabric-controller: error: --config {tmp_path / 'absent.yaml'}: cannot read it "
        "(No such file or directory)"
    )


@pytest.mark.parametrize(
    ("script", "line"),
    [
        ("railfabric-controller", "railfabric-controller: error: --config {}: unknown key"),
        ("railfabric-agent", "railfabric-agent: error: --config {}: unknown key"),
        # The softswitch says a refused start in one line (softswitch.main.parse_args).
        ("railfabric-softswitch", "railfabric-softswitch: error: --config {}: unknown key"),
    ],
)
def test_every_daemon_refuses_a_bad_file_with_exit_2(
    script: str, line: str, tmp_path: Path
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("no_such_flag: 1\n")
    done = subprocess.run(
        [str(BIN / script), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(line.format(config)), done.stderr
