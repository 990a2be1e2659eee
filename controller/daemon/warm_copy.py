"""A follower's warm copy of the leader's state, for the read-only admin API.

A follower reads the etcd store once (EtcdStore.load) and then watches its log
(etcd_store.follow), replaying each batch the leader commits into its own `Restored`. From
that it builds a decision core the way a restarted controller does (`DecisionCore.start`: the
routing log replayed over the intent, so desired states, group ids included, are the leader's),
off the event loop and at most once per `rebuild_s` (or twice the time the last build took)
while batches keep coming. Each build is
handed to `on_ready` with the etcd revision it reflects; the admin API of a follower answers from
it what the store holds (topology, links, desired states, events, alarms, drains, path
prediction: controller.daemon.leader_gate.FOLLOWER_READS). What only the leader observes (agent
sessions, counters, LLDP, tables) is not in the store: those calls go to the leader.

A watch that ends (etcd unreachable, its history compacted) starts over with a new load.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable

from controller.core.machine import DecisionCore
from controller.core.records import RESTORED_EVENTS, Restored, replay
from controller.daemon.etcd_channel import EtcdEndpoints
from controller.daemon.etcd_store import EtcdStore, follow
from controller.daemon.runner import now
from controller.daemon.store import StoreError

log = logging.getLogger("railfabric.controller.follower")

# A new copy at most this often while the leader keeps committing.
REBUILD_S = 1.0
# After a failed load or a watch that ended.
RETRY_S = 1.0


class WarmCopy:
    def __init__(
        self,
        endpoints: EtcdEndpoints,
        make_core: Callable[[], DecisionCore],
        on_ready: Callable[[DecisionCore, int], None],
        *,
        rebuild_s: float = REBUILD_S,
    ) -> None:
        self.endpoints = endpoints
        self._make_core = make_core
        self._on_ready = on_ready
        self.rebuild_s = rebuild_s
        self._restored = Restored()
        self._revision = 0
        self._dirty = asyncio.Event()
        # Builds handed over, and the revision of the last one.
        self.builds = 0
        self.revision = 0

    async def run(self) -> None:
        """Owned task (cancelled when this replica leads)."""
        builder = asyncio.create_task(self._build_loop(), name="warm-copy-build")
        try:
            while True:
                try:
                    await self._load_and_follow()
                except StoreError as err:
                    log.warning("warm copy: %s; reading the store again", err)
                await asyncio.sleep(RETRY_S)
        finally:
            builder.cancel()

    async def _load_and_follow(self) -> None:
        store = EtcdStore.open(self.endpoints)
        try:
            self._restored = await asyncio.to_thread(store.load)
            self._revision = store.revision
        finally:
            store.close()
        self._dirty.set()
        async for revision, records, snapshot in follow(self.endpoints, self._revision):
            if snapshot:
                self._restored = Restored()
            replay(self._restored, records, RESTORED_EVENTS)
            self._revision = revision
            self._dirty.set()

    async def _build_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            restored, revision = copy.deepcopy(self._restored), self._revision
            started = time.monotonic()
            core = await asyncio.to_thread(self._build, restored)
            self.builds += 1
            self.revision = revision
            self._on_ready(core, revision)
            took = time.monotonic() - started
            log.debug("warm copy at etcd revision %d built in %.2f s", revision, took)
            # On a 100k-GPU fabric a build takes seconds: a third of a core at most.
            await asyncio.sleep(max(self.rebuild_s, 2 * took))

    def _build(self, restored: Restored) -> DecisionCore:
        core = self._make_core()
        core.start(restored, now())  # its effects are the leader's business: dropped
        return core
