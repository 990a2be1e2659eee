"""An agent whose switch name the real controller daemon refuses (INVALID_ARGUMENT "unknown
switch ...; did you mean ...?") slows its retries to one per REFUSED_BACKOFF.maximum_s and
logs the refusal, with the controller's suggestion, once per REFUSAL_LOG_S. Here both are
scaled down (0.4 s and 1 s) so the test runs in seconds; the defaults are checked apart."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.session import REFUSAL_LOG_S, REFUSED_BACKOFF, Backoff, ControllerSession
from railfabric.v1 import control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import start

pytestmark = pytest.mark.integration

CAP_S = 0.4
LOG_S = 1.0
RUN_S = 5.0


async def test_a_refused_agent_slows_down_and_reports_once_per_period(
    processes: Processes,
    free_port: Callable[[], int],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    addr = await start(processes, free_port(), tmp_path / "state")
    tries: list[float] = []

    def hello() -> control_pb2.Hello:
        tries.append(time.monotonic())
        return control_pb2.Hello(switch_name="tor-r1-b9")

    async def on_message(_msg: control_pb2.ControllerMessage) -> None:
        raise AssertionError("a refused agent got a message")

    session = ControllerSession(
        addr,
        hello,
        on_message,
        backoff=Backoff(initial_s=0.01, maximum_s=0.02),  # what a refusal must not use
        refused_backoff=Backoff(initial_s=0.05, maximum_s=CAP_S),
        refusal_log_s=LOG_S,
        rng=random.Random(3),
        # A certificate of the fabric's CA for the switch the controller does not know.
        tls_files=pki.switch("tor-r1-b9"),
    )
    caplog.set_level(logging.INFO, logger="railfabric.agent.session")
    task = asyncio.create_task(session.run())
    await asyncio.sleep(RUN_S)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

    gaps = [b - a for a, b in itertools.pairwise(tries)]
    print(f"{len(tries)} tries in {RUN_S} s, gaps {[round(g, 2) for g in gaps]}")
    # 0.05, 0.1, 0.2, then the ceiling: never two tries closer than it once there.
    assert len(tries) >= 5, gaps
    assert all(gap >= CAP_S for gap in gaps[3:]), gaps
    assert len(tries) <= 3 + RUN_S / CAP_S + 1, gaps
    assert session.refusals == len(tries)

    reports = [r for r in caplog.records if "refuses this agent" in r.getMessage()]
    print("\n".join(r.getMessage() for r in reports))
    assert reports and all(r.levelno == logging.ERROR for r in reports)
    # The first at once, then one per LOG_S at most.
    assert 2 <= len(reports) <= RUN_S / LOG_S + 1, [r.getMessage() for r in reports]
    for report in reports:
        message = report.getMessage()
        assert "INVALID_ARGUMENT: unknown switch 'tor-r1-b9'; did you mean 'tor-r1-b2'?" in message
    assert "refusals since the last report" in reports[-1].getMessage()
    # Neither the fast path's "reconnecting" warning nor a "session open" line per try (the
    # first try opened before anything was refused).
    assert not [r for r in caplog.records if "reconnecting in" in r.getMessage()]
    opened = [r for r in caplog.records if " open" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(opened) == 1, [r.getMessage() for r in opened]


async def test_the_defaults_are_one_try_and_one_report_per_minute() -> None:
    assert REFUSAL_LOG_S == 60.0
    assert REFUSED_BACKOFF.maximum_s == 60.0
    delays = REFUSED_BACKOFF.spaced(random.Random(5))
    got = [await anext(delays) for _ in range(12)]
    assert got[0] < 2  # a refusal that was a race (intent reloading) is retried soon
    assert all(60.0 <= d <= 66.0 for d in got[7:]), got
