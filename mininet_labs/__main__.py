"""`python -m mininet_labs run FABRIC --scenario NAME|all [--target softswitch|bmv2] [--json OUT]`,
`up FABRIC [--target ...] [--script FILE]` (the fabric kept up under Mininet's CLI, `mininet>`),
`list`, `clean`, and `demo` (= `run examples/lab-2rail.yaml --scenario all`).

Exit status: 0 when no scenario failed (each passed, or was skipped as one the target cannot
run, or one that needs etcd where it is not installed: listed as SKIP with its reason), 1 when
one failed, 2 when the lab could not run.

Scenarios run on a lab with one controller (its state in SQLite), except those that need
controller replicas (`Scenario.controllers`, controller-failover): they run on a second lab
built for them after the others (see `lab_runs`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from controller.yamlnodes import IntentError
from mininet_labs.clean import clean
from mininet_labs.cli import FabricCLI
from mininet_labs.etcd import replicas_missing
from mininet_labs.lab import ETCD_MEMBERS, Interrupted, Lab, LabOptions
from mininet_labs.netlinks import PREFIX, TAG_RE, LabError
from mininet_labs.processes import (
    BMV2_PORT_RATE_MBPS,
    REPO,
    SOFTSWITCH_PORT_RATE_MBPS,
    SwitchTarget,
    make_target,
)
from mininet_labs.report import Result, exit_status, render, summary, write_json
from mininet_labs.scenarios import SCENARIOS, Budget
from railfabric.cli import address

DEMO_FABRIC = REPO / "examples" / "lab-2rail.yaml"
COMMAND = ["python", "-m", "mininet_labs", *sys.argv[1:]]  # as run, for the JSON report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mininet_labs",
        description="railfabric end to end: a real fabric of namespaces, switches, agents and "
        "a controller, with failures measured.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the scenarios")
    cleaner = sub.add_parser("clean", help="remove every namespace, veth and process a lab left")
    cleaner.add_argument(
        "--tag", help="only what the lab run TAG (rfl + 4 hex digits, as its first line says) left"
    )
    for name, text in (
        ("run", "run scenarios on a fabric"),
        ("demo", "run every scenario on examples/lab-2rail.yaml"),
        (
            "up",
            "build a fabric and open Mininet's CLI on it (mininet>), with railfabric's commands",
        ),
    ):
        p = sub.add_parser(name, help=text)
        if name in ("run", "up"):
            p.add_argument("fabric", type=Path, help="fabric YAML (intent or explicit form)")
        if name == "up":
            p.add_argument(
                "--script",
                type=Path,
                help="run these CLI commands (one per line, as Mininet's `source`), then tear "
                "the fabric down, instead of prompting",
            )
            p.add_argument(
                "--controllers",
                type=int,
                default=1,
                help=f"controller processes: 1 (its state in SQLite), or replicas sharing a "
                f"{ETCD_MEMBERS}-member etcd cluster the lab starts, one elected leader "
                "(needs etcd; `scenario controller-failover` runs on such a lab)",
            )
            p.add_argument(
                "--http",
                type=address,
                metavar="HOST:PORT",
                help="the controller's live web view on this address, plaintext (e.g. "
                "127.0.0.1:8080; one controller only)",
            )
        if name == "run":
            p.add_argument(
                "--scenario",
                action="append",
                required=True,
                choices=[*SCENARIOS, "all"],
                help="scenario to run (repeatable); all = every one in order",
            )
        p.add_argument("--target", choices=["softswitch", "bmv2"], default="softswitch")
        if name != "up":
            p.add_argument("--json", type=Path, help="write the results as JSON here")
        p.add_argument(
            "--port-rate-mbps",
            type=float,
            help="the rate the QoS scenarios congest: softswitch serializes every port at it "
            f"(default {SOFTSWITCH_PORT_RATE_MBPS:g}); bmv2 paces its lossless-class queues "
            f"at it in the scenarios' 1,042-byte frames (default {BMV2_PORT_RATE_MBPS:g})",
        )
        if name != "up":
            p.add_argument(
                "--quick", action="store_true", help="smaller budget (fewer repetitions)"
            )
            p.add_argument("--failover-reps", type=int, help="failover repetitions (default 10)")
            p.add_argument("--probe-pps", type=int, help="failover probe rate (default 1000)")
            p.add_argument(
                "--controller-kills",
                type=int,
                help="controller-failover: kills of the leader (default 3)",
            )
        p.add_argument("--keep-logs", action="store_true", help="keep /tmp/rfl<tag>/ logs")
    return parser


def _runnable_target(kind: str, port_rate_mbps: float | None) -> SwitchTarget | None:
    """The target to run, or None after saying why it cannot run here (root, binaries)."""
    if os.geteuid() != 0:
        print("mininet_labs: needs root (network namespaces)", file=sys.stderr)
        return None
    target = make_target(kind, port_rate_mbps)
    unavailable = target.unavailable()
    if unavailable is not None:
        print(f"mininet_labs: --target {kind}: {unavailable}", file=sys.stderr)
        return None
    return target


def _progress(text: str) -> None:
    print(f"  .. {text}", flush=True)


def replicas_unavailable(controllers: int) -> str | None:
    """Why a lab with `controllers` controller processes cannot run here, or None."""
    missing = replicas_missing() if controllers > 1 else None
    if missing is not None:
        return f"{missing}: the controller's replicas share an etcd cluster"
    return None


def lab_runs(names: Sequence[str]) -> list[tuple[int, list[str]]]:
    """The labs a run builds, in order: (controller processes, the scenarios run on it), one
    lab per run of consecutive scenarios that need the same controllers (`all`: two).

    Why not one lab, with replicas when etcd is installed: the other scenarios are measured
    on one controller with its SQLite store, and stay so. Replicas and etcd members would
    share the machine's cores (2 here) with the switches whose figures those scenarios judge
    against milliseconds (failover's loss windows), every commit of the controller would be
    an fsynced etcd transaction, and a lab whose leader was killed leaves the scenarios after
    it an election behind. A second lab costs one build and teardown (~13 s here), not a
    scenario's figures."""
    runs: list[tuple[int, list[str]]] = []
    for name in names:
        controllers = SCENARIOS[name].controllers
        if runs and runs[-1][0] == controllers:
            runs[-1][1].append(name)
        else:
            runs.append((controllers, [name]))
    return runs


def _describe(lab: Lab, detail: str) -> str:
    replicas = lab.options.controllers
    controllers = (
        f", {replicas} controller replicas on a {ETCD_MEMBERS}-member etcd cluster"
        if replicas > 1
        else ""
    )
    return (
        f"lab {lab.names.tag}: fabric {lab.fabric.name} ({len(lab.fabric.switches)} switches, "
        f"{len(lab.topology.hosts)} servers, {len(lab.fabric.nics)} NICs), target {detail}"
        f"{controllers}"
    )


def run(  # noqa: PLR0917 - the CLI's options, one call site
    fabric: Path,
    names: list[str],
    target_kind: str,
    port_rate_mbps: float | None,
    options: LabOptions,
    budget: Budget,
    json_out: Path | None,
) -> int:
    target = _runnable_target(target_kind, port_rate_mbps)
    if target is None:
        return 2
    results: list[Result] = []
    started = time.monotonic()
    detail = target.describe()
    labs: list[Lab] = []
    try:
        for controllers, group in lab_runs(names):
            why = replicas_unavailable(controllers)
            if why is not None:
                for name in group:
                    results.append(Result.skip(name, why))
                    print(render(results[-1]), flush=True)
                continue
            built = time.monotonic()
            lab = Lab(fabric, target, dataclasses.replace(options, controllers=controllers))
            labs.append(lab)
            print(_describe(lab, detail), flush=True)
            with lab:
                print(f"fabric converged in {time.monotonic() - built:.1f} s\n", flush=True)
                for name in group:
                    t0 = time.monotonic()
                    try:
                        result = SCENARIOS[name].run(lab, budget)
                    except LabError as err:
                        result = Result(name, False, f"could not run: {err}")
                    results.append(result)
                    print(render(result), flush=True)
                    print(f"({name}: {time.monotonic() - t0:.1f} s)\n", flush=True)
                    lab.failed = lab.failed or result.failed
    except Interrupted as sig:
        print(f"mininet_labs: interrupted ({sig}); everything was torn down", file=sys.stderr)
        return 2
    except (LabError, IntentError) as err:
        print(f"mininet_labs: {err}", file=sys.stderr)
        if json_out:
            write_json(json_out, str(fabric), target_kind, results, detail, command=COMMAND)
        return 2
    if results:
        print(summary(results))
        print(f"\n{len(results)} scenarios in {time.monotonic() - started:.0f} s")
    if json_out:
        write_json(json_out, str(fabric), target_kind, results, detail, command=COMMAND)
        print(f"results written to {json_out}")
    status = exit_status(results)
    for lab in labs:
        if status and lab.failed:
            print(f"logs kept in {lab.run_dir}")
    return status


def up(
    fabric: Path,
    target_kind: str,
    port_rate_mbps: float | None,
    options: LabOptions,
    script: Path | None,
) -> int:
    """The fabric kept up under Mininet's CLI until `exit` (or the script's end)."""
    if script is not None and not script.is_file():
        print(f"mininet_labs: --script {script}: no such file", file=sys.stderr)
        return 2
    why = replicas_unavailable(options.controllers)
    if why is not None:
        print(f"mininet_labs: --controllers {options.controllers}: {why}", file=sys.stderr)
        return 2
    target = _runnable_target(target_kind, port_rate_mbps)
    if target is None:
        return 2
    started = time.monotonic()
    try:
        lab = Lab(fabric, target, options)
        replicas = options.controllers
        controllers = f", {replicas} controller replicas on etcd" if replicas > 1 else ""
        print(
            f"lab {lab.names.tag}: fabric {lab.fabric.name}, target {target.describe()}"
            f"{controllers}"
        )
        with lab:
            print(
                f"fabric converged in {time.monotonic() - started:.1f} s; "
                "`help` lists the commands, `exit` tears the fabric down",
                flush=True,
            )
            if options.http:
                print(f"the controller's web view: http://{options.http}/", flush=True)
            FabricCLI(lab, script=str(script) if script else None)
    except Interrupted as sig:
        print(f"mininet_labs: interrupted ({sig}); everything was torn down", file=sys.stderr)
        return 2
    except (LabError, IntentError) as err:
        print(f"mininet_labs: {err}", file=sys.stderr)
        return 2
    print("fabric torn down")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        width = max(map(len, SCENARIOS))
        for name, scenario in SCENARIOS.items():
            print(f"{name:{width}} {scenario.description}")
        print(f"{'all':{width}} every scenario above, in this order")
        return 0
    if args.command == "clean":
        if args.tag is not None and not TAG_RE.fullmatch(args.tag):
            parser.error(f"--tag {args.tag!r}: expected {PREFIX} + 4 hex digits, e.g. {PREFIX}1a2b")
        removed = clean(args.tag)
        print("\n".join(removed) if removed else "nothing to clean")
        return 0
    if args.port_rate_mbps is not None and not args.port_rate_mbps > 0:
        parser.error(f"--port-rate-mbps {args.port_rate_mbps:g}: must be > 0")
    options = LabOptions(keep_logs=args.keep_logs, progress=_progress)
    if args.command == "up":
        if args.controllers < 1:
            parser.error(f"--controllers {args.controllers}: must be >= 1")
        if args.http is not None and args.controllers > 1:
            parser.error("--http: the web view is served by one controller (--controllers 1)")
        options = dataclasses.replace(options, controllers=args.controllers, http=args.http)
        return up(args.fabric, args.target, args.port_rate_mbps, options, args.script)
    fabric = DEMO_FABRIC if args.command == "demo" else args.fabric
    chosen = ["all"] if args.command == "demo" else args.scenario
    names = list(SCENARIOS) if "all" in chosen else list(dict.fromkeys(chosen))
    budget = Budget.quick() if args.quick else Budget()
    for flag, field, value in (
        ("--failover-reps", "failover_reps", args.failover_reps),
        ("--probe-pps", "probe_pps", args.probe_pps),
        ("--controller-kills", "controller_kills", args.controller_kills),
    ):
        if value is not None:
            if value < 1:
                parser.error(f"{flag} {value}: must be >= 1")
            budget = dataclasses.replace(budget, **{field: value})
    return run(fabric, names, args.target, args.port_rate_mbps, options, budget, args.json)


if __name__ == "__main__":
    sys.exit(main())
