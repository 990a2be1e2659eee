"""The store's own thread, so the event loop never waits on an fsync.

`submit(records)` hands over the records of one input and returns at once with a Future: True
once they are durable, False when the store is unavailable. Either way the caller goes on
deciding and forwarding from memory (the embedded store's failure policy: a controller that
cannot write its store still routes; what it could not write is held and written later).

Group commit: the thread takes everything submitted since its last commit and writes it as one
transaction (one fsync), so under load the number of fsyncs follows the disk, not the inputs.

Pending records are merged as they arrive: state records (links, applied generations, meta,
alarms) by `records.state_key`, switch generations per switch, latest wins; the routing log
keeps every step in order (a RoutingReset drops the steps before it); events are kept up to
`max_pending_events`, oldest shed first and counted. Merging is what bounds the memory between
`submit` and the disk, whether the store fails for an hour or one fsync takes seconds: by the
number of links, switches, alarms and meta keys, the routing steps since the last reset (which
the core compacts) and the event bound; beyond that only one Future per input waiting for the
commit in flight. Writing the merged set as one transaction takes the file from its state
before those inputs to the state after all of them, so nothing in between is ever visible.

While the store fails the thread retries every `retry_s` and flushes everything once it works
again; `on_health(available, reason)` is called from the thread on each change (the daemon turns
it into the `store_unavailable` critical alarm via loop.call_soon_threadsafe). Nothing raises
into the caller and the thread never dies: any exception in a commit is a store failure.
"""

from __future__ import annotations

import logging
import threading
import time
import typing
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from controller.core.records import (
    EventRecord,
    Record,
    RoutingReset,
    RoutingStep,
    SwitchGeneration,
    SwitchGenerations,
    state_key,
)
from controller.daemon.store import StoreError

log = logging.getLogger(__name__)

DEFAULT_RETRY_S = 1.0
DEFAULT_MAX_PENDING_EVENTS = 10_000
THREAD_NAME = "railfabric-store-writer"

# Every record type, from the one definition of the union.
_RECORD_TYPES = typing.get_args(Record)

HealthCallback = Callable[[bool, str], None]


