"""Turns of the running event loop, counted (and made to cost work, when a test needs a busy
loop): a callback that reschedules itself once per turn."""

from __future__ import annotations

import asyncio
import time


class TurnCounter:
    """`n` counts the turns since creation; each turn spends `busy_s` of CPU first (a loop
    serving thousands of sessions). `stop()` ends it."""

    def __init__(self, busy_s: float = 0.0) -> None:
        self.n = 0
        self.busy_s = busy_s
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.n += 1
        if self.busy_s:
            end = time.perf_counter() + self.busy_s
            while time.perf_counter() < end:
                pass
        self._handle = self._loop.call_soon(self._turn)

    def stop(self) -> None:
        self._handle.cancel()
