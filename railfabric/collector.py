"""The daemons' use of Python's cyclic garbage collector."""

from __future__ import annotations

import gc


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
