"""A miswire: the far ends of two cables that share a switch are swapped in the wire
namespace (carrier stays up everywhere; only LLDP can tell). The controller must raise an
alarm on each of the four ports naming the neighbour actually heard, and Diagnose (the admin
API behind `railctl diagnose`) must report it. The cabling is then put back and the alarms
must clear."""

from __future__ import annotations

import subprocess
import time

from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

DETECT_TIMEOUT_S = 15.0


def _pick(lab: Lab) -> tuple[str, str]:
    """Two cables whose b ends are on the same switch and whose a ends are not."""
    cables = list(lab.topology.cables.values())
    for x in cables:
        for y in cables:
            if x.link.b == y.link.b and x.link.a != y.link.a:
                return x.link.key, y.link.key
    raise LabError(f"fabric {lab.fabric.name} has no two cables to swap")


def _miswire_alarms(lab: Lab) -> dict[tuple[str, int], str]:
    alarms = lab.admin.ListAlarms(admin_pb2.ListAlarmsRequest()).alarms
    return {(a.switch_name, a.port): a.message for a in alarms if a.kind == "miswire"}


def run(lab: Lab, budget: Budget) -> Result:
    first, second = _pick(lab)
    a, b = lab.topology.cables[first].link, lab.topology.cables[second].link
    # After the swap, each end hears the other cable's far end.
    expect = {
        (a.a, a.a_port): (b.b, b.b_port),
        (b.a, b.a_port): (a.b, a.b_port),
        (a.b, a.b_port): (b.a, b.a_port),
        (b.b, b.b_port): (a.a, a.a_port),
    }
    start = time.monotonic()
    lab.topology.swap_far_ends(first, second)
    try:
        alarms = wait_for(
            "miswire alarms on all four ports",
            lambda: found if set(expect) <= set(found := _miswire_alarms(lab)) else None,
            timeout_s=DETECT_TIMEOUT_S,
            every_s=0.1,
        )
        detect_s = time.monotonic() - start
        diagnose = lab.admin.Diagnose(admin_pb2.DiagnoseRequest())
        findings = [f for f in diagnose.findings if f.kind == "miswire"]
        cli = subprocess.run(
            lab.railctl_argv("diagnose"),
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    finally:
        lab.topology.repatch([first, second])
    named = {
        end: f"{far[0]} port {far[1]}" in alarms.get(end, "") and end[0] in alarms.get(end, "")
        for end, far in expect.items()
    }
    cleared = True
    try:
        wait_for(
            "the miswire alarms to clear",
            lambda: True if not set(expect) & set(_miswire_alarms(lab)) else None,
            timeout_s=DETECT_TIMEOUT_S,
            every_s=0.1,
        )
        lab.wait_converged(timeout_s=20)
    except LabError:
        cleared = False
    # railctl's controller-backed commands land separately; until then say so, and judge by
    # the admin API's Diagnose (which `railctl diagnose` prints).
    cli_missing = cli.returncode == 2 and "invalid choice" in cli.stderr
    cli_lines = cli.stdout.splitlines()
    cli_shows = all(
        any(
            "miswire" in line and f"{sw} port {port}" in line and f"{far[0]} port {far[1]}" in line
            for line in cli_lines
        )
        for (sw, port), far in expect.items()
    )
    table = Table(
        ("port", "hears", "alarm"),
        tuple(
            (f"{sw}:{port}", f"{far[0]}:{far[1]}", alarms.get((sw, port), "(none)"))
            for (sw, port), far in expect.items()
        ),
    )
    diag = Table(
        ("diagnose finding", "message"),
        tuple((f"{f.switch_name}:{f.port}", f.message) for f in findings) or (("(none)", ""),),
    )
    metrics: dict[str, float | int | str] = {
        "swapped": f"{first} x {second}",
        "detect_s": round(detect_s, 2),
        "alarms_naming_both_ends": sum(named.values()),
        "diagnose_findings": len(findings),
        "railctl_diagnose_exit": cli.returncode,
        "railctl_diagnose_shows_miswire": int(cli_shows),
        "alarms_cleared_after_repair": int(cleared),
    }
    problems = []
    if not all(named.values()):
        problems.append("an alarm does not name both ends")
    if len(findings) < len(expect):
        problems.append(f"diagnose lists {len(findings)} miswire findings, expected {len(expect)}")
    if not cli_shows and not cli_missing:
        first_line = (cli.stderr or cli.stdout).strip().splitlines()[:1]
        problems.append(f"`railctl diagnose` does not show it ({first_line})")
    if not cleared:
        problems.append("alarms did not clear after the cabling was put back")
    reason = (
        f"swapped {first} and {second}: {sum(named.values())}/4 alarms name both ends "
        f"after {detect_s:.1f} s; diagnose: {len(findings)} findings"
    )
    if cli_missing:
        reason += "; `railctl diagnose` is not in this railctl yet"
    elif cli_shows:
        reason += "; `railctl diagnose` shows it"
    if problems:
        reason += " — " + "; ".join(problems)
    tables = [table, diag]
    if not cli_missing:
        shown = f"railctl --controller {lab.controller_addr} diagnose"
        tables.append(Table((shown,), tuple((line,) for line in cli_lines or ["(no output)"])))
    return Result("miswire", not problems, reason, metrics, tuple(tables))
