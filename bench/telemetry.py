"""Does telemetry disturb failover? The lab's failover scenario several times in one run, on the
same fabric and machine, alternating telemetry off (no latency probes, agents' counters every
OFF_COUNTERS_S) and on as deployed (probes at the intent's default rate, counters every 5 s),
and the difference of each figure (issue 14: within 10%).

    python -m bench.telemetry [FABRIC] [--reps N] [--order off-on-off-on] [--json] [--keep-logs]

Figures are pooled over the runs of a side: every cut's loss, convergence and detection go
into one sample per side, whose mean, p50, p90 and p99 are compared. A run's own p99 is its
slowest cut (20 cuts: the largest), and it moves between two identical runs on a busy machine
by more than the 10% being judged; pooled, p99 is a rank among hundreds of cuts. Each
difference carries a 90% bootstrap interval (runs resampled within each side, then cuts
within each run, a fixed seed: runs of one side differ by more than cuts of one run) and the
same difference between the first and the last run off (the noise of the measurement); the
verdict is on the pooled figures: no statistic more than 10% or SLACK_MS worse with
telemetry on. `--json` keeps every cut's figures of every run.

Needs root (the lab's namespaces). Every figure carries its sample: the cuts each statistic
is over, the failover datagrams sent and received in each run, and the latency probes the
agents sent and had answered (0 with telemetry off; a run with telemetry on that answered
none is a failure, not a figure). Each run's per-cut rows go to stderr: a slow cut's row says
which step (detection, local repair, report, push, apply) was slow; `--keep-logs` keeps the
daemons' logs to look at that moment.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.output import percentile, print_figures
from controller.fabric import LatencyIntent
from mininet_labs.lab import Lab, LabOptions
from mininet_labs.processes import make_target
from mininet_labs.scenarios import failover
from mininet_labs.scenarios.common import Budget

REPO = Path(__file__).resolve().parent.parent
FABRIC = REPO / "examples" / "lab-2rail.yaml"
ON_COUNTERS_S = 5.0  # the agent's --counters-interval default
OFF_COUNTERS_S = 3600.0  # no report in a run: counters off in effect
# The figures compared (failover.Figures fields) and the statistics of each.
COMPARED = ("local_loss", "remote_loss", "restore_loss", "convergence", "detection")
STATISTICS = ("mean", "p50", "p90", "p99")
# Below this a difference is the measurement's own resolution (one failover probe interval
# at 1,000 probes/s), not a change.
SLACK_MS = 1.0
WITHIN = 0.10
BOOTSTRAP = 2000
CONFIDENCE = 0.90


@dataclass(frozen=True)
class Run:
    """One run of the failover scenario: telemetry "off" or "on", each cut's figures, and
    the scenario's metrics with the run's latency probe counts."""

    which: str
    figures: failover.Figures
    summary: dict[str, object]


def _run(fabric: Path, reps: int, telemetry: bool, keep_logs: bool) -> Run:
    options = LabOptions(
        keep_logs=keep_logs,
        counters_interval_s=ON_COUNTERS_S if telemetry else OFF_COUNTERS_S,
        latency=LatencyIntent() if telemetry else LatencyIntent(interval_ms=0),
        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
    )
    started = time.monotonic()
    budget = Budget(failover_reps=reps)
    with Lab(fabric, make_target("softswitch", None), options) as lab:
        cuts, probe = failover.cut_repeatedly(lab, budget)
        result = failover.judge(cuts, probe, budget)
        probes = lab.probe_outcomes()
        run_dir = lab.run_dir
    for table in result.tables:
        print(table.render(), file=sys.stderr, flush=True)
    if keep_logs:
        print(f"  logs kept in {run_dir}", file=sys.stderr, flush=True)
    summary: dict[str, object] = dict(result.metrics)
    summary["passed"] = result.passed
    summary["reason"] = result.reason
    summary["latency_probes_sent"] = probes.get("sent", 0)
    summary["latency_probes_answered"] = probes.get("answered", 0)
    summary["run_s"] = round(time.monotonic() - started, 1)
    return Run("on" if telemetry else "off", failover.Figures.of(cuts), summary)


def statistic(name: str, values: Sequence[float]) -> float:
    if name == "mean":
        return statistics.fmean(values)
    return percentile(values, float(name[1:]))


def interval(
    name: str,
    off: Sequence[Sequence[float]],
    on: Sequence[Sequence[float]],
    rng: random.Random,
) -> tuple[float, float]:
    """The CONFIDENCE bootstrap interval of statistic(on) - statistic(off), each side given
    run by run. Runs are resampled, then cuts within each run drawn: a run's cuts share its
    lab (process placement, the machine's load then), and runs of the same side differ by
    more than the cuts of one run do, so resampling cuts alone would be overconfident."""

    def resampled(runs: Sequence[Sequence[float]]) -> list[float]:
        return [x for run in rng.choices(runs, k=len(runs)) for x in rng.choices(run, k=len(run))]

    deltas = sorted(
        statistic(name, resampled(on)) - statistic(name, resampled(off)) for _ in range(BOOTSTRAP)
    )
    tail = (1 - CONFIDENCE) / 2
    return deltas[int(tail * BOOTSTRAP)], deltas[int((1 - tail) * BOOTSTRAP) - 1]


def compare(runs: Sequence[Run]) -> tuple[dict[str, object], list[str]]:
    """Pooled figures of each side, their differences and the verdict's problems."""
    figures: dict[str, object] = {}
    problems: list[str] = []
    rng = random.Random(14)
    offs = [r for r in runs if r.which == "off"]
    for key in COMPARED:
        by_run: dict[str, list[tuple[float, ...]]] = {"off": [], "on": []}
        for r in runs:
            if cut_figures := getattr(r.figures, key):
                by_run[r.which].append(cut_figures)
        off = [x for run in by_run["off"] for x in run]
        on = [x for run in by_run["on"] for x in run]
        figures[f"{key}.cuts"] = {"off": len(off), "on": len(on)}
        if not off or not on:
            problems.append(
                f"{key}: no cut measured it with telemetry {'off' if not off else 'on'}"
            )
            continue
        first, last = getattr(offs[0].figures, key), getattr(offs[-1].figures, key)
        for name in STATISTICS:
            a, b = statistic(name, off), statistic(name, on)
            lo, hi = interval(name, by_run["off"], by_run["on"], rng)
            allowed = max(WITHIN * a, SLACK_MS)
            row: dict[str, object] = {
                "off": round(a, 3),
                "on": round(b, 3),
                "delta": round(b - a, 3),
                "delta_pct": round(100 * (b - a) / a, 1) if a else None,
                "ci90": [round(lo, 3), round(hi, 3)],
                "allowed": round(allowed, 3),
            }
            if len(offs) > 1 and first and last:
                row["off_noise"] = round(statistic(name, last) - statistic(name, first), 3)
            figures[f"{key}.{name}"] = row
            if b - a > allowed:
                problems.append(
                    f"{key} {name}: {a:.3f} ms off, {b:.3f} ms on over {len(off)} / {len(on)} "
                    f"cuts: more than {allowed:.3f} ms worse (10% or {SLACK_MS:g} ms)"
                )
    return figures, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fabric", type=Path, nargs="?", default=FABRIC)
    parser.add_argument("--reps", type=int, default=50, help="failover repetitions per run")
    parser.add_argument(
        "--order",
        default="off-on-off-on",
        help="the runs, in order (off/on, dash-separated), each side at least once",
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
    if set(order) != {"off", "on"} or len(order) > 8:
        parser.error(f"--order {args.order}: off and on, each at least once, at most 8 runs")
    figures: dict[str, object] = {"fabric": str(args.fabric), "reps": args.reps}
    runs: list[Run] = []
    problems = []
    for i, which in enumerate(order, 1):
        print(f"run {i}/{len(order)}: failover with telemetry {which}", file=sys.stderr)
        run = _run(args.fabric, args.reps, telemetry=which == "on", keep_logs=args.keep_logs)
        runs.append(run)
        figures |= {f"{i}.{which}.{k}": v for k, v in run.summary.items()}
        if args.json:  # each cut's figures, for another look at the sample
            figures[f"{i}.{which}.cuts"] = dataclasses.asdict(run.figures)
        if not run.summary["passed"] or not run.summary["probe_received"]:
            problems.append(f"run {i} ({which}): the failover scenario failed or had no sample")
        answered, sent = run.summary["latency_probes_answered"], run.summary["latency_probes_sent"]
        if which == "on" and not answered:
            problems.append(f"run {i} (on): no latency probe was answered (no sample)")
        if which == "off" and sent:
            problems.append(f"run {i} (off): {sent} latency probes sent")
    pooled, worse = compare(runs)
    figures |= pooled
    problems += worse
    figures["within_10pct"] = not problems
    figures["problems"] = problems
    print_figures(figures, as_json=args.json)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
