"""`python -m bench.swarm FABRIC [--agents N] [--processes K] [--cuts M] [--json]
[--insecure] [--railctl-runs R]`: the controller under a swarm of simulated agents
(bench/swarm/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.swarm.agents import CONNECT_TIMEOUT_S
from bench.swarm.coordinator import Failure, Options, run
from bench.swarm.daemon import ControllerFailed
from bench.swarm.figures import EmptySample, table
from bench.swarm.fleet import SwarmFailed
from bench.swarm.plan import PlanError
from bench.swarm.railctl import RUNS as RAILCTL_RUNS
from bench.swarm.railctl import RailctlFailed
from controller.yamlnodes import IntentError


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1")
    return number


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value}: at least 0")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.swarm",
        description="Start the real controller, connect a simulated agent per switch, and "
        "measure start-up, a session storm, admin latency under it and cable cuts.",
    )
    parser.add_argument("fabric", help="fabric intent YAML (examples/ref-mid.yaml, ...)")
    parser.add_argument(
        "--agents",
        type=_positive,
        help="simulated agents: the first N switches of the intent (default: every switch)",
    )
    parser.add_argument(
        "--processes", type=_positive, default=2, help="swarm processes the agents share"
    )
    parser.add_argument(
        "--cuts", type=_count, default=20, help="cables to cut, each once (0: no cuts)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext: the controller with --insecure and agents without certificates "
        "(default: mutual TLS with a certificate per switch)",
    )
    parser.add_argument(
        "--hold-down-s",
        type=float,
        default=0.5,
        help="the controller's --hold-down-s: how long a restored cable waits before "
        "routes return (the controller's default is 2 s)",
    )
    parser.add_argument(
        "--serve-timeout-s", type=float, default=600.0, help="start -> SERVING at most"
    )
    parser.add_argument(
        "--storm-timeout-s",
        type=float,
        default=900.0,
        help="storm -> every agent holds state, and -> quiet, each at most",
    )
    parser.add_argument(
        "--connect-timeout-s",
        type=float,
        default=CONNECT_TIMEOUT_S,
        help="an agent whose channel is not ready this fast counts a reset and tries again "
        "on a new connection, as the real agent does with 2 s (default 0: wait as long as it "
        "takes; with thousands of TLS agents per swarm process the swarm cannot meet 2 s)",
    )
    parser.add_argument(
        "--reports-s",
        type=float,
        default=0.0,
        metavar="S",
        help="every agent also reports as a real one does (bench/swarm/reports.py): its LLDP "
        "neighbours once it holds state, and Counters every S seconds (the agent's default "
        "is 5); the connected figures are taken once every agent sent Counters twice "
        "(default 0: no reports)",
    )
    parser.add_argument(
        "--railctl-runs",
        type=_count,
        default=RAILCTL_RUNS,
        help="after the cuts, run each railctl read command (and expand) this many times "
        "(0: not run)",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        metavar="DIR",
        help="copy the controller's and the swarm processes' logs here at the end",
    )
    return parser


async def _main(options: Options) -> dict[str, object]:
    # SIGTERM as Ctrl-C: the run is cancelled and cleans up the same way.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(options)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = Options(
        fabric=args.fabric,
        agents=args.agents,
        processes=args.processes,
        cuts=args.cuts,
        insecure=args.insecure,
        hold_down_s=args.hold_down_s,
        serve_timeout_s=args.serve_timeout_s,
        storm_timeout_s=args.storm_timeout_s,
        logs=args.logs,
        connect_timeout_s=args.connect_timeout_s,
        railctl_runs=args.railctl_runs,
        reports_s=args.reports_s,
    )
    try:
        report = asyncio.run(_main(options))
    except (PlanError, IntentError) as err:
        print(f"bench.swarm: {err}", file=sys.stderr)
        return 2
    except (Failure, EmptySample, ControllerFailed, SwarmFailed, RailctlFailed) as err:
        print(f"bench.swarm: FAILED: {err}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("bench.swarm: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    print(json.dumps(report, indent=1) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
