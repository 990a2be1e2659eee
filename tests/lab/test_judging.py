"""How scenarios judge what they measured, on synthetic records (no lab): every loss figure
comes with its sample, and a figure from an empty or broken sample is a failure, never a
pass. Mostly the failover scenario: its windows, its delivery floor outside the cuts. And a
scenario the target cannot run is a SKIP: shown as such, never counted as a pass."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from mininet_labs.report import (
    Result,
    Table,
    Verdict,
    exit_status,
    render,
    summary,
    write_json,
)
from mininet_labs.scenarios.common import Budget, Sample, sample_problem
from mininet_labs.scenarios.failover import (
    CUT_LEAD_NS,
    MIN_DELIVERY,
    Convergence,
    Cut,
    Figures,
    measure,
    windows,
)
from mininet_labs.scenarios.failover import judge as judge_failover
from mininet_labs.traffic import Packet

pytestmark = pytest.mark.unit

MS = 1_000_000
INTERVAL = MS  # a 1,000 pps probe
BUDGET = Budget(failover_reps=2, probe_pps=1000)


def packets(seqs: list[int] | range, interval_ns: int = INTERVAL) -> list[Packet]:
    """Datagram `s` sent at s intervals, received 50 us later."""
    return [Packet(0, s, s * interval_ns, s * interval_ns + 50_000, 0) for s in seqs]


# --- samples ----------------------------------------------------------------------------------


def test_a_sample_is_sent_and_received_and_prints_as_both() -> None:
    s = Sample(58_000, 57_988)
    assert (s.lost, s.delivered, str(s)) == (12, 57_988 / 58_000, "57,988/58,000")
    assert Sample(3, 1) + Sample(2, 2) == Sample(5, 3)
    assert Sample(5, 3) - Sample(2, 2) == Sample(3, 1)


def test_empty_and_broken_samples_are_problems_never_a_pass() -> None:
    assert math.isnan(Sample(0, 0).delivered)
    assert math.isnan(Sample(3, 5).delivered)
    assert sample_problem("probe", Sample(0, 0)) == "probe: empty sample (no datagram)"
    assert sample_problem("probe", Sample(0, 0), 0.0) is not None
    broken = sample_problem("probe", Sample(3, 5), 0.5)
    assert broken is not None and "broken sample (5/3" in broken
    assert sample_problem("probe", Sample(-1, 0)) is not None
    assert sample_problem("probe", Sample(100, 0)) is None  # no floor asked: a real figure


def test_delivery_floor_names_the_sample() -> None:
    assert sample_problem("probe", Sample(58_000, 12), 0.95, "outside the cut windows") == (
        "probe delivered 12/58,000 datagrams outside the cut windows (0.0%); need >= 95%"
    )
    assert sample_problem("probe", Sample(100, 95), 0.95) is None
    assert sample_problem("probe", Sample(100, 94), 0.95) is not None


# --- failover windows -------------------------------------------------------------------------


def test_loss_window_is_the_lost_send_time_with_its_sample() -> None:
    # 1 ms probe; datagrams 10..29 lost (20 ms), later 50..51 lost (2 ms).
    got = packets([*range(10), *range(30, 50), *range(52, 60)])
    (first, second), probe = windows(got, 60, [(0, 40 * MS), (40 * MS, 60 * MS)], INTERVAL)
    assert (first.loss_ms, first.sample) == (20.0, Sample(40, 20))
    assert (second.loss_ms, second.sample) == (2.0, Sample(20, 18))
    assert (probe.total, probe.outside, probe.broken) == (Sample(60, 38), Sample(0, 0), None)
    # One window over everything: the same loss, counted once.
    (whole,), _ = windows(got, 60, [(0, 60 * MS)], INTERVAL)
    assert (whole.loss_ms, whole.sample) == (22.0, Sample(60, 38))
    (clean,), _ = windows(packets(range(100)), 100, [(0, 10**9)], INTERVAL)
    assert (clean.loss_ms, clean.sample) == (0.0, Sample(100, 100))


def test_a_gap_counts_in_the_window_where_it_started_only() -> None:
    got = packets([*range(38), *range(45, 60)])  # 38..44 lost, across the boundary at 40 ms
    (first, second), probe = windows(got, 60, [(0, 40 * MS), (40 * MS, 60 * MS)], INTERVAL)
    assert (first.loss_ms, first.lost) == (7.0, 7)
    assert (second.loss_ms, second.lost) == (0.0, 0)
    assert first.sample.sent + second.sample.sent + probe.outside.sent == 60


def test_an_outage_ending_in_a_claiming_window_is_that_windows() -> None:
    """A cut's window claims the outage that ends in it, even one that began in the
    restore window before (datagrams queued behind the cable on a loaded machine); an
    outage that stays inside the restore window is the restore's."""
    spans = [(0, 20 * MS), (20 * MS, 40 * MS), (40 * MS, 60 * MS)]
    got = packets([*range(25), *range(28, 35), *range(45, 60)])  # 25..27 and 35..44 lost
    (cut, restore, next_cut), _ = windows(got, 60, spans, INTERVAL, frozenset({0, 2}))
    assert (restore.lost, restore.loss_ms) == (3, 3.0)
    assert (next_cut.lost, next_cut.loss_ms) == (10, 10.0)
    assert cut.lost == 0
    # Each sample is what was received in the window and the outages it holds.
    assert restore.sample == Sample(15, 12) and next_cut.sample == Sample(25, 15)
    # Without a claiming window the outage counts where it started, as before.
    (_, restore, next_cut), _ = windows(got, 60, spans, INTERVAL)
    assert (restore.lost, next_cut.lost) == (13, 0)


