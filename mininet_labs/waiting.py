"""Polling for an outcome with a bound (labs wait for outcomes, never for fixed times)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from mininet_labs.netlinks import LabError

T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)
