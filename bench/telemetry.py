"""Does telemetry disturb failover? The lab's failover scenario several times in one run, on the
same fabric and machine, alternating telemetry off (no latency probes, agents' counters every
OFF_COUNTERS_S) and on as deployed (probes at the intent's default rate, counters every 5 s),
and the difference of each figure (issue 14: within 10%).

    python -m bench.telemetry [FABRIC] [--reps N] [--order off-on-off-on] [--json] [--keep-logs]
    python -m bench.telemetry --from RUNS.json [RUNS.json ...] [--json]

Figures are pooled over the runs of a side: every cut's loss, convergence and detection go
into one sample per side, whose mean, p50, p90 and p99 are compared. A run's own p99 is its
slowest cut (20 cuts: the largest), and it moves between two identical runs on a busy machine
by more than the 10% being judged; pooled, p99 is a rank among hundreds of cuts. Each
difference carries a 90% bootstrap interval (runs resampled within each side, then cuts
within each run, a fixed seed: runs of one side differ by more than cuts of one run) and the
same difference between the first and the last run off (the noise of the measurement); the
verdict is on the pooled figures: no statistic more than 10% or SLACK_MS worse with
telemetry on. `--json` keeps every cut's figures of every run (and the commit measured), and
`--from` pools the runs kept in several such outputs of one fabric and repetitions, listing
each file's commit, and compares them as one sample: more runs than one sitting holds,
reproduced by one command.

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
import itertools
import json
import os
import random
import statistics
import subprocess
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


def run_problems(i: int, run: Run) -> list[str]:
    """Why run `i` is no sample (the scenario failed, no failover datagram came back, telemetry
    was not what its side says); [] for a good run."""
    problems = []
    summary = run.summary
    if not summary["passed"] or not summary["probe_received"]:
        problems.append(f"run {i} ({run.which}): the failover scenario failed or had no sample")
    answered, sent = summary["latency_probes_answered"], summary["latency_probes_sent"]
    if run.which == "on" and not answered:
        problems.append(f"run {i} (on): no latency probe was answered (no sample)")
    if run.which == "off" and sent:
        problems.append(f"run {i} (off): {sent} latency probes sent")
    return problems


def _commit() -> str | None:
    """The commit measured (with "+changes" when the tree differs from it); None outside git."""

    def git(*args: str) -> str:
        argv = ["git", "-C", str(REPO), *args]
        done = subprocess.run(argv, check=False, capture_output=True, text=True)
        if done.returncode:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except OSError:
        return None
    return head + ("+changes" if changed else "")


# What each run's summary must say for `run_problems` to judge it.
SAMPLE_KEYS = ("passed", "probe_received", "latency_probes_sent", "latency_probes_answered")


class RunsFileError(Exception):
    """An earlier output that cannot be pooled; the text names the file and why."""


def runs_of(path: Path) -> tuple[dict[str, object], list[Run]]:
    """The runs an earlier `--json` output kept, in order, and what they were measured on
    (fabric, reps, and the commit when the output has it). Raises RunsFileError."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise RunsFileError(f"{path}: cannot read it as JSON: {err}") from err
    if not isinstance(data, dict) or "fabric" not in data or "reps" not in data:
        raise RunsFileError(f"{path}: not an output of bench.telemetry --json (no fabric, reps)")
    meta = {key: data.get(key) for key in ("fabric", "reps", "commit")}
    runs: list[Run] = []
    fields = [f.name for f in dataclasses.fields(failover.Figures)]
    for i in itertools.count(1):
        sides = [w for w in ("off", "on") if f"{i}.{w}.passed" in data]
        if not sides:
            break
        which = sides[0]
        prefix = f"{i}.{which}."
        cuts = data.get(prefix + "cuts")
        if not isinstance(cuts, dict) or set(fields) - set(cuts):
            raise RunsFileError(
                f"{path}: run {i} ({which}) has no per-cut figures {fields}: "
                "only outputs written with --json can be pooled"
            )
        summary = {
            key.removeprefix(prefix): value
            for key, value in data.items()
            if key.startswith(prefix) and key != prefix + "cuts"
        }
        if missing := [key for key in SAMPLE_KEYS if key not in summary]:
            raise RunsFileError(f"{path}: run {i} ({which}) does not say its sample: no {missing}")
        figures = failover.Figures(**{f: tuple(float(x) for x in cuts[f]) for f in fields})
        runs.append(Run(which, figures, summary))
    if not runs:
        raise RunsFileError(f"{path}: no run in it")
    return meta, runs


def pooled_from(paths: Sequence[Path]) -> tuple[dict[str, object], list[Run]]:
    """Every run of `paths`, in order; the fabric and repetitions they share, and each file
    with the commit it measured (pooling says the code measured is the same: the commits
    show it). Raises RunsFileError when the files disagree on the fabric or repetitions."""
    shared: dict[str, object] | None = None
    sources: list[dict[str, object]] = []
    runs: list[Run] = []
    for path in paths:
        meta, more = runs_of(path)
        setup = {"fabric": meta["fabric"], "reps": meta["reps"]}
        if shared is None:
            shared = setup
        elif setup != shared:
            raise RunsFileError(
                f"{path}: measured on {setup}, but {paths[0]} on {shared}: not one sample"
            )
        sources.append({"file": str(path), "commit": meta["commit"], "runs": len(more)})
        runs += more
    assert shared is not None  # argparse asks for at least one file
    return shared | {"from": sources}, runs


def report(
    figures: dict[str, object], runs: Sequence[Run], problems: list[str], *, as_json: bool
) -> int:
    """Print every run's summary (its cuts too with `as_json`), the pooled comparison and
    the verdict; 0 when telemetry is within 10%."""
    for i, run in enumerate(runs, 1):
        figures |= {f"{i}.{run.which}.{k}": v for k, v in run.summary.items()}
        if as_json:  # each cut's figures, for another look at the sample (and --from)
            figures[f"{i}.{run.which}.cuts"] = dataclasses.asdict(run.figures)
    pooled, worse = compare(runs)
    figures |= pooled
    problems = problems + worse
    figures["within_10pct"] = not problems
    figures["problems"] = problems
    print_figures(figures, as_json=as_json)
    return 0 if not problems else 1


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
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        metavar="RUNS_JSON",
        help="run nothing: pool the runs kept in these earlier --json outputs and compare them",
    )
    args = parser.parse_args(argv)
    if args.sources:
        try:
            meta, kept = pooled_from(args.sources)
        except RunsFileError as err:
            parser.error(f"--from: {err}")
        # Runs of one side only: compare names every figure that lacks the other.
        problems = [p for i, run in enumerate(kept, 1) for p in run_problems(i, run)]
        return report(meta, kept, problems, as_json=args.json)
    order = args.order.split("-")
    if os.geteuid() != 0:
        parser.error("needs root: the lab builds network namespaces")
    if args.reps < 1:
        parser.error(f"--reps {args.reps}: must be >= 1")
    if set(order) != {"off", "on"} or len(order) > 8:
        parser.error(f"--order {args.order}: off and on, each at least once, at most 8 runs")
    figures: dict[str, object] = {"fabric": str(args.fabric), "reps": args.reps}
    figures["commit"] = _commit()
    runs: list[Run] = []
    problems = []
    for i, which in enumerate(order, 1):
        print(f"run {i}/{len(order)}: failover with telemetry {which}", file=sys.stderr)
        run = _run(args.fabric, args.reps, telemetry=which == "on", keep_logs=args.keep_logs)
        runs.append(run)
        problems += run_problems(i, run)
    return report(figures, runs, problems, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