def test_loss_before_the_first_and_after_the_last_datagram_is_counted() -> None:
    got = packets(range(5, 50))  # 0..4 and 50..59 never arrived
    (head, tail), probe = windows(got, 60, [(0, 30 * MS), (30 * MS, 60 * MS)], INTERVAL)
    assert (head.loss_ms, head.sample) == (5.0, Sample(30, 25))
    assert (tail.loss_ms, tail.sample) == (10.0, Sample(30, 20))
    assert probe.total == Sample(60, 45)


def test_nothing_received_leaves_every_window_empty() -> None:
    result, probe = windows([], 58_000, [(0, 10 * MS), (10 * MS, 20 * MS)], INTERVAL)
    assert all(w.sample == Sample(0, 0) and math.isnan(w.loss_ms) for w in result)
    assert probe.outside == probe.total == Sample(58_000, 0)


def test_broken_records_give_no_figures() -> None:
    spans = [(0, 100 * MS)]
    beyond = windows(packets(range(10)), 5, spans, INTERVAL)
    late_stamp = packets(range(10))
    late_stamp[3] = Packet(0, 3, 9 * INTERVAL, 9 * INTERVAL, 0)
    for (result,), probe in (beyond, windows(late_stamp, 10, spans, INTERVAL)):
        assert probe.broken is not None
        assert math.isnan(result.loss_ms) and result.sample.empty
    assert beyond[1].broken == "datagram #9 received, but the sender reports 5 sent"


def test_duplicates_count_once_and_a_datagram_sent_as_the_sender_stopped_is_not_broken() -> None:
    got = packets(range(10))
    (w,), probe = windows(got + got[:3], 9, [(0, 100 * MS)], INTERVAL)
    assert probe.broken is None and probe.duplicates == 3
    assert w.sample == Sample(10, 10)


# --- failover verdict -------------------------------------------------------------------------


def cuts_of(reps: int) -> list[Cut]:
    """`reps` x (local, remote) cuts: cut at T, restored at T + 1 s, settled at T + 2 s,
    the next 100 ms later; the first at 500 ms. Each converged in 30 ms."""
    out = []
    t = 500 * MS
    for i in range(2 * reps):
        kind = ("local", "remote")[i % 2]
        down = Convergence(t + 40 * MS, 30.0, 1.0, 2.0, 3.0, 4.0, 2, 10)
        out.append(Cut(kind, f"link-{kind}", "tor", 3, t, t, t + 1000 * MS, t + 2000 * MS, down))
        t += 2100 * MS
    return out


