"""What every railfabric command line shares: --log-level, --version, help that shows
defaults, HOST:PORT flags, and one way to configure logging. The daemons and railctl build
their parsers with `parser()` so a flag means the same everywhere."""

from __future__ import annotations

import argparse
import logging

from railfabric import __version__

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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


def address(value: str) -> str:
    """An argparse type: a HOST:PORT flag, refused with `host_port`'s words."""
    try:
        host_port(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


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


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
