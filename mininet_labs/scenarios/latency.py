"""The latency heat map, checked against a cable made slow on purpose: the agents' probes run
at the intent's rate; once the controller has a baseline and a window newer than the
scenario's start (the normal reading), one ToR-spine cable is replaced by a delay line
(mininet_labs/delay_line.py: nothing lost) until the window holds only slow probes. Then:

- the cable's own cell (its link probes, both ends) has a p50 above its normal p99;
- every ToR-pair cell from the ToR on that cable has a p99 above its normal p99 (a share of
  its mesh probes leaves on that uplink, the rest on the others);
- the controller's latency outliers rank that cable first;
- `railctl diagnose` ranks it first among the latency findings (and names it).

The sample: the probes answered in each cell before and while slowed, and the window.
The delay, each way, is DELAY_MS or, where the normal reading spreads wider, the worst
normal p99 of the cable and the ToR's pairs and a margin: a mesh probe out of the slowed
uplink may come back over another spine, so it carries one way of the delay, and it must
stand out of the normal spread. Probes go through the sender's CPU path (P4Runtime
packet-out and packet-in on a shared 2-core machine; the far switch answers in its data
plane) and softswitches in Python, whose p99 is milliseconds to tens of milliseconds, not the
microseconds of a hardware fabric. A spread too close to the probes' timeout to stand out of
is a failure."""

from __future__ import annotations

import json
import math
import subprocess
import time

import grpc

from controller.fabric import Role
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

NAME = "latency"
DELAY_MS = 25.0  # each way at least: +50 ms RTT over the cable
MARGIN_MS = 10.0
MS = 1_000_000


def _latency(lab: Lab, by: admin_pb2.LatencyBy.ValueType) -> admin_pb2.LatencyResponse:
    """Every page of the heat map (the outliers come on the first)."""
    request = admin_pb2.GetLatencyRequest(by=by, page_size=1000)
    first: admin_pb2.LatencyResponse = lab.admin.GetLatency(request, timeout=10)
    token = first.next_page_token
    while token:
        request.page_token = token
        page: admin_pb2.LatencyResponse = lab.admin.GetLatency(request, timeout=10)
        first.cells.extend(page.cells)
        token = page.next_page_token
    return first


def _cable(lab: Lab) -> tuple[str, str]:
    """The first ToR's first cable to a spine: (its key, the ToR)."""
    roles = {s.name: s.role for s in lab.fabric.switches}
    for link in lab.fabric.links:
        ends = {roles[link.a]: link.a, roles[link.b]: link.b}
        if Role.TOR in ends and Role.SPINE in ends:
            return link.key, ends[Role.TOR]
    raise LabError(f"fabric {lab.fabric.name}: no ToR-spine cable")


