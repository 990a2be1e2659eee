"""One agent session's outbox: bounded, and it coalesces instead of giving up.

An agent that is slow to take its messages (a large snapshot on a loaded link, thousands of
sessions starting at once) must not be dropped for it: a reset costs a reconnect, a Hello and
a full snapshot, which is the load that made it slow. So state messages coalesce:

- a snapshot (a DesiredState, in its wire form: StateWire) replaces every state message
  queued before it, which it contains;
- a delta that would overflow the outbox replaces every queued state message with one
  *resync*: when the session gets to it, it sends the switch's state as of then (`current`),
  and skips the queued deltas that state already contains.

Either way the agent ends on the chain's head, as it would have message by message. Other
messages (ReadTables, a few per session at most) are never dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from controller.core.effects import StateWire
from railfabric.v1 import control_pb2

# What a session sends: a message, or a snapshot already serialized.
Outgoing = control_pb2.ControllerMessage | StateWire

# Messages queued for one session before state messages coalesce.
OUTBOX_SIZE = 256


class Closed(Exception):
    """The session was closed; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_RESYNC = object()  # queued in place of coalesced state messages


class Outbox:
    def __init__(
        self,
        current: Callable[[], StateWire | None],
        size: int = OUTBOX_SIZE,
    ) -> None:
        if size < 1:
            raise ValueError(f"outbox size must be >= 1, got {size}")
        self._current = current
        self._size = size
        self._queue: deque[Outgoing | object] = deque()
        self._ready = asyncio.Event()
        self._closed: str | None = None
        self.coalesced = 0  # state messages dropped because a newer state covered them

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, msg: Outgoing) -> None:
        if self._closed is not None:
            return
        kind = _kind(msg)
        if kind == "desired_state":
            self._drop_state()
        elif kind == "state_delta" and len(self._queue) >= self._size:
            self._drop_state()
            self._queue.append(_RESYNC)
            self._ready.set()
            return
        self._queue.append(msg)
        self._ready.set()

    def close(self, reason: str) -> None:
        """End the session: `get` raises Closed once, whatever is still queued."""
        if self._closed is None:
            self._closed = reason
            self._queue.clear()
            self._ready.set()

    async def get(self) -> Outgoing:
        """The next message to send; raises Closed once the session is closed."""
        while True:
            if self._closed is not None:
                raise Closed(self._closed)
            if not self._queue:
                self._ready.clear()
                await self._ready.wait()
                continue
            item = self._queue.popleft()
            if item is _RESYNC:
                snapshot = self._current()
                if snapshot is None:
                    continue  # the switch left the intent; its session is being closed
                # Deltas queued behind the resync that this state already contains.
                self._drop_state(through=snapshot.generation)
                return snapshot
            assert isinstance(item, Outgoing)
            return item

    def _drop_state(self, through: int | None = None) -> None:
        """Drop the queued state messages (resyncs included); with `through`, only the deltas
        that end at or before that generation."""
        kept: deque[Outgoing | object] = deque()
        for item in self._queue:
            if _covered(item, through):
                self.coalesced += 1
            else:
                kept.append(item)
        self._queue = kept


def _kind(msg: Outgoing) -> str | None:
    return "desired_state" if isinstance(msg, StateWire) else msg.WhichOneof("msg")


def _covered(item: Outgoing | object, through: int | None) -> bool:
    if not isinstance(item, Outgoing):
        return through is None  # a resync
    kind = _kind(item)
    if through is None:
        return kind in ("desired_state", "state_delta")
    return (
        isinstance(item, control_pb2.ControllerMessage)
        and kind == "state_delta"
        and item.state_delta.to_generation <= through
    )
