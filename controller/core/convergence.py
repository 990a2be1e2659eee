"""Convergence accounting and make-before-break, as data (pure).

Make before break: when a link returns, the switches at its ends get their deltas first; every
other switch's delta of that event is held until those ends applied (or a deadline passed), so
no ToR hands traffic to a spine that does not yet route it back down. An operator's drain holds
the other way round: the drained switch's deltas wait until every other switch moved its
traffic off the link.

Held deltas live in one FIFO per switch, in event order. A switch's deltas leave only from the
head of its queue, so they can never be reordered; a delta that must go now (a link down) first
flushes what is queued before it. Releasing pops the head, so it cannot happen twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from railfabric.v1 import state_pb2

# A link-up's remote deltas wait at most this long for the link's own switches.
DEFER_LIMIT_NS = 500_000_000


@dataclass
class Convergence:
    """One link event and the generations it caused, until every switch applied them."""

    link: str
    usable: bool
    event_wall_ns: int
    reported_wall_ns: int
    compute_ns: int
    # switch -> generation it must apply.
    waiting: dict[str, int] = field(default_factory=dict)
    # Deltas of this event still held in some queue.
    held: int = 0
    last_applied_wall_ns: int = 0
    # Latest time an agent received a delta of this event (Applied.received_wall_ns).
    last_received_wall_ns: int = 0
    switches: int = 0
    entries: int = 0

    @property
    def done(self) -> bool:
        return not self.waiting and not self.held


@dataclass
class Held:
    event_id: int
    delta: state_pb2.StateDelta
    # switch -> generation it must have applied before this delta may leave.
    gate: dict[str, int]
    deadline_mono_ns: int


class HeldDeltas:
    """Per-switch FIFOs of deltas waiting for make-before-break."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Held]] = {}

    def __bool__(self) -> bool:
        return bool(self._queues)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def switches(self) -> list[str]:
        return list(self._queues)

    def hold(self, switch: str, held: Held) -> None:
        self._queues.setdefault(switch, deque()).append(held)

    def peek(self, switch: str) -> list[Held]:
        """What is queued for `switch`, oldest first, left in place."""
        return list(self._queues.get(switch, ()))

    def take_all(self, switch: str) -> list[Held]:
        """Everything queued for `switch`, oldest first (it must go out before a newer one)."""
        q = self._queues.pop(switch, None)
        return list(q) if q else []

    def take_ready(
        self, now_mono_ns: int, gate_open: Callable[[str, int], bool]
    ) -> list[tuple[str, Held]]:
        """Heads whose gate is open or whose deadline passed, per switch in queue order."""
        out: list[tuple[str, Held]] = []
        for switch in list(self._queues):
            q = self._queues[switch]
            while q and (
                q[0].deadline_mono_ns <= now_mono_ns
                or all(gate_open(s, g) for s, g in q[0].gate.items())
            ):
                out.append((switch, q.popleft()))
            if not q:
                del self._queues[switch]
        return out

    def next_deadline_ns(self) -> int | None:
        heads = [q[0].deadline_mono_ns for q in self._queues.values()]
        return min(heads) if heads else None
