"""bench.telemetry's verdict: figures pooled over runs, each side's every cut in one sample;
and runs kept with --json pooled again with --from."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random
from pathlib import Path

import pytest

from bench.telemetry import (
    COMPARED,
    STATISTICS,
    Run,
    RunsFileError,
    compare,
    main,
    report,
    runs_of,
)
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


SUMMARY: dict[str, object] = {
    "passed": True,
    "probe_received": 29_000,
    "latency_probes_sent": 9_200,
    "latency_probes_answered": 7_800,
}


def saved(tmp_path: Path, name: str, sample: list[Run], **meta: object) -> Path:
    """`sample` as bench.telemetry --json prints it."""
    out = io.StringIO()
    figures = {"fabric": "lab-2rail.yaml", "reps": 50, "commit": "abc"} | meta
    with contextlib.redirect_stdout(out):
        report(figures, sample, [], as_json=True)
    path = tmp_path / name
    path.write_text(out.getvalue())
    return path


def with_summaries(sample: list[Run]) -> list[Run]:
    """Each run with the counts of a good run of its side (no probes sent with it off)."""
    off = SUMMARY | {"latency_probes_sent": 0, "latency_probes_answered": 0}
    return [Run(r.which, r.figures, off if r.which == "off" else SUMMARY) for r in sample]


def test_runs_kept_with_json_come_back_as_they_were(tmp_path: Path) -> None:
    sample = with_summaries(runs(1.0))
    meta, back = runs_of(saved(tmp_path, "a.json", sample))
    assert meta == {"fabric": "lab-2rail.yaml", "reps": 50, "commit": "abc"}
    assert back == sample


def test_from_pools_the_runs_of_several_outputs_as_one_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = saved(tmp_path, "a.json", with_summaries(runs(1.0)))
    second = saved(tmp_path, "b.json", with_summaries(runs(1.2)))
    assert main(["--from", str(first), str(second), "--json"]) == 1  # the second is slower
    out = json.loads(capsys.readouterr().out)
    assert out["remote_loss.cuts"] == {"off": 200, "on": 200}
    assert out["from"] == [
        {"file": str(first), "commit": "abc", "runs": 4},
        {"file": str(second), "commit": "abc", "runs": 4},
    ]
    assert [k for k in out if k.endswith(".passed")] == [
        f"{i}.{w}.passed" for i, w in enumerate(["off", "on"] * 4, 1)
    ]
    pooled, _ = compare(with_summaries(runs(1.0)) + with_summaries(runs(1.2)))
    assert out["remote_loss.p99"] == pooled["remote_loss.p99"]


@pytest.mark.parametrize("meta", [{"reps": 20}, {"fabric": "ref-mid.yaml"}])
def test_from_refuses_runs_of_another_fabric_or_reps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], meta: dict[str, object]
) -> None:
    first = saved(tmp_path, "a.json", with_summaries(runs(1.0)))
    other = saved(tmp_path, "b.json", with_summaries(runs(1.0)), **meta)
    with pytest.raises(SystemExit) as exited:
        main(["--from", str(first), str(other)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"--from: {other}: measured on" in err and "not one sample" in err


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("2.on.cuts", r"a.json: run 2 \(on\) has no per-cut figures"),
        ("3.off.probe_received", r"a.json: run 3 \(off\) does not say its sample: .*probe_rec"),
    ],
)
def test_from_refuses_an_output_without_each_runs_cuts_or_sample(
    tmp_path: Path, key: str, why: str
) -> None:
    path = saved(tmp_path, "a.json", with_summaries(runs(1.0)))
    data = json.loads(path.read_text())
    del data[key]
    path.write_text(json.dumps(data))
    with pytest.raises(RunsFileError, match=why):
        runs_of(path)


def test_a_pooled_run_that_had_no_sample_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = with_summaries(runs(1.0))
    sample[1] = Run("on", sample[1].figures, SUMMARY | {"latency_probes_answered": 0})
    path = saved(tmp_path, "a.json", sample)
    assert main(["--from", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["problems"] == [
        "run 2 (on): no latency probe was answered (no sample)"
    ]
