"""Leader election among controller replicas sharing an etcd store (`--store etcd://...`).

One key, `<prefix>/leader`, holds the leader's advertised address and is attached to the
leader's lease (`--lease-ttl-s`, 2 s by default). A replica campaigns with one etcd
transaction: "if the key does not exist, create it with my lease"; the key's create revision
is the leader's **term**, which grows with every election (etcd revisions only grow). The store's
writes are conditional on that revision (controller.daemon.etcd_store fences them) and every
message to an agent carries the term, so a leader that lost its lease without noticing (paused,
partitioned) can neither overwrite the store nor change a switch.

The leader keeps its lease alive every third of the TTL, from a thread of its own (the event
loop of a 100k-GPU fabric is busy for seconds at a time). It counts its lease from the moment it
*sent* the last refresh that etcd answered: etcd's own expiry is later than that, so the leader
knows when another replica could win. From then on it pushes nothing (`on_hold`), and keeps
asking: etcd electing a leader of its own (one member died) answers nobody for a second or two,
and expires no lease meanwhile (a new etcd leader extends every lease), so an answer with the
lease still alive means nobody else won and the leader goes on (`on_resume`). An answer that the
lease is gone, or no answer within HOLD_GRACE_S more, and it has lost: the daemon drops every
push and exits, like Kubernetes' controller-manager on a lost lease; its supervisor restarts it
as a follower. The grace is what a leader cut off from etcd costs its agents before they move
to the new leader.

Followers watch the key: when it disappears (lease expired or revoked at a clean stop) they
campaign again; meanwhile they know the leader's address and send agents there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from aetcd import rpc

from controller.daemon.etcd_channel import EtcdEndpoints

log = logging.getLogger("railfabric.controller.election")

DEFAULT_TTL_S = 2
# Each RPC of the election waits at most this long: an etcd without quorum does not answer.
RPC_TIMEOUT_S = 1.0
# Deposed this long before the lease could expire at etcd: covers the scheduling of the
# step-down itself.
SAFETY_S = 0.1
# After its lease could have expired, a leader that pushes nothing waits this long more for etcd
# to answer a refresh: etcd's own election (randomized between its election timeout, 1 s by
# default, and twice that; 4.5 s was seen on a loaded 2-core CI machine) with time to spare.
HOLD_GRACE_S = 5.0
# A follower re-checks the key at least this often, whatever its watch says.
RECHECK_S = 2.0
THREAD_NAME = "railfabric-lease"


@dataclass(frozen=True, slots=True)
class Leader:
    address: str
    term: int


class LeadershipLost(Exception):
    """This replica is no longer the leader; the message says why."""


class Election:
    """Campaign, then hold, the leadership of `endpoints.prefix`. Use as an async context
    manager (it owns a channel to etcd)."""

    def __init__(
        self,
        endpoints: EtcdEndpoints,
        address: str,
        ttl_s: int = DEFAULT_TTL_S,
        *,
        on_leader: Callable[[Leader | None], None] = lambda _l: None,
        rpc_timeout_s: float = RPC_TIMEOUT_S,
    ) -> None:
        if ttl_s < 1:
            raise ValueError(f"lease TTL {ttl_s} s: etcd leases count whole seconds, >= 1")
        self.endpoints = endpoints
        self.key = endpoints.key("leader")
        self.address = address
        self.ttl_s = ttl_s
        self.rpc_timeout_s = rpc_timeout_s
        # The leader as last seen (this replica once it won), for redirects; None: unknown.
        self.leader: Leader | None = None
        self._on_leader = on_leader
        self._lease = 0
        # When the grant of the lease held was asked for (monotonic s).
        self._granted_at = 0.0
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> Election:
        self._channel = self.endpoints.aio_channel()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    def _stubs(self) -> tuple[Any, Any, Any]:
        if self._channel is None:
            raise RuntimeError("Election used outside its `async with`")
        return rpc.KVStub(self._channel), rpc.LeaseStub(self._channel), rpc.WatchStub(self._channel)

    def _seen(self, leader: Leader | None) -> None:
        if leader != self.leader:
            self.leader = leader
            self._on_leader(leader)

    async def campaign(self) -> Leader:
        """Return once this replica is the leader. etcd being unreachable or without quorum
        only delays it (said in the log, retried)."""
        kv, lease_stub, _ = self._stubs()
        said = ""
        while True:
            try:
                # Counted from before the grant: the lease cannot expire earlier at etcd.
                sent = time.monotonic()
                granted = await lease_stub.LeaseGrant(
                    rpc.LeaseGrantRequest(TTL=self.ttl_s), timeout=self.rpc_timeout_s
                )
                lease = int(granted.ID)
                txn = rpc.TxnRequest(
                    compare=[
                        rpc.Compare(
                            key=self.key,
                            result=rpc.Compare.EQUAL,
                            target=rpc.Compare.CREATE,
                            create_revision=0,
                        )
                    ],
                    success=[
                        rpc.RequestOp(
                            request_put=rpc.PutRequest(
                                key=self.key, value=self.address.encode(), lease=lease
                            )
                        )
                    ],
                    failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=self.key))],
                )
                answer = await kv.Txn(txn, timeout=self.rpc_timeout_s)
                if answer.succeeded:
                    self._lease = lease
                    self._granted_at = sent
                    won = Leader(self.address, int(answer.header.revision))
                    self._seen(won)
                    log.info("leader of %s (term %d)", self.endpoints, won.term)
                    return won
                # Someone else leads: this lease is not needed.
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await lease_stub.LeaseRevoke(
                        rpc.LeaseRevokeRequest(ID=lease), timeout=self.rpc_timeout_s
                    )
                kvs = answer.responses[0].response_range.kvs
                if not kvs:
                    continue  # gone between the compare and the read: try again
                current = Leader(kvs[0].value.decode(errors="replace"), int(kvs[0].create_revision))
                self._seen(current)
                if said != current.address:
                    log.info(
                        "follower: the leader of %s is %s (term %d)",
                        self.endpoints,
                        current.address,
                        current.term,
                    )
                    said = current.address
                await self._until_gone(current, int(answer.header.revision))
            except grpc.aio.AioRpcError as err:
                self._seen(None)
                why = f"{err.code().name}: {err.details()}"
                if said != why:
                    log.warning("etcd %s: %s; campaigning again", self.endpoints, why)
                    said = why
                await asyncio.sleep(min(1.0, self.ttl_s / 4))

    async def _until_gone(self, current: Leader, revision: int) -> None:
        """Wait until the leader key changes after `revision` (deleted, or a new leader), or
        RECHECK_S passes."""
        _, _, watch = self._stubs()
        call = watch.Watch()
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(key=self.key, start_revision=revision + 1)
                )
            )
            async with asyncio.timeout(RECHECK_S):
                while True:
                    answer = await call.read()
                    # Not a WatchResponse: grpc.aio.EOF, the stream ended.
                    if not hasattr(answer, "events") or answer.events or answer.canceled:
                        return
        except TimeoutError:
            return
        finally:
            call.cancel()

    def keep(
        self,
        on_lost: Callable[[str], None],
        on_hold: Callable[[str], None] = lambda _why: None,
        on_resume: Callable[[], None] = lambda: None,
        *,
        grace_s: float = HOLD_GRACE_S,
    ) -> LeaseKeeper:
        """Keep the lease alive from a thread of its own (the event loop of a large fabric is
        busy for seconds at a time: that must not cost the leadership). Called from that
        thread: `on_hold(why)` when the lease could have expired unseen (push nothing),
        `on_resume()` when etcd answered that it had not, `on_lost(why)` once, when leadership
        ended (nothing answered within `grace_s` more, or the lease is gone)."""
        keeper = LeaseKeeper(self, on_lost, on_hold, on_resume, grace_s)
        keeper.start()
        return keeper

    async def resign(self) -> None:
        """Give the leadership up now (a clean stop): the lease and the key go, and a follower
        takes over without waiting for the TTL."""
        if not self._lease:
            return
        _, lease_stub, _ = self._stubs()
        try:
            await lease_stub.LeaseRevoke(
                rpc.LeaseRevokeRequest(ID=self._lease), timeout=self.rpc_timeout_s
            )
            log.info("resigned the leadership of %s", self.endpoints)
        except grpc.aio.AioRpcError as err:
            log.warning(
                "resigning: etcd %s: %s: %s (the lease expires by itself)",
                self.endpoints,
                err.code().name,
                err.details(),
            )
        self._lease = 0


class LeaseKeeper:
    """The leader's lease refreshes, on a thread with a blocking channel of its own."""

    def __init__(
        self,
        election: Election,
        on_lost: Callable[[str], None],
        on_hold: Callable[[str], None],
        on_resume: Callable[[], None],
        grace_s: float,
    ) -> None:
        self._election = election
        self._on_lost = on_lost
        self._on_hold = on_hold
        self._on_resume = on_resume
        self._grace_s = grace_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.refreshes = 0
        # Times the lease was overdue and pushes held, and times etcd answered in the grace.
        self.holds = 0
        self.resumes = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=self._election.rpc_timeout_s + 1)

    def _run(self) -> None:
        try:
            why = self._hold()
        except Exception as err:  # a bug of ours: the leadership cannot be vouched for
            log.exception("lease keeper failed")
            why = f"the lease keeper failed: {err!r}"
        if why is not None:
            self._on_lost(why)

    def _hold(self) -> str | None:
        """Why leadership ended, or None when stopped while holding it."""
        e = self._election
        lease = e._lease
        every = e.ttl_s / 3
        # Until `deadline` no other replica can win; until `give_up` this one may still hear
        # that the lease lives (pushes held meanwhile).
        deadline = e._granted_at + e.ttl_s - SAFETY_S
        overdue_since: float | None = None
        channel = e.endpoints.channel()
        stub = rpc.LeaseStub(channel)
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                give_up = deadline + self._grace_s
                if now >= give_up:
                    return (
                        f"lease {lease:x} not refreshed within its {e.ttl_s} s TTL and "
                        f"{self._grace_s:g} s more"
                    )
                if now >= deadline and overdue_since is None:
                    overdue_since = now
                    self.holds += 1
                    log.warning(
                        "etcd %s: lease %x not refreshed within its %d s TTL: pushing nothing "
                        "until etcd answers (%g s more at most)",
                        e.endpoints,
                        lease,
                        e.ttl_s,
                        self._grace_s,
                    )
                    self._on_hold("lease overdue")
                until = deadline if overdue_since is None else give_up
                sent = now
                try:
                    answers = stub.LeaseKeepAlive(
                        iter([rpc.LeaseKeepAliveRequest(ID=lease)]),
                        timeout=min(until - now, e.rpc_timeout_s),
                    )
                    answer = next(answers, None)
                    if answer is None:
                        raise RuntimeError("etcd closed the keep-alive stream")
                    if int(answer.TTL) <= 0:
                        return f"lease {lease:x} expired at etcd"
                    deadline = sent + e.ttl_s - SAFETY_S
                    self.refreshes += 1
                    if overdue_since is not None:
                        # Alive at etcd: the leader key (on this lease) was never deleted, so
                        # nobody else won and the term is unchanged.
                        log.warning(
                            "etcd %s: lease %x alive after %.2f s overdue: leading on",
                            e.endpoints,
                            lease,
                            time.monotonic() - overdue_since,
                        )
                        overdue_since = None
                        self.resumes += 1
                        self._on_resume()
                    wait = every - (time.monotonic() - sent)
                except (grpc.RpcError, RuntimeError) as err:
                    said = (
                        f"{err.code().name}: {err.details()}"
                        if isinstance(err, grpc.Call)
                        else str(err)
                    )
                    log.warning("etcd %s: lease refresh failed (%s)", e.endpoints, said)
                    wait = 0.1
                until = deadline if overdue_since is None else deadline + self._grace_s
                self._stopping.wait(max(0.0, min(wait, until - time.monotonic())))
            return None
        finally:
            channel.close()
