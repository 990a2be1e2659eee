"""Scenario results: a readable table per scenario and the JSON the labs write."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Metric = float | int | str


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def render(self) -> str:
        widths = [
            max(len(cell) for cell in col) for col in zip(self.header, *self.rows, strict=True)
        ]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.header, widths, strict=True))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in self.rows]
        return "\n".join(lines)


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    reason: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    tables: tuple[Table, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "reason": self.reason,
            "metrics": {
                k: None if isinstance(v, float) and math.isnan(v) else v
                for k, v in self.metrics.items()
            },
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 10 samples is the largest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def render(result: Result) -> str:
    verdict = "PASS" if result.passed else "FAIL"
    out = [f"== {result.name}: {verdict} — {result.reason}"]
    for table in result.tables:
        out += ["", table.render()]
    if result.metrics:
        metrics = Table(
            ("metric", "value"),
            tuple(
                (k, f"{v:.3f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v))
                for k, v in result.metrics.items()
            ),
        )
        out += ["", metrics.render()]
    return "\n".join(out) + "\n"


def summary(results: Sequence[Result]) -> str:
    rows = tuple((r.name, "PASS" if r.passed else "FAIL", r.reason) for r in results)
    return Table(("scenario", "result", "reason"), rows).render()


def write_json(path: Path, fabric: str, target: str, results: Sequence[Result]) -> None:
    data = {
        "fabric": fabric,
        "target": target,
        "scenarios": [r.to_json() for r in results],
    }
    path.write_text(json.dumps(data, indent=2, allow_nan=False, default=str) + "\n")
