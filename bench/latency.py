"""Benchmark of the controller's latency heat map at a fabric's size, in process:

    python -m bench.latency examples/ref-100k.yaml [--periods 62] [--slow 4] [--json]

Every switch reports every report period (5 s, the agents' default) the probe results of the
default intent (`latency`: a round a second): a LINK result per cable from the end that probes
it (railfabric.latency.probes_link; 5 probes), and each
ToR a MESH result per target probed (8 targets a round, so 40 a period; the healthy uplinks
merged into one result, one probe per uplink each round). `--slow` ToRs have one slow uplink
(3 ms instead of ~20 us): the agent reports that uplink's mesh probes on their own, and both
ends of its cable see slow link probes; the slowdown starts in the last two periods (the
window), after the baseline filled. Reports arrive spread over each period, as agents'
timers spread them.

Figures, each with its sample: probe results the controller receives per second; ingest per
report (decoding it from the wire, then the core's `LatencyWindows.ingest`) p50 / max; the
share of a core at the 5 s period (ingest in CPU time: on a busy machine the time waiting
for a core is not the ingest's); the windows' memory (a walk of what they keep) and what
they hold; the time of a GetLatency answer's work by rail and by ToR pair (the cells,
outliers and first page's messages); the sample sizes per cell; and the outliers found.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.output import print_figures
from controller.core import latency as core_latency
from controller.core.latency import By, Fabric, LatencyParams, LatencyWindows
from controller.daemon import latency_view
from controller.fabric import Fabric as FabricIntent
from controller.fabric import Role
from controller.intent import load_fabric
from railfabric.latency import Result, bucket_of, probes_link, write_results
from railfabric.v1 import admin_pb2, control_pb2

REPORT_PERIOD_S = 5.0
ROUNDS_PER_PERIOD = 5  # a round a second
TARGETS_PER_ROUND = 8
PAGE = 5_000
S = 1_000_000_000
US = 1_000
LINK = control_pb2.PROBE_KIND_LINK
MESH = control_pb2.PROBE_KIND_MESH


def _hist(rng: random.Random, n: int, base_ns: int) -> tuple[list[int], list[int]]:
    counts: dict[int, int] = {}
    for _ in range(n):
        b = bucket_of(base_ns + rng.randint(0, base_ns // 2))
        counts[b] = counts.get(b, 0) + 1
    idx = sorted(counts)
    return idx, [counts[i] for i in idx]


def _walk_bytes(windows: LatencyWindows) -> int:
    """What the windows keep, in bytes: slots, their dicts, keys made for them, sums and
    histograms (link keys are the plan's strings: not counted)."""
    total = 0
    seen: set[int] = set()

    def size(obj: object) -> int:
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return sys.getsizeof(obj)

    for slot in [*windows.fine, *windows.epochs]:
        total += size(slot)
        for d in (slot.links, slot.mesh, slot.rails):
            total += size(d)
            for key, acc in d.items():
                if isinstance(key, tuple):
                    total += size(key)
                total += size(acc)
    return total


class ProbeReports:
    """The probe results each switch of `fabric` reports a period under the default intent
    (see the module's docstring), `slow` ToRs with one slow uplink when asked."""

    def __init__(self, fabric: FabricIntent, slow: int, rng: random.Random) -> None:
        self.rng = rng
        self.tors = tors = [s.name for s in fabric.switches if s.role == Role.TOR]
        self.position = {t: i for i, t in enumerate(tors)}
        self.tor_rails = {
            s.name: s.rail for s in fabric.switches if s.role == Role.TOR and s.rail is not None
        }
        self.rail_of = {s.name: (s.rail if s.rail is not None else -1) for s in fabric.switches}
        # The ports each switch link-probes (one end of each cable).
        self.ends: dict[str, list[int]] = {s.name: [] for s in fabric.switches}
        self.uplinks: dict[str, list[int]] = {t: [] for t in tors}
        cable_of: dict[tuple[str, int], str] = {}
        for link in fabric.links:
            if probes_link(link.a, link.a_port, link.b, link.b_port):
                self.ends[link.a].append(link.a_port)
            else:
                self.ends[link.b].append(link.b_port)
            cable_of[(link.a, link.a_port)] = cable_of[(link.b, link.b_port)] = link.key
            if link.a in self.uplinks:
                self.uplinks[link.a].append(link.a_port)
        self.core_fabric = Fabric.of(
            ((k.key, (k.a, k.a_port), (k.b, k.b_port)) for k in fabric.links), self.tor_rails
        )
        self.link_ends = {k.key: ((k.a, k.a_port), (k.b, k.b_port)) for k in fabric.links}
        self.slowed = {t: rng.choice(self.uplinks[t]) for t in rng.sample(tors, slow)}
        self.slowed_cables = {cable_of[(t, p)] for t, p in self.slowed.items()}
        self.slow_peer_ends = {end for key in self.slowed_cables for end in self.link_ends[key]}

    def add(self, msg: control_pb2.Counters, name: str, period: int, bad: bool) -> None:
        """Switch `name`'s results of report period `period` into `msg` (`bad`: slowed)."""
        rng, tors = self.rng, self.tors
        rows: list[Result] = []
        for port in self.ends[name]:
            base = 3_000 * US if bad and (name, port) in self.slow_peer_ends else 10 * US
            idx, cnt = _hist(rng, ROUNDS_PER_PERIOD, base)
            rows.append(Result(LINK, port, "", ROUNDS_PER_PERIOD, ROUNDS_PER_PERIOD, idx, cnt))
        if name in self.uplinks:
            ups = len(self.uplinks[name])
            start = (period * ROUNDS_PER_PERIOD * TARGETS_PER_ROUND) % len(tors)
            me = self.position[name]
            for i in range(ROUNDS_PER_PERIOD * TARGETS_PER_ROUND):
                target = tors[(me + 1 + (start + i) % (len(tors) - 1)) % len(tors)]
                slow_up = self.slowed.get(name) if bad else None
                healthy = ups - (1 if slow_up is not None else 0)
                idx, cnt = _hist(rng, healthy, 25 * US)
                rows.append(Result(MESH, 0, target, healthy, healthy, idx, cnt))
                if slow_up is not None:
                    idx, cnt = _hist(rng, 1, 3_000 * US)
                    rows.append(Result(MESH, slow_up, target, 1, 1, idx, cnt))
        if rows:
            write_results(msg.probe_results, rows)


def _ingest(
    windows: LatencyWindows, name: str, msg: control_pb2.Counters, at_ns: int, fabric: Fabric
) -> None:
    """`name`'s report into `windows`, as the core takes it; a result the windows refused
    ends the benchmark (a figure from results they did not keep is no figure)."""
    refused = windows.ingest(name, msg.probe_results, at_ns, fabric)
    if refused:
        raise SystemExit(f"bench.latency: {name}'s report was refused: {refused[:3]}")


def run(fabric_path: Path, periods: int, slow: int, seed: int) -> dict[str, object]:
    fabric = load_fabric(fabric_path)
    rng = random.Random(seed)
    probes = ProbeReports(fabric, slow, rng)
    tors, tor_rails, rail_of = probes.tors, probes.tor_rails, probes.rail_of
    core_fabric, link_ends = probes.core_fabric, probes.link_ends
    slowed_cables = probes.slowed_cables

    def report(name: str, period: int, bad: bool) -> bytes:
        msg = control_pb2.Counters(wall_ns=period * int(REPORT_PERIOD_S * S))
        probes.add(msg, name, period, bad)
        return msg.SerializeToString()

    names = [s.name for s in fabric.switches]
    windows = LatencyWindows(LatencyParams())
    # Reports for a few periods, reused (building 4,672 a period costs more than the bench).
    variants = 3
    normal = [{n: report(n, v, False) for n in names} for v in range(variants)]
    bad = [{n: report(n, v, True) for n in names} for v in range(2)]
    per_report: list[float] = []
    per_period: list[float] = []
    results = 0
    now_ns = 1_000 * S
    spacing = int(REPORT_PERIOD_S * S) // len(names)
    for period in range(periods):
        slow_now = slow and period >= periods - 2
        wire = bad[period % 2] if slow_now else normal[period % variants]
        order = list(names)
        rng.shuffle(order)
        spent = 0.0
        for i, name in enumerate(order):
            data = wire[name]
            started = time.process_time()
            msg = control_pb2.Counters()
            msg.ParseFromString(data)
            _ingest(windows, name, msg, now_ns + i * spacing, core_fabric)
            took = time.process_time() - started
            per_report.append(took)
            spent += took
            if period == periods - 1:
                results += len(msg.probe_results.kind)
        per_period.append(spent)
        now_ns += int(REPORT_PERIOD_S * S)
    at = now_ns - spacing
    answers: dict[str, float] = {}
    answers_cpu: dict[str, float] = {}
    first_page: dict[str, int] = {}
    for by in (By.RAIL, By.TOR):
        # A report between answers, as at scale (~900 a second): an answer reads afresh.
        name = names[len(first_page)]
        msg = control_pb2.Counters()
        msg.ParseFromString(normal[0][name])
        _ingest(windows, name, msg, at, core_fabric)
        # What the daemon's answer does (DecisionCore.latency_heat and latency_outliers).
        started, cpu = time.perf_counter(), time.process_time()
        window = windows.window(at)
        baseline = windows.baseline(at, tor_rails)
        bad_tor_pairs = core_latency.bad_pairs(
            windows.params, window.mesh, baseline.rails, tor_rails
        )
        heat = core_latency.heat(
            by,
            windows.params,
            window,
            baseline,
            fabric=core_fabric,
            ends=link_ends,
            rail_of=rail_of,
            bad=bad_tor_pairs,
        )
        found = core_latency.outliers(
            windows.params, window, baseline, fabric=core_fabric, ends=link_ends,
            probe_path=lambda _s, _p, _d: None, bad=bad_tor_pairs,
        )  # fmt: skip
        reply = admin_pb2.LatencyResponse(
            cells=[latency_view.cell_message(c) for c in heat.cells[:PAGE]],
            outliers=latency_view.outlier_messages(found),
        )
        first_page[by.value] = reply.ByteSize()
        answers[by.value] = time.perf_counter() - started
        answers_cpu[by.value] = time.process_time() - cpu
        if by is By.TOR:
            tor_cells = heat
        else:
            rail_cells = heat
    links_heat = core_latency.heat(
        By.LINK,
        windows.params,
        window,
        baseline,
        fabric=core_fabric,
        ends=link_ends,
        rail_of=rail_of,
    )
    slots, histograms = windows.memory_items()
    found_keys = [o.link for o in found]
    samples_rail = sorted(c.verdict.samples for c in rail_cells.cells)
    samples_tor = sorted(c.verdict.samples for c in tor_cells.cells)
    samples_link = sorted(c.verdict.samples for c in links_heat.cells)
    measured = per_period[-min(len(per_period), 3) :]
    return {
        "fabric": fabric.name,
        "switches": len(names),
        "cables": len(fabric.links),
        "tors": len(tors),
        "periods": periods,
        "results_per_period": results,
        "results_per_s": round(results / REPORT_PERIOD_S),
        "ingest_ms_per_report_p50": round(statistics.median(per_report) * 1e3, 3),
        "ingest_ms_per_report_max": round(max(per_report) * 1e3, 2),
        "ingest_s_per_period": round(statistics.median(measured), 3),
        "ingest_core_share_at_5s": round(statistics.median(measured) / REPORT_PERIOD_S, 4),
        "window_slots": slots,
        "window_histograms": histograms,
        "window_mb": round(_walk_bytes(windows) / 1e6, 1),
        "answer_by_rail_ms": round(answers["rail"] * 1e3, 1),
        "answer_by_rail_cpu_ms": round(answers_cpu["rail"] * 1e3, 1),
        "answer_by_tor_ms": round(answers["tor"] * 1e3, 1),
        "answer_by_tor_cpu_ms": round(answers_cpu["tor"] * 1e3, 1),
        "first_page_bytes_by_rail": first_page["rail"],
        "first_page_bytes_by_tor": first_page["tor"],
        "rail_pairs": len(rail_cells.cells),
        "tor_pairs_in_window": len(tor_cells.cells),
        "samples_per_rail_pair_min_median": [samples_rail[0], samples_rail[len(samples_rail) // 2]]
        if samples_rail
        else [0, 0],
        "samples_per_tor_pair_median": samples_tor[len(samples_tor) // 2] if samples_tor else 0,
        "samples_per_cable_median": samples_link[len(samples_link) // 2] if samples_link else 0,
        "slowed_cables": len(slowed_cables),
        "outliers": len(found),
        "slowed_cables_ranked_first": set(found_keys[: len(slowed_cables)]) == slowed_cables,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("fabric", type=Path)
    parser.add_argument(
        "--periods", type=int, default=62, help="report periods (62: the window and baseline full)"
    )
    parser.add_argument("--slow", type=int, default=4, help="ToRs with one slow uplink")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.periods < 3 or args.slow < 0:
        parser.error("--periods must be >= 3 and --slow >= 0")
    figures = run(args.fabric, args.periods, args.slow, args.seed)
    print_figures(figures, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
