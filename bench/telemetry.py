"""Does telemetry disturb failover? The lab's failover scenario twice in one run, on the same
fabric and machine: once with telemetry off (no latency probes, agents' counters every
OFF_COUNTERS_S) and once with it on as deployed (probes at the intent's default rate, counters
every 5 s), and the difference of each figure (issue 14: within 10%). By default the runs
are off, on, off: failover's p99 over a few cuts moves between two identical runs on a busy
machine, and the spread of the two runs off is the noise floor a difference is judged against.

    sudo python -m bench.telemetry [FABRIC] [--reps N] [--order off-on-off] [--json] [--keep-logs]

Needs root (the lab's namespaces). Every figure carries its sample: the failover probes sent
and received in each run, and the latency probes the agents sent and had answered (0 with
telemetry off; a run with telemetry on that answered none is a failure, not a figure).
Each run's per-cut rows go to stderr: a p99 of 20 cuts is the slowest cut, and its row says
which step (detection, local repair, report, push, apply) was slow; `--keep-logs` keeps the
daemons' logs to look at that moment.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.output import print_figures
from controller.fabric import LatencyIntent
from mininet_labs.lab import Lab, LabOptions
from mininet_labs.processes import make_target
from mininet_labs.scenarios import failover
from mininet_labs.scenarios.common import Budget

REPO = Path(__file__).resolve().parent.parent
FABRIC = REPO / "examples" / "lab-2rail.yaml"
ON_COUNTERS_S = 5.0  # the agent's --counters-interval default
OFF_COUNTERS_S = 3600.0  # no report in a run: counters off in effect
# The figures compared, and the slack below which a difference is noise of the measurement
# itself (one failover probe interval at 1,000 probes/s), not a change.
COMPARED = (
    "local_loss_ms_p99",
    "remote_loss_ms_p99",
    "restore_loss_ms_p99",
    "convergence_ms_p99",
    "detection_ms_p99",
)
SLACK_MS = 1.0
WITHIN = 0.10


def _run(fabric: Path, reps: int, telemetry: bool, keep_logs: bool) -> dict[str, object]:
    options = LabOptions(
        keep_logs=keep_logs,
        counters_interval_s=ON_COUNTERS_S if telemetry else OFF_COUNTERS_S,
        latency=LatencyIntent() if telemetry else LatencyIntent(interval_ms=0),
        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
    )
    started = time.monotonic()
    with Lab(fabric, make_target("softswitch", None), options) as lab:
        result = failover.run(lab, Budget(failover_reps=reps))
        probes = lab.probe_outcomes()
        run_dir = lab.run_dir
    # Each cut's row (loss, detection, repair, report, push, apply): a p99 over 20 cuts is the
    # slowest cut, and its row says which step was slow.
    for table in result.tables:
        print(table.render(), file=sys.stderr, flush=True)
    if keep_logs:
        print(f"  logs kept in {run_dir}", file=sys.stderr, flush=True)
    figures: dict[str, object] = {f"{k}": v for k, v in result.metrics.items()}
    figures["passed"] = not result.failed
    figures["latency_probes_sent"] = probes.get("sent", 0)
    figures["latency_probes_answered"] = probes.get("answered", 0)
    figures["run_s"] = round(time.monotonic() - started, 1)
    return figures


def _ms(value: object) -> float | None:
    """A figure in ms, or None when the run did not measure it (absent or NaN)."""
    if not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fabric", type=Path, nargs="?", default=FABRIC)
    parser.add_argument("--reps", type=int, default=20, help="failover repetitions per run")
    parser.add_argument(
        "--order",
        default="off-on-off",
        help="the runs, in order (off/on, dash-separated): two runs off give the noise floor",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep each run's directory (daemons' logs)"
    )
    args = parser.parse_args(argv)
    order = args.order.split("-")
    if os.geteuid() != 0:
        parser.error("needs root: the lab builds network namespaces")
    if args.reps < 1:
        parser.error(f"--reps {args.reps}: must be >= 1")
    if set(order) != {"off", "on"} or len(order) > 6:
        parser.error(f"--order {args.order}: off and on, each at least once, at most 6 runs")
    figures: dict[str, object] = {"fabric": str(args.fabric), "reps": args.reps}
    runs: dict[str, list[dict[str, object]]] = {"off": [], "on": []}
    problems = []
    for i, which in enumerate(order, 1):
        print(f"run {i}/{len(order)}: failover with telemetry {which}", file=sys.stderr)
        run = _run(args.fabric, args.reps, telemetry=which == "on", keep_logs=args.keep_logs)
        runs[which].append(run)
        figures |= {f"{i}.{which}.{k}": v for k, v in run.items()}
        if not run["passed"] or not run["probe_received"]:
            problems.append(f"run {i} ({which}): the failover scenario failed or had no sample")
        if which == "on" and not run["latency_probes_answered"]:
            problems.append(f"run {i} (on): no latency probe was answered (no sample)")
        if which == "off" and run["latency_probes_sent"]:
            problems.append(f"run {i} (off): {run['latency_probes_sent']} latency probes sent")
    for key in COMPARED:
        off = [x for r in runs["off"] if (x := _ms(r.get(key))) is not None]
        on = [x for r in runs["on"] if (x := _ms(r.get(key))) is not None]
        if len(off) != len(runs["off"]) or len(on) != len(runs["on"]):
            problems.append(f"{key}: not measured in every run")
            continue
        a, b = statistics.fmean(off), statistics.fmean(on)
        noise = max(off) - min(off)
        allowed = max(WITHIN * a, SLACK_MS, noise)
        figures |= {f"off.{key}": round(a, 3), f"on.{key}": round(b, 3)}
        figures |= {f"noise.{key}": round(noise, 3), f"delta.{key}": round(b - a, 3)}
        if b - a > allowed:
            problems.append(
                f"{key}: {a:.3f} ms off, {b:.3f} ms on: more than {allowed:.3f} ms worse "
                f"(10%, {SLACK_MS:g} ms or the off runs' spread)"
            )
    figures["within_10pct"] = not problems
    figures["problems"] = problems
    print_figures(figures, as_json=args.json)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
