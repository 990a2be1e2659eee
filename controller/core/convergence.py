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


class Gate:
    """What the held deltas of one event wait for: switch -> generation it must have applied.
    Shared by all of them, and checked once for all: entries seen open are dropped (a switch
    that applied, or has no session, is not waited for again), so over an event's life each
    entry is found open once, however many Applied arrive."""

    __slots__ = ("waiting",)

    def __init__(self, waiting: dict[str, int]) -> None:
        self.waiting = dict(waiting)

    def check(self, gate_open: Callable[[str, int], bool]) -> bool:
        """Whether every entry is open; stops at the first that is not."""
        waiting = self.waiting
        for switch, generation in list(waiting.items()):
            if not gate_open(switch, generation):
                return False
            del waiting[switch]
        return True


@dataclass
class Held:
    event_id: int
    delta: state_pb2.StateDelta
    gate: Gate
    deadline_mono_ns: int


# Heads of queues are grouped by what they wait for: (id of the gate, deadline).
_Key = tuple[int, int]


class _Heads:
    __slots__ = ("deadline_mono_ns", "gate", "switches")

    def __init__(self, gate: Gate, deadline_mono_ns: int) -> None:
        self.gate = gate
        self.deadline_mono_ns = deadline_mono_ns
        self.switches: dict[str, None] = {}  # an ordered set


class HeldDeltas:
    """Per-switch FIFOs of deltas waiting for make-before-break.

    The heads of the queues are indexed by their gate and deadline, so finding what is ready
    looks at each event's gate once, not at every queue: with a storm's thousands of held
    deltas and an Applied from every switch, scanning every queue and gate per Applied was
    most of bench.core's ref-100k storm (40 s for one Applied)."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Held]] = {}
        self._heads: dict[_Key, _Heads] = {}

    def __bool__(self) -> bool:
        return bool(self._queues)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def switches(self) -> list[str]:
        return list(self._queues)

    def hold(self, switch: str, held: Held) -> None:
        q = self._queues.get(switch)
        if q is None:
            q = self._queues[switch] = deque()
        q.append(held)
        if len(q) == 1:
            self._index(switch, held)

    def peek(self, switch: str) -> list[Held]:
        """What is queued for `switch`, oldest first, left in place."""
        return list(self._queues.get(switch, ()))

    def take_all(self, switch: str) -> list[Held]:
        """Everything queued for `switch`, oldest first (it must go out before a newer one)."""
        q = self._queues.pop(switch, None)
        if not q:
            return []
        key = _key(q[0])
        heads = self._heads[key]
        del heads.switches[switch]
        if not heads.switches:
            del self._heads[key]
        return list(q)

    def take_ready(
        self, now_mono_ns: int, gate_open: Callable[[str, int], bool]
    ) -> list[tuple[str, Held, bool]]:
        """Heads whose gate is open or whose deadline passed, per switch in queue order, each
        with whether it was the last delta held for its switch."""
        out: list[tuple[str, Held, bool]] = []
        todo = list(self._heads)
        while todo:
            key = todo.pop()
            heads = self._heads.get(key)
            if heads is None:
                continue
            if heads.deadline_mono_ns > now_mono_ns and not heads.gate.check(gate_open):
                continue
            del self._heads[key]
            for switch in heads.switches:
                q = self._queues[switch]
                out.append((switch, q.popleft(), not q))
                if q:
                    todo.append(self._index(switch, q[0]))
                else:
                    del self._queues[switch]
        return out

    def next_deadline_ns(self) -> int | None:
        return min((h.deadline_mono_ns for h in self._heads.values()), default=None)

    def _index(self, switch: str, head: Held) -> _Key:
        key = _key(head)
        heads = self._heads.get(key)
        if heads is None:
            heads = self._heads[key] = _Heads(head.gate, head.deadline_mono_ns)
        heads.switches[switch] = None
        return key


def _key(held: Held) -> _Key:
    return (id(held.gate), held.deadline_mono_ns)