class RecordStore(Protocol):
    """What the writer needs of a store (SqliteStore; tests' fault injectors)."""

    path: str

    def commit(self, records: Sequence[Record]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class WriterStats:
    available: bool
    # Records not yet durable (queued, held or in the commit in flight); a switch's generation
    # counts as one.
    pending_records: int
    events_shed: int
    commits: int
    failed_commits: int
    last_error: str


class _Pending:
    """Records not yet durable, merged (see the module docstring)."""

    __slots__ = ("events", "generations", "reset", "state", "steps")

    def __init__(self, max_events: int) -> None:
        self.reset = False
        self.steps: list[RoutingStep] = []
        self.generations: dict[str, SwitchGeneration] = {}
        self.state: dict[Hashable, Record] = {}
        self.events: deque[EventRecord] = deque(maxlen=max(1, max_events))

    def __bool__(self) -> bool:
        return bool(self.reset or self.steps or self.generations or self.state or self.events)

    def count(self) -> int:
        return (
            int(self.reset)
            + len(self.steps)
            + len(self.generations)
            + len(self.state)
            + len(self.events)
        )

    def add(self, records: Sequence[Record]) -> int:
        """Merge newer records in; returns how many events were shed for the bound."""
        shed = 0
        for r in records:
            key = state_key(r)
            if key is not None:
                # Re-inserted so the dict's order stays the order of last change.
                self.state.pop(key, None)
                self.state[key] = r
            elif isinstance(r, SwitchGenerations):
                for entry in r.entries:
                    self.generations[entry.name] = entry
            elif isinstance(r, RoutingStep):
                self.steps.append(r)
            elif isinstance(r, RoutingReset):
                self.reset = True
                self.steps.clear()
            elif isinstance(r, EventRecord):
                if len(self.events) == self.events.maxlen:
                    shed += 1
                self.events.append(r)
        return shed

    def absorb(self, newer: _Pending) -> int:
        """Merge what was submitted after this (older) set; returns events shed."""
        return self.add(newer.records())

    def records(self) -> list[Record]:
        """One list that, written in order, gives the state after every merged input. Kinds
        touch disjoint rows (an applied generation's upsert is independent of the generation's),
        so grouping by kind changes nothing."""
        out: list[Record] = []
        if self.reset:
            out.append(RoutingReset())
        out.extend(self.steps)
        if self.generations:
            out.append(SwitchGenerations(tuple(self.generations.values())))
        out.extend(self.state.values())
        out.extend(self.events)
        return out

    def kinds(self) -> Counter[str]:
        kinds: Counter[str] = Counter(type(r).__name__ for r in self.state.values())
        if self.reset:
            kinds["RoutingReset"] += 1
        if self.steps:
            kinds["RoutingStep"] += len(self.steps)
        if self.generations:
            kinds["SwitchGeneration"] += len(self.generations)
        if self.events:
            kinds["EventRecord"] += len(self.events)
        return kinds


class StoreWriter:
    """Owns `store` on a dedicated thread from construction to `close`; nothing else may use
    the store meanwhile."""

    def __init__(
        self,
        store: RecordStore,
        *,
        retry_s: float = DEFAULT_RETRY_S,
        max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
        on_health: HealthCallback | None = None,
        thread_name: str = THREAD_NAME,
    ) -> None:
        self._store = store
        self._retry_s = retry_s
        self._max_events = max_pending_events
        self._on_health = on_health
        self._cv = threading.Condition()
        self._pending = _Pending(max_pending_events)
        # Futures of the inputs in _pending submitted while the store was available: they learn
        # the outcome of the commit that covers them.
        self._waiting: list[Future[bool]] = []
        self._inflight = 0
        self._available = True
        self._retry_at = 0.0
        self._closing = False
        # Whether a submission after close was logged (it is, once).
        self._said_after_close = False
        self._events_shed = 0
        self._commits = 0
        self._failed_commits = 0
        self._last_error = ""
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    # -- caller side (the event loop)

    def submit(self, records: Sequence[Record]) -> Future[bool]:
        """Queue the records of one input; the Future says whether they are durable."""
        future: Future[bool] = Future()
        # Running from the start: a caller's cancel() cannot make set_result fail later.
        future.set_running_or_notify_cancel()
        answer: bool | None = False
        try:
            bad = [r for r in records if not isinstance(r, _RECORD_TYPES)]
            if bad:
                log.error("store writer: not store records, refused: %r", bad[:3])
            else:
                with self._cv:
                    if self._closing:
                        # Said once: a stop that ends thousands of sessions late would
                        # otherwise log a line for each.
                        if not self._said_after_close:
                            log.error(
                                "store writer: records submitted after close are not written "
                                "(first: %d records; later ones are not logged)",
                                len(records),
                            )
                        self._said_after_close = True
                    else:
                        self._events_shed += self._pending.add(records)
                        if self._available:
                            self._waiting.append(future)
                            answer = None
                            self._cv.notify()
        except Exception:
            log.exception("store writer: submit failed")
        if answer is not None:
            future.set_result(answer)
        return future

    @property
    def stats(self) -> WriterStats:
        with self._cv:
            return WriterStats(
                available=self._available,
                pending_records=self._pending.count() + self._inflight,
                events_shed=self._events_shed,
                commits=self._commits,
                failed_commits=self._failed_commits,
                last_error=self._last_error,
            )

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is pending (one last try when the store is unavailable) and close the
        store. What still cannot be written is logged as an error, by kind."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.error(
                "store writer: %s still writing after %.1f s; %d records may not be durable",
                self._store.path,
                timeout_s,
                self.stats.pending_records,
            )

    # -- the writer thread

    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    break
            except Exception:
                # A bug of ours, not the store's: keep the thread alive.
                log.exception("store writer: unexpected error")
                time.sleep(self._retry_s)
        self._finish()

    def _step(self) -> bool:
        """Wait for something to write and write it; False once closing."""
        with self._cv:
            while not self._closing:
                # Waiting futures alone are work too: an empty input is a barrier that is True
                # once everything submitted before it is durable.
                if self._pending or self._waiting:
                    if self._available:
                        break
                    delay = self._retry_at - time.monotonic()
                    if delay <= 0:
                        break
                    self._cv.wait(delay)
                else:
                    self._cv.wait()
            if self._closing:
                return False
            batch, futures = self._take()
        ok, reason = self._commit(batch)
        self._settle(batch, futures, ok, reason)
        return True

    def _take(self) -> tuple[_Pending, list[Future[bool]]]:
        batch, futures = self._pending, self._waiting
        self._pending = _Pending(self._max_events)
        self._waiting = []
        self._inflight = batch.count()
        return batch, futures

    def _commit(self, batch: _Pending) -> tuple[bool, str]:
        if not batch:
            return True, ""
        try:
            self._store.commit(batch.records())
        except StoreError as exc:
            return False, str(exc)
        except Exception as exc:
            log.exception("store writer: commit to %s failed", self._store.path)
            return False, f"{self._store.path}: {type(exc).__name__}: {exc}"
        return True, ""

    def _settle(self, batch: _Pending, futures: list[Future[bool]], ok: bool, reason: str) -> None:
        with self._cv:
            self._inflight = 0
            changed = ok != self._available
            if ok:
                self._commits += int(bool(batch))
                self._available = True
            else:
                self._failed_commits += 1
                self._last_error = reason
                self._available = False
                self._retry_at = time.monotonic() + self._retry_s
                # The failed set is older than what came in meanwhile: merge that on top.
                self._events_shed += batch.absorb(self._pending)
                self._pending = batch
                # Inputs queued during the failed commit are not durable either.
                futures = futures + self._waiting
                self._waiting = []
            held = self._pending.count()
        for future in futures:
            future.set_result(ok)
        if not changed:
            return
        if ok:
            log.info("store %s available again; held records written", self._store.path)
        else:
            log.error(
                "store unavailable: %s; holding %d records in memory, retrying every %.1f s",
                reason,
                held,
                self._retry_s,
            )
        self._health(ok, "" if ok else reason)

    def _health(self, available: bool, reason: str) -> None:
        if self._on_health is None:
            return
        try:
            self._on_health(available, reason)
        except Exception:
            log.exception("store writer: health callback failed")

    def _finish(self) -> None:
        with self._cv:
            batch, futures = self._take()
        ok, reason = self._commit(batch)
        with self._cv:
            self._inflight = 0
            if batch and ok:
                self._commits += 1
            elif not ok:
                self._failed_commits += 1
                self._last_error = reason
        if not ok:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(batch.kinds().items()))
            log.error(
                "store %s: %d records could not be written at close and are lost (%s): %s",
                self._store.path,
                batch.count(),
                kinds,
                reason,
            )
        for future in futures:
            future.set_result(ok)
        try:
            self._store.close()
        except Exception:
            log.exception("store writer: closing %s failed", self._store.path)
