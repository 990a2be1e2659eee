"""What every railfabric command line shares: --log-level, --version, help that shows
defaults, HOST:PORT flags, and one way to configure logging. The daemons and railctl build
their parsers with `parser()` so a flag means the same everywhere; the daemons use
`daemon_parser()` and `parse_args()`, which add --config FILE and --log-format."""

from __future__ import annotations

import argparse
import datetime
import errno
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from railfabric import __version__, configfile

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: "(default: None)" on a required flag, or
    one whose absence the help already explains, says nothing true."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def host_port(value: str) -> tuple[str, int]:
    """HOST:PORT ([V6]:PORT for IPv6) -> (host, port); ValueError says what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:50051)")
    if int(port) > 65535:
        raise ValueError(f"{value!r}: port {port} is out of range (0-65535)")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"{value!r}: write an IPv6 host in brackets, e.g. [::1]:50051")
    return host, int(port)


def bind_refusal(err: OSError, host: str) -> str:
    """Why a server could not bind HOST:PORT, in a few words, for its flag's error line."""
    if err.errno == errno.EADDRINUSE:
        return "address in use"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve {host!r} ({err.strerror})"
    # By its number: a server library may have put its own sentence around the system's.
    return os.strerror(err.errno) if err.errno else str(err)


_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "": 1.0}


def duration_s(value: str) -> float:
    """An argparse type: a duration, "10s", "500ms", "2m" or plain seconds, >= 0."""
    text = value.strip()
    number = text.rstrip("ms")
    unit = text[len(number) :]
    try:
        seconds = float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration (e.g. 10s, 500ms, 2m)"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite duration >= 0")
    return seconds


def address(value: str) -> str:
    """An argparse type: a HOST:PORT flag, refused with `host_port`'s words."""
    try:
        host_port(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def addresses(value: str) -> tuple[str, ...]:
    """An argparse type: HOST:PORT[,HOST:PORT...], each refused with `host_port`'s words."""
    listed = tuple(address(part.strip()) for part in value.split(","))
    if len(set(listed)) != len(listed):
        raise argparse.ArgumentTypeError(f"{value!r}: an address is listed twice")
    return listed


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with --version and --log-level; --help shows every default."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=_DefaultsFormatter,
    )
    p.add_argument("--version", action="version", version=f"{prog} {__version__}")
    p.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default="info",
        help="log to stderr at this level and above",
    )
    return p


def daemon_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """`parser()` plus what a daemon run by a service manager needs: --config, --log-format."""
    p = parser(prog, description)
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML file of flag values, one key per flag (--log-level is log_level); flags "
        "on the command line win (examples: deploy/*.yaml)",
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="json: one JSON object per line (time, level, logger, message, exception)",
    )
    return p


class _Refused(Exception):
    pass


class _Scout(argparse.ArgumentParser):
    """Finds --config as the real parser would (abbreviations, --config=FILE, after --),
    without its checks; whatever it cannot parse, the real parser reports."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def _config_flag(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    scout = _Scout(add_help=False, allow_abbrev=parser.allow_abbrev)
    for i, action in enumerate(parser._actions):
        if not action.option_strings:
            continue
        if action.dest == "config":
            scout.add_argument(*action.option_strings, dest="config")
        elif action.nargs == 0:
            scout.add_argument(*action.option_strings, dest=f"_{i}", action="store_const")
        else:
            scout.add_argument(*action.option_strings, dest=f"_{i}", nargs=action.nargs)
    try:
        found, _ = scout.parse_known_args(argv)
    except _Refused:
        return None
    path: str | None = getattr(found, "config", None)
    return path


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)` with the values of `--config FILE` (railfabric.configfile)
    beneath the command line's. A bad file exits 2 with `PROG: error: ...`, as argparse does."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = _config_flag(parser, args)
    if path is None:
        return parser.parse_args(args)
    try:
        values = configfile.load(parser, Path(path))
    except configfile.ConfigError as err:
        parser.error(str(err))
    preset = argparse.Namespace()
    lists: dict[argparse.Action, object] = {}
    relaxed = [a for a in values if a.required]
    for action, value in values.items():
        if isinstance(action, argparse._AppendAction):
            lists[action] = value  # set below: argparse would append -i flags to them
        else:
            setattr(preset, action.dest, value)
    for action in relaxed:  # the file gave them
        action.required = False
    try:
        parsed = parser.parse_args(args, namespace=preset)
    finally:
        for action in relaxed:
            action.required = True
    for action, value in lists.items():
        # Still the default object: the command line gave none of these; else it wins whole.
        if getattr(parsed, action.dest, None) is action.default:
            setattr(parsed, action.dest, value)
    return parsed


class JsonFormatter(logging.Formatter):
    """One JSON object per line, the same fields for every daemon: time (ISO 8601, UTC),
    level, logger, message, and exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, str] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def setup_logging(level: str, log_format: str = "text") -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
