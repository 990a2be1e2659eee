"""deploy/*.yaml, the example config of each daemon, cannot go stale: every key in it (set, or
commented out as `# key: default`) is one of the daemon's flags, every flag is in it once, each
commented-out value is the flag's real default, and the file as written loads."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from agent.main import build_parser as agent_parser
from controller.daemon.main import build_parser as controller_parser
from railfabric import cli, configfile
from softswitch.main import build_parser as softswitch_parser

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXAMPLES: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "controller.yaml": controller_parser,
    "agent.yaml": agent_parser,
    "softswitch.yaml": softswitch_parser,
}
# A key commented out with its default: "# key: value" or "# key:" (no value: unset).
COMMENTED = re.compile(r"^# ([a-z][a-z0-9_]*):(?: (.*))?$")


def commented(text: str) -> dict[str, str]:
    return {m[1]: m[2] or "" for line in text.splitlines() if (m := COMMENTED.match(line))}


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_lists_every_flag_once_and_nothing_else(name: str) -> None:
    text = (DEPLOY / name).read_text()
    valid = set(configfile.keys(EXAMPLES[name]()))
    active, inactive = set(yaml.safe_load(text)), set(commented(text))
    assert not active & inactive, f"deploy/{name}: both set and commented out"
    assert active | inactive <= valid, f"deploy/{name}: not flags: {(active | inactive) - valid}"
    assert valid <= active | inactive, f"deploy/{name}: flags missing: {valid - active - inactive}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_commented_out_values_are_the_defaults(name: str, tmp_path: Path) -> None:
    parser = EXAMPLES[name]()
    keys = configfile.keys(parser)
    for key, value in commented((DEPLOY / name).read_text()).items():
        single = tmp_path / f"{key}.yaml"
        single.write_text(f"{key}: {value}\n")
        loaded = configfile.load(parser, single)
        if not loaded:  # no value (the default is unset, or a path that varies) or `false`
            continue
        default = keys[key].default
        assert loaded == {keys[key]: default}, f"deploy/{name}: {key}: default is {default!r}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_loads_as_written(name: str) -> None:
    args = cli.parse_args(EXAMPLES[name](), ["--config", str(DEPLOY / name)])
    assert args.config == DEPLOY / name