def run(lab: Lab, budget: Budget) -> Result:
    del budget  # the probes' own rate decides the sample
    if lab.fabric.latency.interval_ms == 0:
        return Result.skip(NAME, f"fabric {lab.fabric.name}: latency probing is off")
    key, tor = _cable(lab)
    window_s = lab.fabric.latency.window_s
    min_samples = lab.fabric.latency.min_samples

    began = time.monotonic()

    def ready() -> tuple[admin_pb2.LatencyResponse, admin_pb2.LatencyResponse] | None:
        """The heat map once the cable and the ToR's pairs have a window and a baseline, and
        the whole window is newer than this scenario: run after others, a window holding
        their cuts and traffic had normal p99s of 120-340 ms on 8 rails, above the slowing."""
        if time.monotonic() - began < window_s + 1:
            return None
        try:
            links = _latency(lab, admin_pb2.LATENCY_BY_LINK)
            pairs = _latency(lab, admin_pb2.LATENCY_BY_TOR)
        except grpc.RpcError:
            return None
        cell = next((c for c in links.cells if c.link == key), None)
        mine = [c for c in pairs.cells if c.src == tor]
        enough = cell is not None and cell.samples >= min_samples
        enough = enough and cell is not None and cell.baseline_samples >= min_samples
        enough = enough and bool(mine) and all(c.baseline_samples >= min_samples for c in mine)
        return (links, pairs) if enough else None

    lab.progress(
        f"latency: waiting for a quiet {window_s:g} s window and a baseline of {key}'s probes"
    )
    normal_links, normal_pairs = wait_for(
        "a latency baseline", ready, timeout_s=3 * window_s + 30, every_s=1.0
    )
    normal = next(c for c in normal_links.cells if c.link == key)
    normal_pair = {(c.src, c.dst): c for c in normal_pairs.cells if c.src == tor}
    spread_ms = max(c.p99_ns for c in [normal, *normal_pair.values()]) / MS
    delay_ms = max(DELAY_MS, 5 * math.ceil((spread_ms + MARGIN_MS) / 5))
    timeout_ms = lab.fabric.latency.timeout_ms
    if 2 * delay_ms + spread_ms >= timeout_ms:
        return Result(
            NAME,
            False,
            f"normal p99 up to {spread_ms:.1f} ms: a delay that stands out of it "
            f"({delay_ms:g} ms each way) would time the probes out ({timeout_ms} ms)",
            {"normal_p99_max_ms": round(spread_ms, 3), "timeout_ms": timeout_ms},
        )
    started = time.monotonic()
    lab.progress(f"latency: {key} slowed by {delay_ms:g} ms each way (normal p99 up to "
                 f"{spread_ms:.1f} ms)")  # fmt: skip
    with lab.slow_cable(key, delay_ms):

        def slowed() -> tuple[admin_pb2.LatencyResponse, admin_pb2.LatencyResponse] | None:
            """The heat map once the whole window is newer than the slowing."""
            if time.monotonic() - started < window_s + 1:
                return None
            try:
                return _latency(lab, admin_pb2.LATENCY_BY_LINK), _latency(
                    lab, admin_pb2.LATENCY_BY_TOR
                )
            except grpc.RpcError:
                return None

        links, pairs = wait_for("a window of slow probes", slowed, window_s + 30, 1.0)
        # As an operator asks: exit 3 says "not healthy", which it is not.
        done = subprocess.run(
            lab.railctl_argv("diagnose", "--json"),
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        diagnosis = json.loads(done.stdout) if done.stdout.strip() else {}
    cell = next((c for c in links.cells if c.link == key), None)
    ranked = [o.link for o in links.outliers]
    problems: list[str] = []
    if cell is None or cell.samples < min_samples:
        problems.append(f"{key}: {cell.samples if cell else 0} probes answered while slowed")
    elif cell.p50_ns <= normal.p99_ns:
        problems.append(
            f"{key}: p50 {cell.p50_ns / MS:.1f} ms slowed, not above its normal p99 "
            f"{normal.p99_ns / MS:.1f} ms"
        )
    changed, rows = 0, []
    for c in sorted((c for c in pairs.cells if c.src == tor), key=lambda c: c.dst):
        before = normal_pair.get((c.src, c.dst))
        moved = before is not None and c.samples >= min_samples and c.p99_ns > before.p99_ns
        changed += moved
        rows.append(
            (
                f"{c.src} -> {c.dst}",
                f"{before.p50_ns / MS:.1f} / {before.p99_ns / MS:.1f}" if before else "-",
                f"{c.p50_ns / MS:.1f} / {c.p99_ns / MS:.1f}",
                f"{c.samples}",
                "yes" if moved else "NO",
            )
        )
    if not rows or changed < len(rows):
        problems.append(f"{changed} of {len(rows)} ToR pairs from {tor} above their normal p99")
    if not ranked or ranked[0] != key:
        problems.append(f"outliers ranked {ranked[:3] or 'none'}, not {key} first")
    latency_findings = [f for f in _findings(diagnosis) if f.get("kind") == "latency_outlier"]
    first = latency_findings[0] if latency_findings else {}
    if key not in str(first.get("id", "")):
        problems.append(f"railctl diagnose: no latency finding naming {key} first")
    p50 = cell.p50_ns / MS if cell else 0.0
    reason = (
        f"{key} slowed by {2 * delay_ms:g} ms RTT: its p50 {normal.p50_ns / MS:.1f} -> "
        f"{p50:.1f} ms (normal p99 {normal.p99_ns / MS:.1f} ms, "
        f"{cell.samples if cell else 0} probes in {links.window_ns / 1e9:.0f} s); "
        f"{changed}/{len(rows)} ToR pairs from {tor} above their normal p99; outliers "
        f"{len(ranked)}, first {ranked[0] if ranked else 'none'}"
    )
    if problems:
        reason += "; " + "; ".join(problems)
    table = Table(
        ("ToR pair", "normal p50 / p99 ms", "slowed p50 / p99 ms", "probes", "above"),
        tuple(rows),
    )
    metrics: dict[str, float | int | str] = {
        "cable": key,
        "delay_ms_each_way": delay_ms,
        "normal_p99_max_ms": round(spread_ms, 3),
        "normal_p50_ms": round(normal.p50_ns / MS, 3),
        "normal_p99_ms": round(normal.p99_ns / MS, 3),
        "normal_samples": normal.samples,
        "slowed_p50_ms": round(p50, 3),
        "slowed_p99_ms": round(cell.p99_ns / MS, 3) if cell else 0.0,
        "slowed_samples": cell.samples if cell else 0,
        "window_s": round(links.window_ns / 1e9, 1),
        "tor_pairs": len(rows),
        "tor_pairs_above_normal_p99": changed,
        "outliers": len(ranked),
        "outlier_rank_of_cable": ranked.index(key) + 1 if key in ranked else 0,
        "latency_findings": len(latency_findings),
    }
    return Result(NAME, not problems, reason, metrics, (table,))


def _findings(diagnosis: object) -> list[dict[str, object]]:
    """railctl diagnose --json's findings, in its ranked order."""
    if isinstance(diagnosis, dict):
        found = diagnosis.get("findings", [])
        return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []
    return []
