"""`python -m bench.ha` and `python -m bench.store` end to end on the lab fabric, with real etcd
clusters: every figure is there with its sample, and what is not a speed is checked (a takeover
pushes nothing, every commit is written and loads back). How fast is not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mininet_labs.etcd import etcd_path

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
]

REPO = Path(__file__).resolve().parents[3]
LAB = "examples/lab-2rail.yaml"


def _bench(*args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The JSON lines a bench printed, and its summary (the indented object at the end)."""
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    start = lines.index("{")
    return [json.loads(x) for x in lines[:start]], json.loads("\n".join(lines[start:]))


def test_bench_ha_measures_every_kill_and_no_takeover_pushes() -> None:
    kills, summary = _bench("bench.ha", "--fabric", LAB, "--kills", "2", "--settle-s", "0.5")
    assert [k["kill"] for k in kills] == [1, 2]
    assert summary["kills"] == 2 and summary["agents"] == 6
    for kill in kills:
        assert kill["sessions"] == 6
        assert 0 < kill["elected_s"] <= kill["all_reconnected_s"]
        assert kill["pushes_after"] == 0
    assert summary["pushes_after_takeover"] == 0
    assert summary["elected_p50_s"] <= summary["elected_p99_s"]
    assert isinstance(summary["goal_met"], bool)


def test_bench_store_writes_every_event_on_each_backend() -> None:
    printed, out = _bench("bench.store", "--fabric", LAB, "--events", "3")
    assert printed == []
    assert out["switches"] == 6 and out["tors"] == 4
    for backend in ("sqlite", "etcd_1", "etcd_3"):
        figures = out[backend]
        assert figures["events"] == 3 and figures["switches_per_event"] == 4
        assert figures["failed_commits"] == 0
        # The initial state, then per event its commit and at least one of acks.
        assert figures["commits"] >= 1 + 2 * 3
        assert 0 < figures["event_commit_ms_p50"] <= figures["all_acks_durable_ms_max"]
    for backend in ("etcd_1", "etcd_3"):
        assert out[backend]["loaded_switches"] == 6
        assert out[f"{backend}_vs_sqlite"] > 0
