"""controller/core/matrix.py: a ToR's rates from its cumulative counter reports, over the
window asked or what is kept, a target restart starting the measurement again; cells named by
destination ToR and summed by rail."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.matrix import (
    MATRIX_REPORTS,
    Cell,
    ClassRails,
    MatrixReport,
    Row,
    by_rail,
    record,
    row,
    rows_of,
    tor_cells,
)
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

S = 1_000_000_000
# The rail of each class's destination ToR, for tests of one ToR's row.
RAILS = ClassRails.of([1, 1, 2, 2])


def counters(wall_s: float, cells: dict[int, tuple[int, int]]) -> control_pb2.Counters:
    """A report as the agent sends it: dense up to the highest class in `cells`."""
    size = max(cells, default=-1) + 1
    packets, octets = [0] * size, [0] * size
    for c, (p, b) in cells.items():
        packets[c], octets[c] = p, b
    return control_pb2.Counters(
        wall_ns=int(wall_s * S), matrix_packets=packets, matrix_bytes=octets
    )


def test_rates_over_the_last_period_or_the_window_asked() -> None:
    history: deque[MatrixReport] = deque(maxlen=MATRIX_REPORTS)
    assert row(history, 0) is None
    record(history, counters(0, {1: (100, 10_000)}), RAILS)
    assert row(history, 0) is None  # one report: no rate yet
    record(history, counters(5, {1: (600, 60_000), 2: (50, 5_000)}), RAILS)
    record(history, counters(10, {1: (1_100, 110_000), 2: (50, 5_000)}), RAILS)
    last = row(history, 0)
    assert last == Row({1: (100.0, 10_000.0)}, 5 * S, 2, 10 * S)  # class 2 sent nothing since
    ten = row(history, 10 * S)
    assert ten == Row({1: (100.0, 10_000.0), 2: (5.0, 500.0)}, 10 * S, 3, 10 * S)
    # More than is kept: the oldest kept, said in the span.
    assert row(history, 60 * S) == ten
    record(history, counters(15, {1: (1_600, 160_000), 2: (50, 5_000)}), RAILS)
    assert len(history) == MATRIX_REPORTS and row(history, 60 * S) == Row(
        {1: (100.0, 10_000.0)}, 10 * S, 3, 15 * S
    )


def test_a_restarted_target_starts_the_measurement_again() -> None:
    history: deque[MatrixReport] = deque(maxlen=MATRIX_REPORTS)
    record(history, counters(0, {1: (1_000, 100_000)}), RAILS)
    record(history, counters(5, {1: (2_000, 200_000)}), RAILS)
    record(history, counters(10, {1: (30, 3_000)}), RAILS)  # counts went down: restarted
    assert row(history, 0) is None
    record(history, counters(15, {1: (530, 53_000)}), RAILS)
    assert row(history, 0) == Row({1: (100.0, 10_000.0)}, 5 * S, 2, 15 * S)


def test_a_report_whose_arrays_differ_in_length_is_refused_and_nothing_kept() -> None:
    history: deque[MatrixReport] = deque(maxlen=MATRIX_REPORTS)
    bad = control_pb2.Counters(wall_ns=S, matrix_packets=[1, 2], matrix_bytes=[100])
    with pytest.raises(ValueError, match="matrix_packets has 2 classes and matrix_bytes 1"):
        record(history, bad, RAILS)
    assert not history


def test_cells_are_named_by_destination_and_summed_by_rail_at_ingest() -> None:
    rows = {
        "tor-a": Row({0: (1.0, 100.0), 1: (2.0, 200.0)}, 5 * S, 2, 5 * S),
        "tor-b": Row({0: (4.0, 400.0)}, 5 * S, 2, 5 * S),
    }
    assert tor_cells(rows, ["tor-a", "tor-b"]) == [
        Cell("tor-a", "tor-a", 1.0, 100.0),
        Cell("tor-a", "tor-b", 2.0, 200.0),
        Cell("tor-b", "tor-a", 4.0, 400.0),
    ]
    # Three ToRs: a (rail 1), b and c (rail 2); classes 0, 1, 2 are a, b, c.
    rail_of = {"tor-a": 1, "tor-b": 2, "tor-c": 2}
    rails_of_class = ClassRails.of([1, 2, 2])
    histories: dict[str, deque[MatrixReport]] = {t: deque(maxlen=MATRIX_REPORTS) for t in rail_of}
    for t, scale in ((0, 0), (5, 1)):
        record(
            histories["tor-a"],
            counters(t, {1: (10 * scale, 1_000 * scale), 2: (40 * scale, 4_000 * scale)}),
            rails_of_class,
        )
        record(histories["tor-b"], counters(t, {0: (5 * scale, 500 * scale)}), rails_of_class)
        if t:  # tor-c reported once: not measured
            record(histories["tor-c"], counters(t, {0: (1, 1)}), rails_of_class)
    rails = by_rail(histories, rail_of, 0)
    assert rails.cells == {(1, 2): (10.0, 1_000.0), (2, 1): (1.0, 100.0)}
    assert list(rails.unmeasured) == ["tor-c"]
    # The same as summing the ToR x ToR cells by rail.
    rows, _ = rows_of(histories, 0)
    summed: dict[tuple[int, int], tuple[float, float]] = {}
    for c in tor_cells(rows, ["tor-a", "tor-b", "tor-c"]):
        key = (rail_of[c.src], rail_of[c.dst])
        p, b = summed.get(key, (0.0, 0.0))
        summed[key] = (p + c.packets_per_s, b + c.bytes_per_s)
    assert rails.cells == summed


@st.composite
def reports(draw: st.DrawFn) -> list[tuple[int, dict[int, tuple[int, int]], bool]]:
    """Reports of a ToR: (wall_ns, cumulative cells, restarted before it)."""
    out = []
    wall = 0
    totals: dict[int, tuple[int, int]] = {}
    for _ in range(draw(st.integers(1, 8))):
        wall += draw(st.integers(1, 10)) * S
        restarted = draw(st.booleans()) and draw(st.booleans())
        if restarted:
            totals = {}
        for c in draw(st.lists(st.integers(0, 3), max_size=3)):
            packets, octets = totals.get(c, (0, 0))
            more = draw(st.integers(1, 1_000))
            totals[c] = (packets + more, octets + more * 100)
        out.append((wall, dict(totals), restarted))
    return out


@settings(max_examples=300, deadline=None)
@given(reports(), st.integers(0, 40))
def test_a_row_is_the_growth_between_the_reports_a_fresh_reading_picks(
    history_in: list[tuple[int, dict[int, tuple[int, int]], bool]], window_s: int
) -> None:
    history: deque[MatrixReport] = deque(maxlen=MATRIX_REPORTS)
    for wall, cells, _ in history_in:
        record(history, counters(wall / S, cells), RAILS)
    got = row(history, window_s * S)
    # From scratch: the reports since the last one whose counts went down, the last kept few.
    since = 0
    for i in range(1, len(history_in)):
        before, now = history_in[i - 1][1], history_in[i][1]
        if any(
            now.get(c, (0, 0))[0] < p or now.get(c, (0, 0))[1] < b for c, (p, b) in before.items()
        ):
            since = i
    usable = history_in[since:][-MATRIX_REPORTS:]
    if len(usable) < 2:
        assert got is None
        return
    newest_wall, newest, _ = usable[-1]
    old_enough = [r for r in usable[:-1] if newest_wall - r[0] >= window_s * S]
    oldest_wall, oldest, _ = old_enough[-1] if old_enough else usable[0]
    span = newest_wall - oldest_wall
    want = {
        c: (
            (p - oldest.get(c, (0, 0))[0]) * 1e9 / span,
            (b - oldest.get(c, (0, 0))[1]) * 1e9 / span,
        )
        for c, (p, b) in newest.items()
        if p > oldest.get(c, (0, 0))[0]
    }
    assert got is not None
    assert (got.rates, got.span_ns) == (want, span)


@settings(max_examples=300, deadline=None)
@given(
    rails=st.one_of(
        # ToRs listed block by block, rail by rail: every rail's classes evenly spaced.
        st.tuples(st.integers(1, 8), st.integers(1, 6)).map(
            lambda rb: [r for _ in range(rb[1]) for r in range(1, rb[0] + 1)]
        ),
        st.lists(st.integers(0, 4), min_size=1, max_size=30),  # any order at all
    ),
    data=st.data(),
)
def test_sums_by_rail_are_the_sums_of_each_rails_classes(
    rails: list[int], data: st.DataObject
) -> None:
    """Summed by slices where a rail's classes are evenly spaced, by lookups where not, and
    over a report with fewer classes than the intent (an agent behind a reload) too."""
    size = data.draw(st.integers(0, len(rails)))
    cells = {
        c: (data.draw(st.integers(0, 10**12)), data.draw(st.integers(0, 10**15)))
        for c in range(size)
    }
    report = MatrixReport.of(
        counters(1, cells) if cells else control_pb2.Counters(), ClassRails.of(rails)
    )
    want: dict[int, tuple[int, int]] = {}
    for c, (p, b) in cells.items():
        have = want.get(rails[c], (0, 0))
        want[rails[c]] = (have[0] + p, have[1] + b)
    assert report.rails == want
