"""The controller's GIL switch interval: its core computes states and rebuilds in threads, and
each time its event loop waits in epoll it lets them run; at Python's default (5 ms) every
turn of the loop with such a thread busy cost 5 ms more (bench.swarm on ref-100k: admin calls,
cuts and railctl pages waited for it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from controller.daemon.main import SWITCH_INTERVAL_S, main

pytestmark = pytest.mark.unit

LAB = str(Path(__file__).resolve().parents[3] / "examples" / "lab-2rail.yaml")


def test_the_daemon_sets_its_switch_interval_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    set_to: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", set_to.append)
    # Refused before anything starts (--store with --state-dir): the interval was set already.
    assert main(["--fabric", LAB, "--store", "memory:", "--state-dir", str(tmp_path)]) == 2
    assert set_to == [SWITCH_INTERVAL_S]
    assert sys.getswitchinterval() > SWITCH_INTERVAL_S  # shorter than Python's 5 ms
