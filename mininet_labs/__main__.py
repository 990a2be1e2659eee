"""`python -m mininet_labs demo|list`: the lab entry point.

The labs grow with the system: `demo` runs every scenario that exists at this commit and
prints a report; a scenario that fails makes the command exit non-zero."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mininet_labs.scenarios import SCENARIOS, run_scenarios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mininet_labs")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the scenarios")
    sub.add_parser("demo", help="run every scenario and print the report")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, scenario in SCENARIOS.items():
            print(f"{name:16} {scenario.description}")
        return 0
    results = run_scenarios(list(SCENARIOS))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
