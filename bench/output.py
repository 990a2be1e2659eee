"""How a benchmark prints its figures: JSON for machines, or one aligned line per figure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence


def print_figures(figures: Mapping[str, object], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:28} {value}")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100 (p99 of 10 samples is the largest). An empty
    sample has none: ValueError, never a made-up 0."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    rank = max(1, math.ceil(len(ordered) * q / 100))
    return ordered[rank - 1]
