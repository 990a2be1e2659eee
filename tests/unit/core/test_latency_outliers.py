"""The latency heat map's outlier rule and ranking (controller/core/latency.py), and the decision
core feeding it from Counters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core.latency import (
    SENT,
    Fabric,
    LatencyParams,
    LatencyWindows,
    Reason,
    Stats,
    acc_of,
    could_be_outlier,
    judge,
    outliers,
    rail_sums,
)
from railfabric.latency import Result, bucket_of, percentile_ns, results_of
from railfabric.v1 import control_pb2

from .harness import Harness

pytestmark = pytest.mark.unit

S = 1_000_000_000
US = 1_000
LINK, MESH = control_pb2.PROBE_KIND_LINK, control_pb2.PROBE_KIND_MESH
# Four ToRs (rails 0, 0, 1, 1), each with uplinks 1 and 2 to spines s1 and s2.
TORS = {"t0": 0, "t1": 0, "t2": 1, "t3": 1}
INDEX = {t: i for i, t in enumerate(TORS)}
CABLES = [(f"{t}:{u}--s{u}:{i}", (t, u), (f"s{u}", i)) for t, i in INDEX.items() for u in (1, 2)]
FABRIC = Fabric.of(CABLES, TORS)
ENDS = {k: (a, b) for k, a, b in CABLES}
PARAMS = LatencyParams(window_ns=10 * S, baseline_ns=60 * S, outlier_margin_ns=50 * US)


def cable(tor: str, uplink: int) -> str:
    return f"{tor}:{uplink}--s{uplink}:{INDEX[tor]}"


def probe_path(src: str, port: int, dst: str) -> list[str] | None:
    """Up the uplink to its spine, down the same spine to dst (and back): a made-up planner."""
    return None if port == 0 else [cable(src, port), cable(dst, port)]


def result(
    kind: control_pb2.ProbeKind.ValueType,
    port: int,
    rtts: list[int],
    lost: int = 0,
    target: str = "",
) -> Result:
    hist: dict[int, int] = {}
    for rtt in rtts:
        hist[bucket_of(rtt)] = hist.get(bucket_of(rtt), 0) + 1
    return Result(
        kind=kind,
        port=port,
        target=target,
        sent=len(rtts) + lost,
        received=len(rtts),
        bucket_index=sorted(hist),
        bucket_count=[hist[i] for i in sorted(hist)],
    )


def normal(rng: random.Random, n: int = 5) -> list[int]:
    """A healthy RTT: 10-40 us, with the odd 80 us (noise, not an outlier)."""
    return [
        rng.choice([80 * US]) if rng.random() < 0.02 else rng.randint(10 * US, 40 * US)
        for _ in range(n)
    ]


def feed(
    w: LatencyWindows,
    seconds: range,
    rng: random.Random,
    *,
    slow_cable: str = "",
    slow_pair_uplink: tuple[str, int] | None = None,
    lossy: str = "",
) -> None:
    """Every ToR reports each second: link probes on both uplinks, mesh probes to every other
    ToR (merged: port 0), as agents do; a slow uplink is reported on its own."""
    for sec in seconds:
        for tor in TORS:
            probes = []
            for up in (1, 2):
                key = cable(tor, up)
                rtts = normal(rng)
                if key == slow_cable:
                    rtts = [r + 300 * US for r in rtts]
                probes.append(result(LINK, up, rtts, lost=3 if key == lossy else 0))
            for dst in TORS:
                if dst == tor:
                    continue
                slow_up = slow_pair_uplink is not None and (
                    cable(tor, slow_pair_uplink[1]) == slow_pair_uplink[0]
                    or cable(dst, slow_pair_uplink[1]) == slow_pair_uplink[0]
                )
                if slow_up:
                    assert slow_pair_uplink is not None
                    up = slow_pair_uplink[1]
                    probes.append(result(MESH, up, [r + 600 * US for r in normal(rng)], target=dst))
                    probes.append(result(MESH, 0, normal(rng), target=dst))
                else:
                    probes.append(result(MESH, 0, normal(rng, 10), target=dst))
            assert w.ingest(tor, results_of(probes), sec * S, FABRIC) == []


def ranked(w: LatencyWindows, now: int) -> list:  # type: ignore[type-arg]
    return outliers(
        w.params,
        w.window(now),
        w.baseline(now, TORS),
        fabric=FABRIC,
        ends=ENDS,
        probe_path=probe_path,
    )


def test_a_noisy_but_normal_fabric_has_no_outlier() -> None:
    w = LatencyWindows(PARAMS)
    feed(w, range(1000, 1200), random.Random(7))
    assert ranked(w, 1199 * S) == []


def test_a_cable_slowed_beyond_its_baseline_is_ranked_first_by_its_link_probes() -> None:
    w, rng = LatencyWindows(PARAMS), random.Random(8)
    feed(w, range(1000, 1100), rng)
    slow = cable("t2", 1)
    feed(w, range(1100, 1110), rng, slow_cable=slow)
    found = ranked(w, 1109 * S)
    assert [o.link for o in found] == [slow]
    top = found[0]
    assert top.reason is Reason.LINK_LATENCY
    assert top.a == ("t2", 1) and top.b == ("s1", 2)
    assert top.judged is not None and top.judged.window.p50_ns is not None
    assert top.judged.baseline_p99_ns is not None
    assert top.judged.window.p50_ns > top.judged.baseline_p99_ns + PARAMS.outlier_margin_ns


def test_the_link_common_to_the_bad_pairs_ranks_first_among_the_paths() -> None:
    """No link probe sees it (the cable is fine, the spine's forwarding is not): the mesh
    probes over it are slow, and it is the link their paths have in common."""
    w, rng = LatencyWindows(PARAMS), random.Random(9)
    feed(w, range(1000, 1100), rng)
    bad = cable("t1", 2)
    feed(w, range(1100, 1110), rng, slow_pair_uplink=(bad, 2))
    found = ranked(w, 1109 * S)
    assert found and found[0].link == bad
    assert found[0].reason is Reason.PATHS
    # t1 to and from every other ToR: 6 pairs; each other ToR's uplink 2 carries only its 2.
    assert found[0].bad_pairs == 6
    assert all(o.bad_pairs == 2 for o in found[1:])
    assert ("t1", "t2") in found[0].tor_pairs and (0, 1) in found[0].rail_pairs


def test_first_hops_are_blamed_when_the_path_cannot_be_predicted() -> None:
    w, rng = LatencyWindows(PARAMS), random.Random(10)
    feed(w, range(1000, 1100), rng)
    bad = cable("t1", 2)
    feed(w, range(1100, 1110), rng, slow_pair_uplink=(bad, 2))
    found = outliers(
        w.params,
        w.window(1109 * S),
        w.baseline(1109 * S, TORS),
        fabric=FABRIC,
        ends=ENDS,
        probe_path=lambda _s, _p, _d: None,
    )
    # Only t1's own probes leave over it; the other ToRs' first hops are their uplinks 2.
    assert found[0].link == bad and found[0].bad_pairs == 3
    assert {o.link for o in found} == {cable(t, 2) for t in TORS}


def test_loss_makes_an_outlier_without_a_baseline() -> None:
    w, rng = LatencyWindows(PARAMS), random.Random(11)
    lossy = cable("t0", 1)
    feed(w, range(1000, 1010), rng, lossy=lossy)
    found = ranked(w, 1009 * S)
    assert [o.link for o in found] == [lossy]
    assert found[0].reason is Reason.LINK_LOSS
    assert found[0].judged is not None and found[0].judged.baseline_samples == 0


@pytest.mark.parametrize("answered", [0, 1, 4])
def test_too_few_samples_is_never_an_outlier(answered: int) -> None:
    params = LatencyParams(min_samples=5, outlier_margin_ns=1)
    window = acc_of(50, answered, {150: answered} if answered else {})
    baseline = acc_of(100, 100, {10: 100})
    assert not judge(params, window, baseline).outlier  # slow and 90+% lost
    # ...and a baseline of too few samples cannot make a latency outlier either.
    window = acc_of(5, 5, {150: 5})
    assert not judge(params, window, acc_of(4, 4, {10: 4})).outlier
    baseline = acc_of(5, 5, {10: 5})
    assert judge(params, window, baseline).outlier


def test_rail_pairs_sum_every_tor_pair_of_their_rails() -> None:
    w, rng = LatencyWindows(PARAMS), random.Random(12)
    feed(w, range(1000, 1001), rng)
    rails = rail_sums(w.window(1000 * S).mesh, TORS)
    assert {k: a[SENT] for k, a in rails.items()} == {
        (0, 0): 20,
        (0, 1): 40,
        (1, 0): 40,
        (1, 1): 20,
    }


def test_what_does_not_fit_the_plan_is_left_out_and_said() -> None:
    w = LatencyWindows(PARAMS)
    problems = w.ingest(
        "t0",
        results_of(
            [
                result(LINK, 7, [10 * US]),
                result(MESH, 0, [10 * US], target="s1"),
                Result(kind=LINK, port=1, sent=1, received=2),
                Result(kind=LINK, port=1, sent=1, received=1, bucket_index=[999], bucket_count=[1]),
                result(LINK, 1, [10 * US]),
            ]
        ),
        5 * S,
        FABRIC,
    )
    assert problems == [
        "link probes on port 7, which has no planned cable",
        "mesh probes from t0 to 's1': not two ToRs",
        "probe result on port 1: received 2 > sent 1",
        "probe result on port 1: bucket index 999: must be in [0, 192)",
    ]
    assert list(w.window(5 * S).links) == [cable("t0", 1)]


def test_columns_that_disagree_leave_out_the_whole_report() -> None:
    w = LatencyWindows(PARAMS)
    bad = results_of([result(LINK, 1, [10 * US]), result(LINK, 2, [10 * US])])
    del bad.sent[1]
    assert w.ingest("t0", bad, 5 * S, FABRIC) == ["ProbeResults.sent has 1 entries and kind 2"]
    assert not w.window(5 * S).links
    bad = results_of([result(LINK, 1, [10 * US, 40 * US])])
    bad.buckets[0] = 1  # the histogram has 2 entries
    assert w.ingest("t0", bad, 6 * S, FABRIC) == [
        "ProbeResults.buckets adds up to 1, but bucket_index has 2 entries"
    ]
    assert not w.window(6 * S).links


def test_a_bucket_listed_twice_counts_twice() -> None:
    """A result's buckets are summed, whether the cable is new in the slot or not."""
    w = LatencyWindows(PARAMS)
    twice = Result(
        kind=LINK, port=1, sent=3, received=3, bucket_index=[40, 40], bucket_count=[1, 2]
    )
    for n in (1, 2):
        assert w.ingest("t0", results_of([twice]), 5 * S, FABRIC) == []
        acc = w.window(5 * S).links[cable("t0", 1)]
        assert (acc[40], acc[SENT]) == (3 * n, 3 * n)


def test_the_core_takes_probes_from_counters_and_ranks_the_slowed_cable() -> None:
    """Both ends' link probes of a lab cable through DecisionCore.counters."""
    h = Harness()
    h.connect_all()
    link = next(iter(h.core.links()))
    (a, pa), (b, pb) = link.a, link.b

    def report(rtt: int) -> None:
        for name, port in ((a, pa), (b, pb)):
            msg = control_pb2.Counters(
                wall_ns=h.now.wall_ns, probe_results=results_of([result(LINK, port, [rtt] * 5)])
            )
            h.run(h.core.counters(name, msg, h.now))

    for _ in range(60):
        report(20 * US)
        h.advance(5 * S)
    assert h.core.latency_outliers(h.now) == []
    report(5_000 * US)
    h.advance(5 * S)
    report(5_000 * US)
    h.advance(1 * S)
    found = h.core.latency_outliers(h.now)
    assert [o.link for o in found] == [link.key]
    assert found[0].judged is not None and found[0].judged.window.samples == 20
    # The baseline is the latest complete epoch of baseline_s before the window. A slowdown
    # that lasts would be its p99 once it holds 1% of it (3 s of 300), but the rule compares
    # medians: the cable stays an outlier until the slowdown is most of an epoch, then it is
    # the new normal: after at least half the baseline, at most two and the window.
    began = h.now.mono_ns - 6 * S
    lasted = 0
    while h.core.latency_outliers(h.now) and lasted < 1_000 * S:
        report(5_000 * US)
        h.advance(5 * S)
        lasted = h.now.mono_ns - began
    assert 150 * S <= lasted <= 610 * S, lasted / S
    bad = control_pb2.Counters(
        probe_results=results_of([result(LINK, 999, [rtt]) for rtt in (1, 2, 3, 4)])
    )
    h.run(h.core.counters(a, bad, h.now))
    assert h.warnings[-1].startswith(f"counters from {a}: ignored link probes on port 999")
    assert h.warnings[-1].endswith("(and 1 more)")


@pytest.mark.parametrize("seed", range(20))
def test_stats_read_the_percentiles_as_railfabric_latency_does(seed: int) -> None:
    rng = random.Random(seed)
    hist = {rng.randrange(192): rng.randint(1, 50) for _ in range(rng.randint(0, 8))}
    stats = Stats.of(acc_of(sum(hist.values()) + 3, sum(hist.values()), hist))
    assert (stats.p50_ns, stats.p99_ns) == (percentile_ns(hist, 0.5), percentile_ns(hist, 0.99))
    assert stats.samples == sum(hist.values()) and stats.sent == stats.samples + 3


@settings(max_examples=400, deadline=None)
@given(
    window=st.dictionaries(st.integers(0, 191), st.integers(1, 30), max_size=6),
    lost=st.integers(0, 4),
    baseline=st.dictionaries(st.integers(0, 191), st.integers(1, 30), max_size=6),
    margin_us=st.sampled_from([0, 1, 50, 1_000]),
)
def test_the_quick_test_never_passes_over_an_outlier(
    window: dict[int, int], lost: int, baseline: dict[int, int], margin_us: int
) -> None:
    """could_be_outlier (one max, no sort) lets through every window judge finds an outlier:
    the answers skip the full reading of the rest."""
    params = LatencyParams(outlier_margin_ns=margin_us * US, min_samples=3)
    answered = sum(window.values())
    w = acc_of(answered + lost, answered, window)
    b = Stats.of(acc_of(sum(baseline.values()), sum(baseline.values()), baseline))
    for base in (b, None):
        if judge(params, w, base).outlier:
            assert could_be_outlier(params, w, base)
