"""Names (switches) that each wait for a deadline, the earliest found without reading all.

The core asks for its next deadline after every input (`DecisionCore.next_deadline_ns`). A
minimum over a dict reads every name each time: in the session storm on ref-100k, 4,672
switches wait for their agents while ~14,000 inputs (Hellos, then Applied) come in, and the
event loop spent ~0.5 s finding the same minimum again and again (bench.swarm, py-spy)."""

from __future__ import annotations

import heapq
from collections.abc import ItemsView


class Deadlines:
    """A mapping name -> deadline (ns) and a heap of (deadline, name) beside it. Setting a
    name pushes a new entry; an entry that no longer matches its name's deadline is stale and
    is dropped when it reaches the top; the heap is rebuilt from the mapping when stale entries
    outnumber live ones by more than 64."""

    __slots__ = ("_at", "_heap")

    def __init__(self) -> None:
        self._at: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def items(self) -> ItemsView[str, int]:
        return self._at.items()

    def set(self, key: str, deadline_ns: int) -> None:
        if self._at.get(key) == deadline_ns:
            return
        self._at[key] = deadline_ns
        heapq.heappush(self._heap, (deadline_ns, key))
        if len(self._heap) > 2 * len(self._at) + 64:
            self._heap = [(d, k) for k, d in self._at.items()]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        self._at.pop(key, None)

    def clear(self) -> None:
        self._at.clear()
        self._heap.clear()

    def earliest_ns(self) -> int | None:
        """The earliest deadline, or None when no name waits."""
        heap = self._heap
        while heap and self._at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now_ns: int) -> list[str]:
        """Take out every name whose deadline is `now_ns` or earlier, in name order (callers
        act on them in an order that does not depend on when each was set)."""
        due: list[str] = []
        while (earliest := self.earliest_ns()) is not None and earliest <= now_ns:
            _, key = heapq.heappop(self._heap)
            del self._at[key]
            due.append(key)
        due.sort()
        return due
