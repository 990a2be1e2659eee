"""Operators' drains, as data (pure): what a drain names, and why one is refused.

A drained link is kept out of routing exactly like a link that is not usable, until an
operator undrains it; `DecisionCore.drain` and `undrain` are the inputs, and the what-if check
(`Planner.isolation`) refuses a drain that would leave ToR pairs without a path.

Draining a link that is drained already, or undraining one that is not, is an error
(`DrainConflict`), not a silent no-op: the operator learns who drained it and when. A switch
target takes the links of the switch that are left to change, and is an error only when none
is.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from controller.core.planner import Isolation
from controller.core.records import DrainRecord


class DrainError(ValueError):
    """A drain or undrain that cannot be done; the text says why, for the operator."""


class DrainNotFound(DrainError):
    """The target names no switch, or no switch-to-switch link (the text names the closest)."""


class DrainConflict(DrainError):
    """Every link named is drained already (drain), or none is (undrain)."""


class DrainRefused(DrainError):
    """The what-if check: ToR pairs would lose their last path."""


@dataclass(frozen=True)
class DrainPlan:
    # The target as the core names it: "SWITCH:PORT" or "SWITCH".
    target: str
    # Links the input changes, and links of the target left as they are.
    links: tuple[str, ...]
    unchanged: tuple[str, ...]


def when(wall_ns: int) -> str:
    """A wall time for people, as railctl shows times: "2026-12-01 18:15:08 UTC"."""
    t = datetime.datetime.fromtimestamp(wall_ns / 1e9, tz=datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def drained_text(d: DrainRecord) -> str:
    """`LinkInfo.reason` of a drained link: "drained by operator/alice at TIME: REASON"."""
    text = f"drained by {d.who} at {when(d.wall_ns)}"
    return f"{text}: {d.reason}" if d.reason else text


def refusal(target: str, iso: Isolation) -> str:
    """Why a drain of `target` is refused, naming one ToR pair that would lose its path."""
    a, b = iso.example
    text = f"draining {target} would leave {a} without a path to {b}"
    if iso.example_nics[0] and iso.example_nics[1]:
        text += f" (server NICs such as {iso.example_nics[0]} and {iso.example_nics[1]})"
    others = iso.tor_pairs - 1
    if others:
        text += f"; {others} other ToR pair{'s' if others != 1 else ''} too"
    if iso.nic_pairs:
        text += f"; {iso.nic_pairs} server NIC pairs in all"
    return text + "; drain with force (railctl drain --force) to take it out anyway"
