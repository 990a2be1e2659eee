"""Statistics over samples, and the report printed for people (a table) or for programs
(`--json`, one object). Every figure carries the size of the sample it was computed from,
and a figure asked of an empty or broken sample raises EmptySample naming the sample: the
benchmark then fails rather than print a number that means nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.output import percentile


class EmptySample(Exception):
    """A figure's sample is empty or broken; the text names the sample and why."""


def distribution(what: str, values: Sequence[float], digits: int = 1) -> dict[str, Any]:
    """{n, p50, p99, max} of `values`; EmptySample when there are none, or when one is not a
    finite number >= 0 (a latency below zero means the attribution is wrong)."""
    if not values:
        raise EmptySample(f"{what}: empty sample")
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad:
        raise EmptySample(f"{what}: {len(bad)} of {len(values)} values are not >= 0 ({bad[0]})")
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
    }


def one(what: str, value: float | None, digits: int = 2) -> dict[str, Any]:
    """A single measurement as a figure of sample size 1."""
    if value is None or not math.isfinite(value) or value < 0:
        raise EmptySample(f"{what}: not measured")
    return {"value": round(value, digits), "n": 1}


# --- the table -------------------------------------------------------------------------


def _dist(d: dict[str, Any], unit: str) -> str:
    return f"p50 {d['p50']:g} / p99 {d['p99']:g} / max {d['max']:g} {unit}"


def _row(rows: list[tuple[str, str, str]], name: str, value: str, sample: str = "") -> None:
    rows.append((name, value, sample))


