"""Live updates for the web view: the controller's events, as the runner emits them
(controller/daemon/runner.py `on_event`, on the event loop, right after the core decided),
reduced to what changed (links, switches, alarms) and handed to each open page's stream.

Each page has a bounded queue of changes. A page that does not keep up is not allowed to hold
memory: its queue is dropped and it is told to read everything again (`resync`), once. The
stream renders a change from the core's state when it sends it, so what a page is shown is
never older than the change that woke it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from railfabric.v1 import admin_pb2

# Changes one page may have waiting; past it the page resyncs (a storm of link events on a
# large fabric is cheaper to read again as one summary than event by event).
QUEUE_LIMIT = 1_000
_K = admin_pb2
_PORT = frozenset({_K.EVENT_KIND_PORT_DOWN, _K.EVENT_KIND_PORT_UP})
_LINK = frozenset({_K.EVENT_KIND_LINK_DOWN, _K.EVENT_KIND_LINK_UP})
_SWITCH = frozenset({_K.EVENT_KIND_SESSION_UP, _K.EVENT_KIND_SESSION_DOWN, _K.EVENT_KIND_CONVERGED})
_ALARM = frozenset({_K.EVENT_KIND_ALARM_RAISED, _K.EVENT_KIND_ALARM_CLEARED})
# Everything changes: the page reads the fabric again.
_EVERYTHING = frozenset({_K.EVENT_KIND_INTENT_RELOADED, _K.EVENT_KIND_ROUTING_COMPACTED})


@dataclass
class Change:
    """What one or more events changed. `ports` are (switch, port) ends whose link the page
    should redraw; `resync` says read everything again."""

    ports: set[tuple[str, int]] = field(default_factory=set)
    switches: set[str] = field(default_factory=set)
    alarms: bool = False
    resync: bool = False

    def __bool__(self) -> bool:
        return bool(self.ports or self.switches or self.alarms or self.resync)

    def merge(self, other: Change) -> None:
        self.ports |= other.ports
        self.switches |= other.switches
        self.alarms |= other.alarms
        self.resync |= other.resync


def change_of(event: admin_pb2.Event) -> Change:
    """What the page must redraw after `event` (empty when nothing it shows changed)."""
    kind = event.type
    change = Change()
    if kind in _PORT:
        change.ports.add((event.switch_name, event.port))
    elif kind in _LINK or event.HasField("link_change"):
        lc = event.link_change
        change.ports.add((lc.a.switch_name, lc.a.port))
        change.ports.add((lc.b.switch_name, lc.b.port))
    elif event.HasField("drain"):
        d = event.drain
        change.ports.add((d.a.switch_name, d.a.port))
        change.ports.add((d.b.switch_name, d.b.port))
    elif kind in _SWITCH and event.switch_name:
        change.switches.add(event.switch_name)
    elif kind in _ALARM:
        change.alarms = True
        if event.switch_name and event.port:  # a miswire colours its link
            change.ports.add((event.switch_name, event.port))
    elif kind in _EVERYTHING:
        change.resync = True
    return change


class Subscriber:
    """One open page: the changes it has not been sent yet."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._limit = limit
        self._pending = Change()
        self._count = 0
        self._woken = asyncio.Event()
        self.closed = False

    def close(self) -> None:
        """The server stops: the stream ends at its next wake."""
        self.closed = True
        self._woken.set()

    def offer(self, change: Change) -> None:
        if self._pending.resync:
            return  # it reads everything anyway
        self._count += 1
        if self._count > self._limit:
            self._pending = Change(resync=True)
        else:
            self._pending.merge(change)
        self._woken.set()

    async def next(self, timeout_s: float) -> Change:
        """Every change since the last call, merged; empty after `timeout_s` without one."""
        if not self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout_s)
        change, self._pending, self._count = self._pending, Change(), 0
        self._woken.clear()
        return change


class Hub:
    """The open pages; `publish` is the runner's event callback (on the loop)."""

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()

    def __len__(self) -> int:
        return len(self._subscribers)

    def subscribe(self, limit: int = QUEUE_LIMIT) -> Subscriber:
        subscriber = Subscriber(limit)
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def resync(self) -> None:
        """Every open page reads everything again: the core it reads was replaced (a
        follower's warm copy rebuilt, or this replica took the lead), with no events."""
        for subscriber in self._subscribers:
            subscriber.offer(Change(resync=True))

    def publish(self, event: admin_pb2.Event) -> None:
        if not self._subscribers:
            return  # nobody watching: nothing to reduce (a cold start emits thousands)
        change = change_of(event)
        if change:
            for subscriber in self._subscribers:
                subscriber.offer(change)
