"""Scenario results: a readable table per scenario and the JSON the labs write.

A result is PASS, FAIL or SKIP. A skip is a scenario the target cannot run (bmv2 has no PFC);
it is neither a pass nor a failure: it shows as SKIP with its reason in the report, the
summary and the JSON (`"result": "skip"`, `"passed": false`), and never fails a run."""

from __future__ import annotations

import enum
import json
import math
import shlex
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


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    reason: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    tables: tuple[Table, ...] = ()
    skipped: bool = False  # not run on this target (see `skip`); never passed

    def __post_init__(self) -> None:
        if self.skipped and self.passed:
            raise ValueError(f"scenario {self.name}: a skipped scenario cannot have passed")

    @classmethod
    def skip(cls, name: str, reason: str) -> Result:
        """`name` was not run on this target, for `reason`."""
        return cls(name, False, reason, skipped=True)

    @property
    def verdict(self) -> Verdict:
        if self.skipped:
            return Verdict.SKIP
        return Verdict.PASS if self.passed else Verdict.FAIL

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAIL

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.verdict.value,
            "passed": self.passed,
            "reason": self.reason,
            "metrics": {
                k: None if isinstance(v, float) and math.isnan(v) else v
                for k, v in self.metrics.items()
            },
            # Every row the report printed (the failover's per-cut rows among them).
            "tables": [
                {"header": list(t.header), "rows": [list(r) for r in t.rows]} for t in self.tables
            ],
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
    out = [f"== {result.name}: {result.verdict.name} — {result.reason}"]
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
    """The table of verdicts and a count line, e.g. '4 passed, 0 failed, 2 skipped'."""
    rows = tuple((r.name, r.verdict.name, r.reason) for r in results)
    counts = ", ".join(
        f"{sum(r.verdict is v for r in results)} {word}"
        for v, word in (
            (Verdict.PASS, "passed"),
            (Verdict.FAIL, "failed"),
            (Verdict.SKIP, "skipped"),
        )
    )
    return Table(("scenario", "result", "reason"), rows).render() + "\n" + counts


def exit_status(results: Sequence[Result]) -> int:
    """1 when a scenario failed, else 0 (passed or skipped; a skip is listed, not hidden)."""
    return 1 if any(r.failed for r in results) else 0


def write_json(
    path: Path,
    fabric: str,
    target: str,
    results: Sequence[Result],
    target_detail: str = "",
    *,
    command: Sequence[str] = (),
) -> None:
    """The results; `command`: the lab's own command line, and per scenario the one that
    runs it alone, to reproduce either."""
    alone = ["python", "-m", "mininet_labs", "run", fabric, "--target", target]
    data = {
        "fabric": fabric,
        "target": target,
        "target_detail": target_detail,
        "command": shlex.join(command),
        "scenarios": [
            {**r.to_json(), "reproduce": shlex.join([*alone, "--scenario", r.name])}
            for r in results
        ],
        "counts": {v.value: sum(r.verdict is v for r in results) for v in Verdict},
    }
    path.write_text(json.dumps(data, indent=2, allow_nan=False, default=str) + "\n")
