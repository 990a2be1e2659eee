"""`railctl latency`'s table and exit code, from answers built here (the RPC itself is tested
against a real controller in tests/integration/controller/test_railctl_latency.py)."""

from __future__ import annotations

import pytest

from controller.cli.latency_commands import SHADES, _exit, render, shade
from railfabric.v1 import admin_pb2

pytestmark = pytest.mark.unit


def answer(slow_ns: int, *, outlier: bool = False) -> admin_pb2.LatencyResponse:
    r = admin_pb2.LatencyResponse(by=admin_pb2.LATENCY_BY_RAIL, rails=[1, 2], window_ns=10**10)
    for s in (1, 2):
        for d in (1, 2):
            p50 = slow_ns if (s, d) == (2, 1) else 20_000
            r.cells.add(
                src_rail=s,
                dst_rail=d,
                p50_ns=p50,
                p99_ns=p50,
                samples=10,
                sent=10,
                received=10,
                outlier=outlier and (s, d) == (2, 1),
            )
    return r


def test_the_slow_cell_takes_the_darkest_shade_and_the_scale_is_printed() -> None:
    lines = render(answer(400_000))
    assert lines[1].split() == ["rail", "1", "rail", "2"]
    rail2 = next(line for line in lines if line.startswith("rail 2"))
    assert f"{SHADES[-1]} 400.0" in rail2 and f"{SHADES[1]} 20.0" in rail2
    assert any(line.startswith("shade (p50 us):") for line in lines)
    assert lines[-1] == "outliers: none"
    assert _exit(answer(400_000)) == 0


def test_an_outlier_is_marked_and_exits_3() -> None:
    r = answer(400_000, outlier=True)
    assert "400.0!" in "\n".join(render(r))
    assert _exit(r) == 3
    r.ClearField("cells")
    r.outlier_count = 1
    r.outliers.add(link="a:1--b:1", reason=admin_pb2.LATENCY_REASON_LINK_LOSS, sent=10, received=5)
    text = "\n".join(render(r))
    assert "a:1--b:1  link loss" in text and "50.0%" in text
    assert _exit(r) == 3


def test_shades_go_up_with_the_rtt_on_a_log_scale() -> None:
    assert shade(0, 10, 1000) == SHADES[0]
    got = [shade(ns, 10, 1000) for ns in (10, 40, 200, 1000)]
    assert got == sorted(got, key=SHADES.index) and got[0] == SHADES[1] and got[-1] == SHADES[-1]
