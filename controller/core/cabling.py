"""Cabling check: what LLDP hears on each port against the cabling plan of the intent.

Pure. The daemon calls `check_switch` with a switch's latest `Neighbors` report and raises or
clears one alarm per port. A port that hears nothing is not a miswire (the link may be down, and
link state has its own alarm); a port that hears the wrong peer is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

End = tuple[str, int]  # (switch name, port)


@dataclass(frozen=True)
class Heard:
    """One LLDP neighbour: on local `port`, the peer says it is `system_name` port `port_id`."""

    port: int
    system_name: str
    port_id: str


@dataclass(frozen=True)
class Miswire:
    switch: str
    port: int
    expected: End | None
    seen: End | str

    @property
    def alarm_id(self) -> str:
        return f"miswire:{self.switch}:{self.port}"

    @property
    def message(self) -> str:
        seen = self.seen if isinstance(self.seen, str) else f"{self.seen[0]} port {self.seen[1]}"
        if self.expected is None:
            return f"{self.switch} port {self.port} is not cabled in the plan, sees {seen}"
        return (
            f"{self.switch} port {self.port} expected {self.expected[0]} port "
            f"{self.expected[1]}, sees {seen}"
        )


def check_switch(
    switch: str, heard: Iterable[Heard], plan: Mapping[End, End]
) -> tuple[list[Miswire], list[int]]:
    """Compare one switch's LLDP table with the plan (switch-to-switch ends only).

    Returns the miswired ports and the ports heard correctly (whose alarms may be cleared)."""
    miswired: list[Miswire] = []
    correct: list[int] = []
    for h in heard:
        expected = plan.get((switch, h.port))
        seen: End | str
        try:
            seen = (h.system_name, int(h.port_id))
        except ValueError:
            seen = f"{h.system_name} port {h.port_id!r}"
        if expected == seen:
            correct.append(h.port)
        else:
            miswired.append(Miswire(switch, h.port, expected, seen))
    return miswired, correct
