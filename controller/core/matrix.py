"""The traffic matrix: ToR x ToR (and rail x rail) rates from the ToRs' counter reports.

Each ToR counts, at its host ports, the traffic to every destination ToR (fabric.p4's
matrix_counter, by class: class t is the fabric's t-th ToR, controller.export.matrix_classes)
and reports the cumulative counts with its other counters (Counters.matrix_packets and
matrix_bytes, every 5 s by default). A rate is the growth of those counts between two of its
reports: the newest, and the oldest kept that is at least the asked window older (or the oldest
kept: each answer says the span it measured and over how many reports). A count that went down
means the target's counters restarted: the reports before it are dropped.

Pure: reports in, rates out; the core keeps the last MATRIX_REPORTS reports of each ToR.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from railfabric.v1 import admin_pb2, control_pb2

if TYPE_CHECKING:  # the core keeps the reports (controller/core/switches.py)
    from controller.core.machine import DecisionCore

# Reports kept per ToR: a window of up to (MATRIX_REPORTS - 1) report periods (10 s at 5 s).
MATRIX_REPORTS = 3
# (packets/s, bytes/s)
Rate = tuple[float, float]


@dataclass(frozen=True, slots=True)
class ClassRails:
    """The rail of each class's destination ToR, and each rail's classes (built once per
    intent, so summing a report by rail is a pass over arrays, not a dict per cell)."""

    of_class: Sequence[int]
    classes: Mapping[int, tuple[int, ...]]
    # A rail's classes as a slice, when they are evenly spaced (ToRs listed block by block,
    # rail by rail in a block: every rails-th class): a report's sums by rail are then C
    # loops over its arrays, not a lookup per class (2.56 M per period at 100k GPUs).
    slices: Mapping[int, slice] = dataclasses.field(default_factory=dict)

    @staticmethod
    def of(rail_of_class: Sequence[int]) -> ClassRails:
        classes: dict[int, list[int]] = {}
        for c, rail in enumerate(rail_of_class):
            classes.setdefault(rail, []).append(c)
        slices = {}
        for rail, cs in classes.items():
            step = cs[1] - cs[0] if len(cs) > 1 else 1
            if all(b - a == step for a, b in itertools.pairwise(cs)):
                slices[rail] = slice(cs[0], cs[-1] + 1, step)
        return ClassRails(tuple(rail_of_class), {r: tuple(cs) for r, cs in classes.items()}, slices)


@dataclass(frozen=True, slots=True)
class MatrixReport:
    """One report of a ToR's matrix: when, and the cumulative packets and bytes by class
    (dense arrays, as Counters carries them), and the same summed by the destination's rail
    (so rail x rail needs no pass over the cells: at 100k GPUs under all-to-all traffic the
    cells are 2.56 M)."""

    wall_ns: int
    packets: array[int]
    octets: array[int]
    rails: Mapping[int, tuple[int, int]]

    @staticmethod
    def of(msg: control_pb2.Counters, rails: ClassRails) -> MatrixReport:
        """ValueError when the report's two arrays differ in length. A class beyond `rails`
        (from an intent since replaced) counts in no rail."""
        # Sliced to a list first: array() from a protobuf repeated field goes item by item.
        packets, octets = array("Q", msg.matrix_packets[:]), array("Q", msg.matrix_bytes[:])
        if len(packets) != len(octets):
            raise ValueError(
                f"Counters.matrix_packets has {len(packets)} classes and matrix_bytes "
                f"{len(octets)}: the traffic matrix of this report is ignored"
            )
        n = len(packets)
        sums: dict[int, tuple[int, int]] = {}
        if not n:
            return MatrixReport(msg.wall_ns, packets, octets, sums)
        slices = rails.slices
        for rail, all_classes in rails.classes.items():
            if all_classes[-1] < n and (cut := slices.get(rail)) is not None:
                sums[rail] = (sum(packets[cut]), sum(octets[cut]))
                continue
            classes = all_classes if all_classes[-1] < n else [c for c in all_classes if c < n]
            if classes:
                sums[rail] = (
                    sum(map(packets.__getitem__, classes)),
                    sum(map(octets.__getitem__, classes)),
                )
        return MatrixReport(msg.wall_ns, packets, octets, sums)

    @property
    def active(self) -> int:
        """Classes that counted something: the ToR pairs that carried traffic."""
        return len(self.packets) - self.packets.count(0)

    def restarted_after(self, earlier: MatrixReport) -> bool:
        """Did a count go down since `earlier` (the target's counters started again)? Packets
        only: a cell's packets and bytes are one counter's, reset together."""
        n = len(self.packets)
        return any(map(operator.lt, self.packets, earlier.packets)) or any(earlier.packets[n:])


def record(history: deque[MatrixReport], msg: control_pb2.Counters, rails: ClassRails) -> None:
    """Keep `msg`'s matrix in `history` (a deque with maxlen MATRIX_REPORTS). ValueError
    (nothing kept) for a report whose arrays differ in length."""
    report = MatrixReport.of(msg, rails)
    if history and (report.wall_ns <= history[-1].wall_ns or report.restarted_after(history[-1])):
        history.clear()  # a restarted target, or a clock gone back: start measuring again
    history.append(report)


@dataclass(frozen=True, slots=True)
class Row:
    """A source ToR's rates: class -> (packets/s, bytes/s), over `span_ns` between
    `reports` reports (2 or more), the newest at `end_wall_ns`."""

    rates: Mapping[int, Rate]
    span_ns: int
    reports: int
    end_wall_ns: int


def row(history: Iterable[MatrixReport], window_ns: int, *, by_rail: bool = False) -> Row | None:
    """The rates of one ToR over about `window_ns` (see the module's docstring), by class, or
    `by_rail` by destination rail; None with fewer than two reports."""
    kept = list(history)
    if len(kept) < 2:
        return None
    newest = kept[-1]
    start = 0
    for i, report in enumerate(kept[:-1]):
        if newest.wall_ns - report.wall_ns >= window_ns:
            start = i  # the newest one still old enough
    oldest = kept[start]
    span_ns = newest.wall_ns - oldest.wall_ns
    rates: dict[int, Rate] = {}
    if by_rail:
        for c, (packets, octets) in newest.rails.items():
            before_pk, before_by = oldest.rails.get(c, (0, 0))
            if packets > before_pk:
                rates[c] = (
                    (packets - before_pk) * 1e9 / span_ns,
                    (octets - before_by) * 1e9 / span_ns,
                )
        return Row(rates, span_ns, len(kept) - start, newest.wall_ns)
    old_pk, old_by, n_old = oldest.packets, oldest.octets, len(oldest.packets)
    for c, packets in enumerate(newest.packets):
        before_pk = old_pk[c] if c < n_old else 0
        if packets > before_pk:
            before_by = old_by[c] if c < n_old else 0
            rates[c] = (
                (packets - before_pk) * 1e9 / span_ns,
                (newest.octets[c] - before_by) * 1e9 / span_ns,
            )
    return Row(rates, span_ns, len(kept) - start, newest.wall_ns)


@dataclass(frozen=True, slots=True)
class Cell:
    """Traffic from ToR `src` to ToR `dst`, per second."""

    src: str
    dst: str
    packets_per_s: float
    bytes_per_s: float


def tor_cells(rows: Mapping[str, Row], destinations: Sequence[str]) -> list[Cell]:
    """The non-zero ToR x ToR cells of `rows` (source ToR -> its row), classes named by
    `destinations` (class -> destination ToR), sources and destinations in the rows' order."""
    out: list[Cell] = []
    for src, r in rows.items():
        for c in sorted(r.rates):
            if c < len(destinations):
                packets, octets = r.rates[c]
                out.append(Cell(src, destinations[c], packets, octets))
    return out


def rows_of(
    histories: Mapping[str, Iterable[MatrixReport]], window_ns: int, *, by_rail: bool = False
) -> tuple[dict[str, Row], list[str]]:
    """Each ToR's row (in `histories`' order), and the ToRs without two reports yet."""
    rows: dict[str, Row] = {}
    unmeasured: list[str] = []
    for name, history in histories.items():
        r = row(history, window_ns, by_rail=by_rail)
        if r is None:
            unmeasured.append(name)
        else:
            rows[name] = r
    return rows, unmeasured


@dataclass(frozen=True, slots=True)
class RailMatrix:
    """The matrix by rail: (source rail, destination rail) -> rate, and the rows it sums."""

    cells: Mapping[tuple[int, int], Rate]
    rows: Mapping[str, Row]
    unmeasured: Sequence[str]


def by_rail(
    histories: Mapping[str, Iterable[MatrixReport]], rail_of: Mapping[str, int], window_ns: int
) -> RailMatrix:
    """The ToRs' rows (`histories`, ToR -> its reports) by rail: each ToR's rates to every
    destination rail (kept with its reports), summed by the ToR's own rail."""
    rows, unmeasured = rows_of(histories, window_ns, by_rail=True)
    sums: dict[tuple[int, int], Rate] = {}
    for tor, r in rows.items():
        src = rail_of[tor]
        for dst, (packets, octets) in r.rates.items():
            have_packets, have_octets = sums.get((src, dst), (0.0, 0.0))
            sums[(src, dst)] = (have_packets + packets, have_octets + octets)
    return RailMatrix(sums, rows, unmeasured)


def rail_matrix(core: DecisionCore, window_ns: int) -> RailMatrix:
    """`core`'s traffic matrix by rail (GetTrafficMatrix --by rail, Prometheus, the web
    view): a pass over ToRs and rails, not cells."""
    infos = core.planner.switches()
    rail_of = {i.name: i.rail for i in infos}
    tors = [i.name for i in infos if i.role == admin_pb2.SWITCH_ROLE_TOR]
    return by_rail({t: core.views[t].matrix_reports for t in tors}, rail_of, window_ns)


def class_rails(destinations: Sequence[str], rail_of: Mapping[str, int]) -> ClassRails:
    """The rail of each class's destination ToR, by class, and each rail's classes."""
    return ClassRails.of([rail_of[t] for t in destinations])
