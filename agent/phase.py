"""When an agent's periodic telemetry runs: on a grid of its period, offset by a hash of the
switch and the task, as Prometheus spreads its scrapes (a target's offset is a hash of it
modulo the interval).

Agents started together (a lab, a rack's power-on, a restart of them all) and each sleeping a
period after its last run read their counters in the same few milliseconds of every period:
in the lab, five of six agents read within 50 ms of each other every 5 s, contending for the
machine's cores, and a link event arriving then waited behind all of them (the tail of
failover in bench.telemetry). On the wall clock, so that agents on different hosts spread
too; a clock step moves one run, not the grid.
"""

from __future__ import annotations

import zlib


def offset(key: str, period_s: float) -> float:
    """Where in each period `key` runs: in [0, period_s), the same on every host."""
    return zlib.crc32(key.encode()) / 2**32 * period_s


def until_next(key: str, period_s: float, now_s: float) -> float:
    """Seconds from `now_s` (wall clock) to `key`'s next run: in (0, period_s]. A run that
    overran its tick waits for the following one rather than running late."""
    if period_s <= 0:
        raise ValueError(f"period {period_s} s: must be positive")
    wait = (offset(key, period_s) - now_s) % period_s
    return wait if wait > 0 else period_s