def table(report: dict[str, Any]) -> str:
    """The report for people: one line per figure, with its sample."""
    rows: list[tuple[str, str, str]] = []
    f = report["fabric"]
    setup = report["setup"]
    _row(
        rows,
        "fabric",
        f"{f['name']} ({f['file']}): {f['switches']:,} switches, {f['links']:,} links",
    )
    _row(
        rows,
        "swarm",
        f"{f['agents']:,} agents in {f['processes']} processes, {f['agent_links']:,} links "
        "between them",
    )
    _row(rows, "security", setup["security"])
    if "certificates" in setup:
        c = setup["certificates"]
        _row(rows, "certificates issued", f"{c['issue_s']:.2f} s", f"{c['count']:,} switch certs")
    _row(rows, "pinning", setup["pinning"])
    load = setup["load_average"]
    _row(
        rows,
        "machine load average (1/5/15 min)",
        f"before {' '.join(map(str, load['before']))}, after {' '.join(map(str, load['after']))}",
    )
    _row(rows, "controller flags", " ".join(setup["controller_args"]))
    timeout = setup["connect_timeout_s"]
    _row(
        rows,
        "agents' connect timeout",
        "none (gRPC retries the connection)" if not timeout else f"{timeout:g} s",
    )
    _row(rows, "fabric load in a swarm process", f"{setup['swarm_load_s']:.2f} s (max)")
    s = report["start"]
    _row(rows, "start -> SERVING", f"{s['to_serving_s']['value']:g} s", "1 start")
    d = report["desired_state_ready"]
    n = f"{d['from_start_s']['n']:,} agents"
    _row(rows, "start -> every agent got its DesiredState", f"{d['from_start_s']['value']:g} s", n)
    _row(rows, "storm -> every agent got its DesiredState", f"{d['from_storm_s']['value']:g} s", n)
    st = report["storm"]
    _row(
        rows,
        "storm -> every agent holds state",
        f"{st['all_hold_state_s']['value']:g} s",
        f"{st['per_agent_hold_s']['n']:,} agents",
    )
    _row(
        rows,
        "  per agent, storm -> holds state",
        _dist(st["per_agent_hold_s"], "s"),
        f"{st['per_agent_hold_s']['n']:,} agents",
    )
    _row(
        rows,
        "storm -> quiet (all links up, no message 0.3 s)",
        f"{st['quiet_s']['value']:g} s",
        f"{st['links_up']:,} links",
    )
    resets = st["resets"]
    by_code = ", ".join(f"{code} {count}" for code, count in sorted(resets["by_code"].items()))
    _row(
        rows,
        "  session resets",
        f"{resets['count']}" + (f" ({by_code})" if by_code else ""),
        f"{st['sessions_opened']:,} sessions opened",
    )
    _row(rows, "  swarm event loop, longest lag", f"{st['swarm_loop_lag_max_ms']:g} ms")
    _row(rows, "  delta gaps (Hello resent)", f"{st['resyncs']}")
    for example in st["gap_examples"]:
        _row(rows, "", f"e.g. {example}")
    msgs = st["messages"]
    _row(
        rows,
        "  pushed during the storm",
        ", ".join(
            f"{kind} {msgs['count'].get(kind, 0):,} ({msgs['bytes'].get(kind, 0) / 1e6:.1f} MB)"
            for kind in ("desired_state", "state_delta")
        ),
    )
    cv = st["controller_view"]
    _row(
        rows,
        "  controller's view (ListSwitches)",
        f"{cv['connected']:,} connected, {cv['converged']:,} converged",
        f"{cv['agents']:,} agents",
    )
    c = report["controller"]
    _row(
        rows,
        "controller RSS",
        f"idle {c['rss_mib']['idle']:.0f} MiB, connected {c['rss_mib']['connected']:.0f} MiB, "
        f"after cuts {c['rss_mib']['after_cuts']:.0f} MiB",
    )
    wall = report["phases_wall_s"]
    _row(
        rows,
        "controller CPU / wall",
        ", ".join(f"{phase} {sec:g} / {wall[phase]:g} s" for phase, sec in c["cpu_s"].items()),
        "1 CPU" if "CPU" in setup["pinning"] else "",
    )
    gen = report["load_generator"]
    _row(
        rows,
        "swarm + coordinator CPU",
        ", ".join(f"{phase} {sec:g} s" for phase, sec in gen["cpu_s"].items()),
        f"{gen['cpus']} CPU",
    )
    a = report["admin"]
    _row(
        rows,
        f"admin {a['rpc']} during the storm",
        _dist(a["latency_ms"], "ms"),
        f"{a['latency_ms']['n']} calls, {a['errors']} errors",
    )
    _row(
        rows,
        "  slowest (s after the storm began: ms)",
        ", ".join(f"{c['at_s']:g}: {c['ms']:g}" for c in a["slowest"]),
    )
    cuts = report["cuts"]
    if cuts.get("skipped"):
        _row(rows, "cable cuts", cuts["skipped"])
    else:
        n = f"{cuts['count']} cuts"
        _row(
            rows, "cut: event -> last StateDelta received", _dist(cuts["to_last_delta_ms"], "ms"), n
        )
        _row(rows, "cut: event -> last Applied sent", _dist(cuts["to_last_applied_ms"], "ms"), n)
        _row(rows, "cut: switches touched", _dist(cuts["switches"], ""), n)
        _row(rows, "cut: bytes pushed", _dist(cuts["bytes"], "B"), n)
        for kind, k in cuts["by_kind"].items():
            m = f"{k['count']} cuts"
            _row(rows, f"  {kind}: -> last delta", _dist(k["to_last_delta_ms"], "ms"), m)
            _row(rows, f"  {kind}: -> last Applied", _dist(k["to_last_applied_ms"], "ms"), m)
            _row(rows, f"  {kind}: switches", _dist(k["switches"], ""), m)
        r = cuts["restore"]
        _row(
            rows,
            "restore: PortStatus up -> last delta",
            _dist(r["to_last_delta_ms"], "ms"),
            f"{r['count']} restores (hold-down {setup['hold_down_s']:g} s included)",
        )
        _row(rows, "  resets during cuts", f"{cuts['resets']}")
        _row(rows, "  swarm event loop, longest lag", f"{cuts['swarm_loop_lag_max_ms']:g} ms")
    ops = report["railctl"]
    if ops.get("skipped"):
        _row(rows, "railctl", ops["skipped"])
    else:
        for command, f in ops.items():
            if command == "runs":
                continue
            _row(
                rows,
                f"railctl {command}",
                _dist(f["seconds"], "s"),
                f"{f['seconds']['n']} runs, {f['lines']:,} lines, exit {f['exit_code']}",
            )
    logged = report["controller_log"]["by_level"]
    _row(
        rows,
        "controller log",
        ", ".join(f"{level} {count}" for level, count in sorted(logged.items())) or "clean",
    )
    width = max(len(name) for name, _, _ in rows)
    lines = [
        f"{name:<{width}}  {value}" + (f"   [{sample}]" if sample else "")
        for name, value, sample in rows
    ]
    for example in report["controller_log"]["most_frequent"]:
        lines.append(f"{'':<{width}}  {example['count']} x {example['line']}")
    for code, details in report["storm"]["resets"]["examples"].items():
        for detail in details:
            lines.append(f"{'':<{width}}  reset {code}: {detail}")
    lines += [f"note: {note}" for note in report["notes"]]
    return "\n".join(lines)
