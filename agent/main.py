"""`railfabric-agent`: the switch agent daemon."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railfabric-agent",
        description="Switch agent: programs a P4Runtime target from the controller's state.",
    )
    parser.add_argument("--switch", required=True, help="switch name in the fabric intent")
    parser.add_argument("--controller", required=True, help="controller address HOST:PORT")
    parser.add_argument("--target", required=True, help="P4Runtime target address HOST:PORT")
    parser.add_argument("--device-id", type=int, required=True, help="P4Runtime device id")
    parser.add_argument("--port-map", required=True, help="PORT=IFNAME[,PORT=IFNAME...]")
    parser.add_argument("--netns", help="network namespace of the switch's interfaces")
    parser.add_argument("--p4info", default="p4/fabric.p4info.txt", help="P4Info text file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print("railfabric-agent: not implemented yet (tracked by the daemons issue)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
