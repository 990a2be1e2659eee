"""The daemons' use of Python's cyclic garbage collector."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def held_off() -> Iterator[None]:
    """No automatic collection inside: for start-up building the daemon's long-lived state,
    which then leaves the scans (freeze_start_up). What it allocates lives on, so the
    collections it set off found almost nothing: in the controller at 100k GPUs, 3 full and
    ~3,500 young ones during `DecisionCore.start`, 0.5 s of its 4.5 s. Cyclic garbage made
    meanwhile (by anything in the process) waits for the next collection: freeze_start_up's
    is the one that follows. Enabled again on the way out only if it was on the way in."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_start_up() -> None:
    """Take what start-up built out of the cyclic collector's full scans, for good: modules,
    protobuf descriptors, gRPC, and the daemon's own long-lived state (the controller's plan
    and every switch's desired state: 1.26 M objects at 100k GPUs; an agent's P4Info and codec,
    ~110,000). Unfrozen, every full collection walks them all while the daemon waits: 315 ms
    in the controller at 100k GPUs, 40-55 ms in an agent, 15-25 ms in a softswitch. Full
    collections are set off by allocation, so a cable cut's burst sets them off in every
    daemon of a host at once, inside that cut's failover (bench.telemetry). Frozen, a full
    collection scans only what was allocated since. The garbage start-up left is collected
    first, so nothing unreachable is kept forever."""
    gc.collect()
    gc.freeze()


def freeze_rebuilt() -> None:
    """Take what a rebuild of the daemon's long-lived state just made out of full scans, as
    freeze_start_up does for start-up, but without a collection first (it would be the very
    pause this avoids). A controller recomputing routing from scratch on ref-100k (a cold
    start's discovered links, a compaction) makes ~1 M new objects that live until the next
    rebuild; unfrozen, full collections then walked them every few seconds for 750-900 ms
    each, collecting nothing, several inside cable cuts (bench.swarm, gc callbacks). The young
    generations are collected first; what older garbage there is (full collections here find
    0-5 objects) is kept, the same trade as at start-up."""
    gc.collect(1)
    gc.freeze()


# Full collections on a clock (full_collections): every this often, once the daemon has had no
# input for QUIET_S (waiting at most QUIET_WAIT_S for that).
FULL_EVERY_S = 60.0
QUIET_S = 0.1
QUIET_WAIT_S = 5.0
# Young collections between two automatic full ones: in effect never, while the task runs.
_NO_AUTOMATIC_FULL = 1_000_000_000


async def full_collections(
    last_input: Callable[[], float],
    *,
    every_s: float = FULL_EVERY_S,
    quiet_s: float = QUIET_S,
    quiet_wait_s: float = QUIET_WAIT_S,
    collect: Callable[[], object] = gc.collect,
) -> None:
    """Run the cyclic collector's full collections on a clock, at a quiet moment, instead of
    when allocation sets them off. Allocation is what a cable cut's burst does: with 4,672
    sessions the controller's full collections came every 3-5 s during cuts, 110-250 ms each,
    collecting 0-5 objects, and so fell inside the cuts (bench.swarm ref-100k, gc callbacks).
    `last_input`: time.monotonic() of the daemon's last input. Until cancelled; the
    collector's thresholds are restored then. Cyclic garbage waits for the next full
    collection, `every_s` plus `quiet_wait_s` at most (a full collection finds almost none
    here)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], _NO_AUTOMATIC_FULL)
    try:
        while True:
            await asyncio.sleep(every_s)
            give_up = time.monotonic() + quiet_wait_s
            # Until quiet_s after the last input: a timestamp, read again after each sleep (an
            # event set by every input would cost every input).
            while (left := last_input() + quiet_s - time.monotonic()) > 0:
                if (patience := give_up - time.monotonic()) <= 0:
                    break
                await asyncio.sleep(min(left, patience))
            collect()
    finally:
        gc.set_threshold(*thresholds)
