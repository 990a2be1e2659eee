"""The benchmark runs and reports every figure the issue asks for (values, not speeds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import controller as controller_bench
from bench import core as core_bench
from bench import ingest as ingest_bench
from bench import latency as latency_bench
from bench import matrix as matrix_bench
from bench import roce as roce_bench
from bench import web as web_bench
from controller.core.latency import Fabric, LatencyParams, LatencyWindows
from railfabric.latency import Result, results_of
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

LAB = str(Path(__file__).resolve().parents[3] / "examples/lab-2rail.yaml")


def test_bench_reports_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert controller_bench.main([LAB, "--json", "--samples", "10"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in (
        "gpus",
        "switches",
        "links",
        "route_entries",
        "groups",
        "full_compute_s",
        "peak_rss_mb",
        "incremental_ms_p50",
        "incremental_ms_p99",
        "delta_entries_p50",
    ):
        assert key in data, key
    assert (data["gpus"], data["switches"], data["links"]) == (8, 6, 8)
    # 4 ToRs x (3 other prefixes + 2 host routes) + 2 spines x 4 prefixes.
    assert data["route_entries"] == 4 * 5 + 2 * 4
    assert data["incremental_events"] == 20
    assert data["delta_entries_p50"] > 0


def test_core_bench_storms_cuts_and_restores_every_kind_of_cable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    mid = str(Path(LAB).parent / "ref-mid.yaml")
    assert core_bench.main([mid, "--json", "--cuts", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["storm_hellos"]["calls"] == data["switches"] == 224
    # The bench fails unless every link is usable after the storm; then each cut moves
    # traffic off the cable at once, from its first reporting end, and its second end
    # changes nothing more.
    for kind in ("cut_tor_spine", "cut_spine_core"):
        cut = data[kind]
        assert cut["first_end"]["calls"] == cut["second_end"]["calls"] == 2
        assert cut["first_end"]["switches_sent_to_max"] > 2
        assert cut["second_end"]["switches_sent_to_max"] == 0
        # Make before break: the restore's tick sends to the cable's two ends only.
        assert cut["restore_tick"]["switches_sent_to_max"] == 2
    assert data["applied"]["calls"] > data["switches"]
    assert data["restart_all_up_s"] >= 0
    # Resident memory now at each point, and the high-water mark, which is never below it.
    now = [data[f"rss_after_{kind}_cuts_mib"] for kind in ("tor_spine", "spine_core")]
    assert min(now) > 0 and max(now) <= data["peak_rss_mib"]


def test_core_bench_names_the_file_of_a_bad_fabric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("bad: [\n")
    assert core_bench.main([str(bad)]) == 1
    assert f"bench.core: {bad}:2:" in capsys.readouterr().err


def test_web_bench_requests_every_endpoint_the_page_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert web_bench.main([LAB, "--json", "--repeat", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["switches"], data["links"]) == (6, 8)
    endpoints = data["endpoints"]
    assert set(endpoints) == {
        "fabric", "view_first_page", "view_rail_pod", "view_last_page", "switch", "alarms"
    }  # fmt: skip
    for figures in endpoints.values():
        assert figures["requests"] == 2 and figures["bytes"] > 0
    assert endpoints["view_rail_pod"]["links"] == 4  # rail 1's links of the lab


def test_matrix_bench_feeds_every_tor_and_says_its_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert matrix_bench.main([LAB, "--json", "--periods", "2", "--active", "0.5"]) == 0
    data = json.loads(capsys.readouterr().out)
    # 4 ToRs, 2 of the 4 destination classes each, over the 2 periods that measured a rate.
    assert (data["tors"], data["cells_per_report"], data["periods"]) == (4, 2, 2)
    assert data["cells_reported"] == 8 and data["wire_bytes_per_period"] > 0
    assert 0 <= data["ingest_ms_p50"] <= data["ingest_ms_max"]


def test_roce_bench_feeds_every_switch_and_says_its_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [LAB, "--json", "--periods", "1", "--storm-tors", "2", "--samples", "8"]
    assert roce_bench.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    # lab-2rail: 6 switches, 2 ToRs storming with 8 samples each in the measured period.
    assert (data["switches"], data["storm_tors"], data["periods"]) == (6, 2, 1)
    assert data["nak_samples_per_period"] == 16 and data["roce_counts_per_period"] > 0
    assert 0 <= data["ingest_ms_p50"] <= data["ingest_ms_max"]


def test_latency_bench_feeds_every_switch_and_finds_the_slowed_cable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert latency_bench.main([LAB, "--json", "--periods", "64", "--slow", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    # lab-2rail: 8 link results (8 cables, from the end that probes each) and 4 ToRs x 40 mesh
    # targets a period, and the slowed ToR's 40 per-uplink results in the last one.
    assert (data["switches"], data["cables"], data["tors"]) == (6, 8, 4)
    assert data["results_per_period"] == 8 + 4 * 40 + 40
    assert data["rail_pairs"] == 4 and data["tor_pairs_in_window"] == 12
    assert data["slowed_cables"] == 1 and data["slowed_cables_ranked_first"] is True
    assert 0 <= data["ingest_ms_per_report_p50"] <= data["ingest_ms_per_report_max"]


def test_ingest_bench_sends_every_part_of_every_report_through_the_core(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert ingest_bench.main([LAB, "--json", "--periods", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    # lab-2rail: 6 switches; 3 RoCE counts a port; 4 ToRs x 4 matrix classes; one link result
    # a cable (8) and 4 ToRs x 40 mesh targets.
    assert (data["switches"], data["parts"]) == (6, "ports,roce,matrix,probes")
    assert data["ports_per_period"] > 0
    assert data["roce_counts_per_period"] == 3 * data["ports_per_period"]
    assert data["matrix_cells_per_period"] == 4 * 4
    assert data["probe_results_per_period"] == 8 + 4 * 40
    assert 0 < data["ingest_s_per_period_p50"] <= data["ingest_s_per_period_max"]
    assert ingest_bench.main([LAB, "--json", "--periods", "1", "--parts", "probes"]) == 0
    only = json.loads(capsys.readouterr().out)
    assert (only["ports_per_period"], only["matrix_cells_per_period"]) == (0, 0)
    with pytest.raises(SystemExit):
        ingest_bench.main([LAB, "--parts", "roce"])  # carried by ports


def test_bench_latency_stops_at_a_report_the_windows_refuse() -> None:
    """A figure from results the windows did not keep would be no figure."""
    windows = LatencyWindows(LatencyParams())
    fabric = Fabric.of([("a:1--b:1", ("a", 1), ("b", 1))], {})
    msg = control_pb2.Counters(
        probe_results=results_of([Result(control_pb2.PROBE_KIND_LINK, 1, sent=1)])
    )
    latency_bench._ingest(windows, "a", msg, 1, fabric)  # kept
    del msg.probe_results.sent[0]  # columns of different lengths
    with pytest.raises(SystemExit, match=r"a's report was refused: .*ProbeResults\.sent"):
        latency_bench._ingest(windows, "a", msg, 2, fabric)
