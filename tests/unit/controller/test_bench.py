"""The benchmark runs and reports every figure the issue asks for (values, not speeds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import controller as controller_bench

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
