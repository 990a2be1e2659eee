"""bench.telemetry's verdict: figures pooled over runs, each side's every cut in one sample."""

from __future__ import annotations

import dataclasses
import random

import pytest

from bench.telemetry import COMPARED, STATISTICS, Run, compare
from mininet_labs.scenarios.failover import Figures

pytestmark = pytest.mark.unit


def figures(scale: float = 1.0, seed: int = 0, n: int = 50) -> Figures:
    rng = random.Random(seed)

    def sample(low: float, high: float) -> tuple[float, ...]:
        return tuple(scale * rng.uniform(low, high) for _ in range(n))

    return Figures(
        local_loss=sample(0, 10),
        remote_loss=sample(20, 45),
        restore_loss=(0.0,) * n,
        convergence=sample(25, 55),
        detection=sample(3, 12),
        local_repair=sample(8, 30),
    )


def runs(on_scale: float) -> list[Run]:
    return [
        Run("off", figures(seed=1), {}),
        Run("on", figures(on_scale, seed=2), {}),
        Run("off", figures(seed=3), {}),
        Run("on", figures(on_scale, seed=4), {}),
    ]


def test_the_same_load_with_telemetry_on_passes_with_every_cut_counted() -> None:
    pooled, problems = compare(runs(1.0))
    assert problems == []
    for key in COMPARED:
        assert pooled[f"{key}.cuts"] == {"off": 100, "on": 100}
        for name in STATISTICS:
            row = pooled[f"{key}.{name}"]
            assert isinstance(row, dict)
            lo, hi = row["ci90"]
            assert lo <= row["delta"] <= hi, (key, name, row)
            assert "off_noise" in row  # the first run off against the last


def test_a_fifth_slower_with_telemetry_on_is_named_per_figure_and_statistic() -> None:
    pooled, problems = compare(runs(1.2))
    for key in ("local_loss", "remote_loss", "convergence", "detection"):
        assert any(p.startswith(f"{key} mean:") for p in problems), (key, problems)
        row = pooled[f"{key}.mean"]
        assert isinstance(row, dict) and row["delta"] > row["allowed"]
    # 0 ms both ways: within the slack whatever the scale.
    assert not any(p.startswith("restore_loss") for p in problems)
    assert "over 100 / 100 cuts" in problems[0]


def test_a_figure_no_cut_measured_is_a_problem_not_a_pass() -> None:
    unmeasured = runs(1.0)
    for i in (1, 3):
        without = dataclasses.replace(unmeasured[i].figures, remote_loss=())
        unmeasured[i] = Run("on", without, {})
    pooled, problems = compare(unmeasured)
    assert problems == ["remote_loss: no cut measured it with telemetry on"]
    assert pooled["remote_loss.cuts"] == {"off": 100, "on": 0}


def test_the_interval_carries_the_spread_between_runs_not_only_between_cuts() -> None:
    """Two runs off at 10 and 30 ms, two on at 20 ms: the means agree, and the interval
    must say how little two runs a side tell (resampling cuts alone would give ~0 width)."""

    def level(ms: float, seed: int) -> Figures:
        rng = random.Random(seed)
        cuts = tuple(ms + rng.uniform(-0.5, 0.5) for _ in range(50))
        return Figures(cuts, cuts, (0.0,) * 50, cuts, cuts, cuts)

    pooled, problems = compare(
        [Run("off", level(10, 1), {}), Run("on", level(20, 2), {}), Run("off", level(30, 3), {}),
         Run("on", level(20, 4), {})]
    )  # fmt: skip
    row = pooled["remote_loss.mean"]
    assert isinstance(row, dict)
    assert abs(row["delta"]) < 0.5 and not any(p.startswith("remote_loss mean") for p in problems)
    lo, hi = row["ci90"]
    assert lo < -5 and hi > 5, row
    assert row["off_noise"] > 19  # the last run off against the first
