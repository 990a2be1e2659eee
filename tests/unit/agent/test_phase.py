"""agent/phase.py: each switch's periodic telemetry runs on its own tick of the period."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.phase import offset, until_next

LAB = ["spine-p1-1", "spine-p1-2", "tor-r1-b1", "tor-r1-b2", "tor-r2-b1", "tor-r2-b2"]

keys = st.text(min_size=1, max_size=20)
periods = st.floats(min_value=0.01, max_value=3600.0)
nows = st.floats(min_value=0.0, max_value=2e9)


def slack(now: float, period: float) -> float:
    """The rounding of sums at the magnitude of `now` or `period`: a few units in the last
    place of the larger."""
    return 8 * math.ulp(max(now, period, 1.0))


@given(keys, periods, nows)
def test_the_wait_ends_on_the_keys_tick_within_one_period(
    key: str, period: float, now: float
) -> None:
    wait = until_next(key, period, now)
    assert 0 < wait <= period
    # Where the wait ends is the key's place in the period (float rounding aside).
    phase = (now + wait) % period
    gap = min(abs(phase - offset(key, period)), period - abs(phase - offset(key, period)))
    assert gap <= slack(now, period)


@given(keys, periods, nows)
def test_a_run_ending_before_its_next_tick_waits_for_that_tick(
    key: str, period: float, now: float
) -> None:
    # Every host agrees: the next tick after a run that took a fraction of the period is the
    # same whether the agent asks at the start or after the run.
    first = until_next(key, period, now)
    later = until_next(key, period, now + first / 2)
    assert later == pytest.approx(first / 2, abs=slack(now, period))


def test_the_labs_agents_read_their_counters_at_different_times() -> None:
    # All six started together: their counter reads (every 5 s) are far apart, not within
    # the 50 ms that made failover wait behind them all.
    ticks = sorted(offset(f"{name}/counters", 5.0) for name in LAB)
    gaps = [b - a for a, b in zip(ticks, [*ticks[1:], ticks[0] + 5.0], strict=True)]
    assert min(gaps) > 0.1


def test_a_period_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="period 0"):
        until_next("tor-r1-b1/counters", 0.0, 1.0)
