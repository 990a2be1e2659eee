"""`railfabric-softswitch`: the P4Runtime software target, one process per switch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railfabric-softswitch",
        description="P4Runtime software switch running a model of p4/fabric.p4.",
    )
    parser.add_argument("--device-id", type=int, required=True, help="P4Runtime device id")
    parser.add_argument("--grpc-addr", default="127.0.0.1:9559", help="P4Runtime HOST:PORT")
    parser.add_argument(
        "-i",
        dest="interfaces",
        action="append",
        default=[],
        metavar="PORT@IFNAME",
        help="bind port number PORT to Linux interface IFNAME (repeatable)",
    )
    parser.add_argument("--cpu-port", type=int, default=255, help="CPU port number")
    parser.add_argument("--port-rate-mbps", type=float, help="egress rate of every port")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print("railfabric-softswitch: not implemented yet (tracked by the P4 issue)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
