"""What every railfabric command line shares: --log-level, --version, help that shows
defaults, and one way to configure logging. The daemons and railctl build their parsers with
`parser()` so a flag means the same everywhere."""

from __future__ import annotations

import argparse
import logging

from railfabric import __version__

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with --version and --log-level; --help shows every default."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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
