"""`python -m bench.swarm` end to end on the lab fabric (6 switches, 8 cables): the real
controller, two swarm processes, mutual TLS. The figures must all be there, each with a sample
that makes sense; how fast anything is is not asserted (bench/swarm/__init__.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.swarm.railctl import COMMANDS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LAB = "examples/lab-2rail.yaml"
# Start, storm and four cuts take ~10 s on an idle machine; a loaded one is slower.
RUN_TIMEOUT_S = 300


def _swarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.swarm", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _sane(figure: dict[str, Any], n: int) -> None:
    assert figure["n"] == n
    assert 0 <= figure["p50"] <= figure["p99"] <= figure["max"]


def test_every_figure_is_reported_with_its_sample(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = _swarm(
        LAB,
        "--processes",
        "2",
        "--cuts",
        "4",
        "--railctl-runs",
        "2",
        "--json",
        "--logs",
        str(logs),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    assert report["fabric"]["agents"] == 6
    assert report["fabric"]["agent_links"] == 8
    assert report["setup"]["certificates"]["count"] == 6
    assert report["start"]["to_serving_s"]["value"] > 0
    ready = report["desired_state_ready"]
    assert ready["from_start_s"]["n"] == ready["from_storm_s"]["n"] == 6
    assert ready["from_start_s"]["value"] > ready["from_storm_s"]["value"] >= 0

    # Every agent got state, and the controller agrees.
    storm = report["storm"]
    _sane(storm["per_agent_hold_s"], 6)
    # The same instant, rounded to 2 and 3 digits.
    assert storm["all_hold_state_s"]["value"] == pytest.approx(
        storm["per_agent_hold_s"]["max"], abs=0.01
    )
    assert storm["quiet_s"]["value"] >= storm["all_hold_state_s"]["value"] - 0.01
    assert storm["links_up"] == 8
    assert storm["messages"]["count"]["desired_state"] >= 6
    assert storm["controller_view"] == {"agents": 6, "connected": 6, "converged": 6}
    assert storm["resets"]["count"] == sum(storm["resets"]["by_code"].values())

    controller = report["controller"]
    assert all(mib > 0 for mib in controller["rss_mib"].values())
    assert set(controller["cpu_s"]) == {"startup", "storm", "cuts", "railctl"}
    admin = report["admin"]
    assert admin["latency_ms"]["n"] >= 1
    # The slowest calls, slowest first, the first of them the distribution's max.
    slowest = admin["slowest"]
    assert 1 <= len(slowest) <= 5
    assert [c["ms"] for c in slowest] == sorted((c["ms"] for c in slowest), reverse=True)
    assert slowest[0]["ms"] == pytest.approx(admin["latency_ms"]["max"], abs=0.1)
    assert all(c["at_s"] >= 0 for c in slowest)

    # Four cuts, each measured from both ends' PortStatus to the last Applied it caused.
    cuts = report["cuts"]
    assert cuts["count"] == 4
    for name in ("to_last_delta_ms", "to_last_applied_ms", "switches", "bytes"):
        _sane(cuts[name], 4)
        _sane(cuts["restore"][name], 4)
    assert set(cuts["by_kind"]) == {"tor_spine_local", "tor_spine_remote"}
    assert sum(kind["count"] for kind in cuts["by_kind"].values()) == 4
    for cut in cuts["list"]:
        assert cut["switches"] >= 2  # at least the cable's two ends
        assert cut["messages"].get("state_delta", 0) >= 1
        assert cut["bytes"] > 0
        assert cut["to_last_applied_ms"] >= cut["to_last_delta_ms"] >= 0
        # The restore waited for the hold-down before routes came back.
        assert cut["restore"]["to_last_delta_ms"] >= report["setup"]["hold_down_s"] * 1000
    # The missing kind is said, not silently skipped.
    assert any("spine_core" in note for note in report["notes"])

    # railctl as an operator runs it, every read command and expand, each run twice.
    ops = report["railctl"]
    assert ops["runs"] == 2
    assert set(ops) == {"runs", *COMMANDS, "expand"}
    for command in (*COMMANDS, "expand"):
        _sane(ops[command]["seconds"], 2)
        assert ops[command]["bytes"] > 0
    # One line per switch and a header at least: the answer, not an error.
    assert ops["switches"]["lines"] > 6
    assert ops["links"]["lines"] > 8
    assert ops["--json links"]["bytes"] > ops["links"]["bytes"]  # every field of every link
    assert ops["diagnose"]["exit_code"] in (0, 3)

    assert "serving fabric lab-2rail" in (logs / "controller.log").read_text()


def test_a_fabric_without_a_cable_to_cut_is_refused_naming_why() -> None:
    # The first four switches of the lab are its ToRs: no cable joins two of them.
    done = _swarm(LAB, "--agents", "4")
    assert done.returncode == 2
    assert "no cable of lab-2rail has an agent at both ends" in done.stderr
    assert done.stdout == ""


def test_agents_report_as_real_ones_and_the_controller_holds_it() -> None:
    """With --reports-s every agent sends its LLDP neighbours and Counters as a real agent
    does; the connected figures wait until each sent Counters twice, and the controller shows
    two reports of every port and every planned switch peer heard, with nothing to warn of."""
    done = _swarm(LAB, "--cuts", "0", "--railctl-runs", "0", "--reports-s", "0.3", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["setup"]["reports_s"] == 0.3
    reports = report["storm"]["reports"]
    assert reports["agents_reported_twice"] == reports["switches_checked"] == 6
    assert reports["with_two_counters"] == reports["heard"] == 6
    assert reports["counters_sent"] >= 12
    assert report["controller_log"]["by_level"].get("ERROR", 0) == 0
    warnings = [e["line"] for e in report["controller_log"]["most_frequent"]]
    assert not [w for w in warnings if "counters" in w or "alarm" in w], warnings
