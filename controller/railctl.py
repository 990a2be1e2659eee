"""`railctl`: the operator CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="railctl", description="Operate a railfabric fabric.")
    parser.add_argument("--controller", default="127.0.0.1:50051", help="controller HOST:PORT")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="validate a fabric YAML").add_argument("fabric")
    sub.add_parser("expand", help="print a fabric's explicit form").add_argument("fabric")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"railctl {args.command}: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