def probe_run(
    reps: int = 2, lost_after_cut: int = 20, keep: Callable[[int], bool] = lambda s: True
) -> tuple[list[Cut], list[Packet], int]:
    """A 1,000 pps probe across the cuts, losing `lost_after_cut` datagrams at each cut and
    whatever `keep` rejects; runs until 100 ms after the last cut settled."""
    cuts = cuts_of(reps)
    sent = (cuts[-1].end_mono_ns + 100 * MS) // INTERVAL
    at_cut = {c.cut_mono_ns // INTERVAL + k for c in cuts for k in range(lost_after_cut)}
    return cuts, packets([s for s in range(sent) if s not in at_cut and keep(s)]), sent


def judged(cuts: list[Cut], got: list[Packet], sent: int) -> tuple[bool, str, dict[str, object]]:
    r = judge_failover(cuts, measure(cuts, got, sent, INTERVAL), BUDGET)
    return r.passed, r.reason, dict(r.metrics)


def test_a_healthy_probe_passes_with_its_samples_reported() -> None:
    cuts, got, sent = probe_run()
    passed, reason, m = judged(cuts, got, sent)
    assert passed, reason
    assert (m["probe_sent"], m["probe_received"]) == (sent, len(got))
    assert m["local_loss_ms_p99"] == m["remote_loss_ms_p99"] == 20.0
    # Each cut window runs from CUT_LEAD_NS before the cut to the restore: 1,050 datagrams.
    window = (1000 * MS + CUT_LEAD_NS) // INTERVAL
    assert (m["local_loss_sent"], m["local_loss_received"]) == (2 * window, 2 * (window - 20))
    assert (m["remote_loss_sent"], m["remote_loss_received"]) == (2 * window, 2 * (window - 20))
    assert m["restore_loss_sent"] == m["restore_loss_received"] == 4 * 1000
    assert m["outside_cuts_sent"] == sent - 4 * window
    assert m["outside_cuts_delivered_pct"] == 100.0
    assert (m["cuts"], m["cuts_converged"], m["windows_with_empty_sample"]) == (4, 4, 0)
    assert f"{2 * (window - 20):,}/{2 * window:,}" in reason
    r = judge_failover(cuts, measure(cuts, got, sent, INTERVAL), BUDGET)
    (table,) = r.tables
    # The per-cut figures a benchmark pools are the ones the verdict summarised.
    figures = Figures.of(cuts)
    assert figures.local_loss == figures.remote_loss == (20.0, 20.0)
    assert figures.restore_loss == (0.0,) * 4
    assert figures.convergence == (30.0,) * 4
    assert figures.detection == (10.0,) * 4  # converged 40 ms after the cut, 30 ms long
    assert figures.local_repair == ()  # no LOCAL_REPAIR event in these cuts
    assert table.header[3:6] == ("loss ms", "sent", "received")
    assert table.rows[0][3:6] == ("20.0", f"{window:,}", f"{window - 20:,}")


def test_a_target_that_forwarded_nothing_fails() -> None:
    cuts, _, sent = probe_run()
    passed, reason, m = judged(cuts, [], sent)
    assert not passed
    assert f"probe delivered 0/{sent:,} datagrams outside the cut windows (0.0%)" in reason
    assert "empty sample (no probe datagram) in the window of cuts 1, 2, 3, 4" in reason
    assert "empty sample (no probe datagram) in the restore window of cuts 1, 2, 3, 4" in reason
    assert m["probe_received"] == 0 and m["local_loss_sent"] == 0
    assert m["windows_with_empty_sample"] == 8
    assert m["local_loss_ms_p99"] != m["local_loss_ms_p99"]  # NaN: no figure, no pass


def test_a_probe_that_died_early_fails_naming_its_delivery() -> None:
    cuts, _, _ = probe_run()
    passed, reason, _ = judged(cuts, packets(range(12)), 58_000)
    assert not passed
    assert "probe delivered 12/58,000 datagrams outside the cut windows (0.0%); need >= 95%" in (
        reason
    )


def test_a_lossy_probe_fails_even_with_short_loss_windows() -> None:
    # Every tenth datagram lost outside the cut windows: the loss at the cuts alone passes,
    # but only ~90 % of the probe arrives.
    spans = [(c.cut_mono_ns - CUT_LEAD_NS, c.restore_mono_ns) for c in cuts_of(2)]

    def keep(seq: int) -> bool:
        return seq % 10 != 0 or any(a <= seq * INTERVAL < b for a, b in spans)

    cuts, got, sent = probe_run(keep=keep)
    passed, reason, m = judged(cuts, got, sent)
    assert not passed
    assert 20.0 <= float(str(m["local_loss_ms_p99"])) <= 25.0
    assert 20.0 <= float(str(m["remote_loss_ms_p99"])) <= 25.0
    assert 89.0 < float(str(m["outside_cuts_delivered_pct"])) < 91.0
    assert "datagrams outside the cut windows (90.1%); need >= 95%" in reason
    assert "loss p99" not in reason.partition("; ")[2]  # the windows are not the problem


def test_an_empty_cut_window_fails_that_cut() -> None:
    cuts, got, _ = probe_run()
    stopped = cuts[-1].cut_mono_ns - CUT_LEAD_NS  # the probe ended before the last cut
    early = [p for p in got if p.sent_ns < stopped]
    passed, reason, _ = judged(cuts, early, stopped // INTERVAL)
    assert not passed
    assert "empty sample (no probe datagram) in the window of cut 4;" in reason
    assert reason.endswith("empty sample (no probe datagram) in the restore window of cut 4")


def test_loss_over_target_missing_convergence_and_broken_records_fail() -> None:
    cuts, got, sent = probe_run(lost_after_cut=60)
    passed, reason, _ = judged(cuts, got, sent)
    assert not passed and "local loss p99 60.0 ms > 50 ms" in reason
    cuts, got, sent = probe_run()
    cuts[1].down = None
    passed, reason, _ = judged(cuts, got, sent)
    assert not passed and "1 cuts without a convergence event" in reason
    cuts, got, sent = probe_run()
    passed, reason, _ = judged(cuts, got, sent // 2)
    assert not passed and "the probe's records are broken" in reason


def test_no_cut_is_no_pass() -> None:
    passed, reason, _ = judged([], packets(range(1000)), 1000)
    assert not passed and "no cut was made" in reason


def test_delivery_floor_is_the_documented_one() -> None:
    assert MIN_DELIVERY == 0.95


# --- skips ------------------------------------------------------------------------------------


def test_a_skip_is_neither_a_pass_nor_a_failure_and_shows_everywhere(tmp_path: Path) -> None:
    skip = Result.skip("pfc", "not supported by this target (bmv2: no PFC)")
    passed, failed = Result("ecmp", True, "all on the prediction"), Result("ecn", False, "none")
    assert (skip.verdict, skip.passed, skip.failed) == (Verdict.SKIP, False, False)
    assert (passed.verdict, failed.verdict) == (Verdict.PASS, Verdict.FAIL)
    assert render(skip).startswith("== pfc: SKIP — not supported by this target (bmv2: no PFC)")
    table = summary([passed, skip, failed])
    assert "pfc       SKIP    not supported by this target" in table
    assert table.endswith("1 passed, 1 failed, 1 skipped")
    out = tmp_path / "lab.json"
    write_json(out, "lab-2rail.yaml", "bmv2", [passed, skip], "bmv2, 8 priority queues")
    data = json.loads(out.read_text())
    assert data["target_detail"] == "bmv2, 8 priority queues"
    assert data["counts"] == {"pass": 1, "fail": 0, "skip": 1}
    assert data["scenarios"][1] == {
        "name": "pfc",
        "result": "skip",
        "passed": False,
        "reason": "not supported by this target (bmv2: no PFC)",
        "metrics": {},
        "tables": [],
        "reproduce": "python -m mininet_labs run lab-2rail.yaml --target bmv2 --scenario pfc",
    }


def test_the_json_keeps_every_row_and_how_to_reproduce(tmp_path: Path) -> None:
    rows = (("1", "local", "tor-r1-b1:3--spine-p1-1:1", "12.5"), ("2", "remote", "x", "60.1"))
    result = Result("failover", True, "ok", {}, (Table(("#", "cut", "link", "loss ms"), rows),))
    out = tmp_path / "lab.json"
    command = ["python", "-m", "mininet_labs", "run", "f.yaml", "--scenario", "all"]
    write_json(out, "f.yaml", "softswitch", [result], command=command)
    data = json.loads(out.read_text())
    assert data["command"] == "python -m mininet_labs run f.yaml --scenario all"
    (table,) = data["scenarios"][0]["tables"]
    assert table == {"header": ["#", "cut", "link", "loss ms"], "rows": [list(r) for r in rows]}


def test_only_a_failure_fails_a_run() -> None:
    skip = Result.skip("pfc", "not supported by this target")
    assert exit_status([Result("ecmp", True, "ok"), skip]) == 0
    assert exit_status([skip, Result("ecn", False, "no marks")]) == 1
    assert exit_status([]) == 0


def test_a_skip_cannot_pass() -> None:
    with pytest.raises(ValueError, match="scenario pfc: a skipped scenario cannot have passed"):
        Result("pfc", True, "?", skipped=True)
