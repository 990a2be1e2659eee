"""`--config FILE`: a daemon's flags as a YAML mapping, one key per flag.

A key is the flag's long name without its dashes, dashes as underscores (`--hold-down-s` is
`hold_down_s`); a flag with no long name (the softswitch's `-i`) is keyed by its dest
(`interfaces`). Every value goes through the flag's own `type` and `choices`, so a bad value
gets the flag's own error text. Repeatable flags take a YAML list, on/off flags a YAML boolean,
and a key with no value leaves the flag's default. `railfabric.cli.parse_args` applies the
file beneath the command line: a flag given there wins. deploy/*.yaml list every key.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

import yaml

# Flags that are about the command line itself, not the daemon.
NOT_KEYS = frozenset({"help", "version", "config"})


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file (and the key)."""


def keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a config file for `parser` may hold, and the flag it sets."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if not action.option_strings:
            continue  # a positional argument: the daemons have none
        longs = [s for s in action.option_strings if s.startswith("--")]
        key = (longs[0][2:] if longs else action.dest).replace("-", "_")
        if key not in NOT_KEYS:
            found[key] = action
    return found


def load(parser: argparse.ArgumentParser, path: Path) -> dict[argparse.Action, object]:
    """The flag values `path` sets, converted by each flag's own type; raise ConfigError."""
    where = f"--config {path}"
    try:
        text = path.read_text("utf-8")
    except OSError as err:
        raise ConfigError(f"{where}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not YAML (not UTF-8 text)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not YAML: {_yaml_problem(err)}") from None
    if data is None:  # empty, or only comments: every flag keeps its default
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a YAML mapping of key: value (one key per flag), "
            f"got {type(data).__name__}"
        )
    known = keys(parser)
    values: dict[argparse.Action, object] = {}
    for key, raw in data.items():
        if not isinstance(key, str) or key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}{_suggest(str(key), known)}")
        if raw is None:  # `key:` with no value: the flag's default
            continue
        action = known[key]
        value = _value(parser, action, raw, f"{where}: {key} ({'/'.join(action.option_strings)})")
        if value is not _OFF:
            values[action] = value
    return values


# An on/off flag written `false`: the flag is not given.
_OFF = object()


def _value(
    parser: argparse.ArgumentParser, action: argparse.Action, raw: object, where: str
) -> object:
    if isinstance(action, argparse._StoreConstAction):  # store_true/store_false/store_const
        if not isinstance(raw, bool):
            raise ConfigError(f"{where}: an on/off flag takes true or false, not {raw!r}")
        return action.const if raw else _OFF
    if isinstance(action, argparse._AppendAction) and action.nargs is None:
        if not isinstance(raw, list):
            raise ConfigError(f"{where}: a repeatable flag takes a YAML list, not {raw!r}")
        return [_convert(parser, action, item, where) for item in raw]
    if type(action) is argparse._StoreAction and action.nargs in (None, "?"):
        return _convert(parser, action, raw, where)
    raise ConfigError(f"{where}: this flag cannot be set from a config file")


def _convert(
    parser: argparse.ArgumentParser, action: argparse.Action, raw: object, where: str
) -> object:
    """One value through the flag's type and choices, as argparse converts it."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        what = "a boolean" if isinstance(raw, bool) else f"a YAML {type(raw).__name__}"
        raise ConfigError(f"{where}: expected a string or a number, got {what}: {raw!r}")
    try:
        value = parser._get_value(action, str(raw))
        parser._check_value(action, value)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{where}: {err.message}") from None
    return value


def _suggest(key: str, known: dict[str, argparse.Action]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (valid keys: {', '.join(sorted(known))})"


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line: where and what (PyYAML's own text spans several)."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        return f"line {err.problem_mark.line + 1}: {err.problem}"
    return " ".join(str(err).split())
