"""The latency heat map (control.proto ProbeResult → per cable, ToR pair and rail pair RTT
percentiles over a window, and the outliers): its parameters, from the intent's `latency`
section."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyParams:
    """controller/fabric.py LatencyIntent, in the units the core computes in."""

    probing: bool = True  # interval_ms > 0
    window_ns: int = 10_000_000_000
    baseline_ns: int = 300_000_000_000
    outlier_margin_ns: int = 1_000_000
    loss_outlier: float = 0.05
    min_samples: int = 5
