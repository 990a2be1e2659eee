"""`railfabric-controller`: the controller daemon."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railfabric-controller",
        description="Fabric controller: computes routes and QoS and streams them to agents.",
    )
    parser.add_argument("--fabric", required=True, help="fabric intent YAML")
    parser.add_argument("--listen", default="127.0.0.1:50051", help="gRPC address HOST:PORT")
    parser.add_argument("--state-dir", help="directory of the embedded state store")
    parser.add_argument("--metrics", help="Prometheus metrics address HOST:PORT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print(
        "railfabric-controller: not implemented yet (tracked by the daemons issue)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
