"""The bench's statistics and its synthetic states (the figures themselves are printed by
`python -m bench.agent`, never asserted)."""

from __future__ import annotations

import pytest

from agent.translate import translate
from bench.agent import spine_state, tor_state
from bench.output import percentile

pytestmark = pytest.mark.unit


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0
    assert percentile([5.0], 50) == 5.0
    with pytest.raises(ValueError, match="empty sample"):
        percentile([], 50)  # no figure from no sample


def test_bench_states_translate_cleanly() -> None:
    tor, problems = translate(tor_state(4, 1))
    assert problems == []
    assert sum(1 for k in tor.entries if k[0] == "group") == 8  # every uplink set with port 1
    spine, problems = translate(spine_state(16, 100))
    assert problems == []
    assert sum(1 for k in spine.entries if k[0] == "route") == 100
