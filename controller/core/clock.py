"""Time as the core sees it: passed in with every input, never read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Now:
    """`mono_ns` (CLOCK_MONOTONIC) drives every timer: hold-down, damping, deferral.
    `wall_ns` (Unix time) is only written into reports and events."""

    mono_ns: int
    wall_ns: int

    def wall_of(self, mono_ns: int) -> int:
        """The wall time of an earlier monotonic instant, for reports."""
        return self.wall_ns - (self.mono_ns - mono_ns)

    def mono_of(self, wall_ns: int) -> int:
        """The monotonic instant of a stored wall time (restoring timers after a restart)."""
        return self.mono_ns - (self.wall_ns - wall_ns)
