"""Only the leader serves the fabric: a follower sends callers to it.

While this replica is not the leader, every call of the fabric's services ends at once with
UNAVAILABLE, the leader's address in the details and in the trailing metadata
(`railfabric.redirect.LEADER_KEY`): an agent's session moves there without trying every
controller it knows. Health and reflection answer on every replica (health says SERVING for
the fabric's services on the leader only).

A call that says the leader this replica knows was unreachable for it
(`railfabric.redirect.UNREACHABLE_KEY`: the leader died, and its lease has not expired yet) is
held until the leadership changes, at most `hold_s`, and so is any call while no leader is
known: the agent learns the new leader the moment it is elected, with one call, instead of
retrying through the election.

Once its warm copy of the store is built (controller.daemon.warm_copy), a follower answers the
reads of FOLLOWER_READS itself: what the store holds, as of the etcd revision of that copy,
which the answer's trailing metadata gives (`railfabric.redirect.FOLLOWER_REVISION_KEY`, with
the leader's address).
Everything else (what only the leader observes, and every change) goes to the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import grpc
from google.protobuf import descriptor_pool

from controller.daemon.election import Leader
from railfabric.redirect import FOLLOWER_REVISION_KEY, LEADER_KEY, unreachable_of
from railfabric.refusal import after_first_request
from railfabric.v1 import admin_pb2

# How long a call naming an unreachable leader is held, by default: a lease of 2 s and 1 s.
HOLD_S = 3.0
_ADMIN = f"/{admin_pb2.DESCRIPTOR.services_by_name['FabricAdmin'].full_name}/"
# What a follower answers from its warm copy: the store's contents and what follows from them.
FOLLOWER_READS = frozenset(
    _ADMIN + m
    for m in (
        "GetTopology",
        "ListLinks",
        "GetSwitchState",
        "ListEvents",
        "ListAlarms",
        "PredictPath",
        "ListDrains",
    )
)


class LeaderGate(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Redirects calls of `services` (full names) until `lead()`."""

    def __init__(self, services: Collection[str], hold_s: float = HOLD_S) -> None:
        # "/package.Service/Method" -> (request streaming, response streaming): the kind of
        # handler a refusal must be, known without asking the interceptors after this one (the
        # start-up gate would hold the call until this replica leads).
        pool = descriptor_pool.Default()
        self._kinds = {
            f"/{name}/{m.name}": (m.client_streaming, m.server_streaming)
            for name in services
            for m in pool.FindServiceByName(name).methods
        }
        self.leading = False
        # The etcd revision of the follower's warm copy the admin API reads; 0: none yet.
        self.warm_revision = 0
        self.leader: Leader | None = None
        self.redirected = 0
        self.held = 0
        self.served = 0
        self.hold_s = hold_s
        # Set (and replaced) at every change of the leadership: wakes held calls.
        self._changed = asyncio.Event()

    def lead(self) -> None:
        self.leading = True
        self._changed.set()
        self._changed = asyncio.Event()

    def follow(self, leader: Leader | None) -> None:
        if leader != self.leader:
            self.leader = leader
            self._changed.set()
            self._changed = asyncio.Event()

    async def _until_changed(self, unreachable: frozenset[str]) -> None:
        """Hold while no leader is known, or the known one is one the caller could not
        reach."""
        changed = self._changed
        leader = self.leader
        if self.leading or (leader is not None and leader.address not in unreachable):
            return
        self.held += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), self.hold_s)

    def _marked(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        """`handler` (a unary read) answering with the warm copy's revision and the leader in
        its trailing metadata: the caller knows whose answer, and how current, it got."""
        inner: Any = handler.unary_unary  # a coroutine function on grpc.aio
        if inner is None:
            return handler
        revision, leader = self.warm_revision, self.leader

        async def marked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            context.set_trailing_metadata(
                (
                    (FOLLOWER_REVISION_KEY, str(revision)),
                    *(((LEADER_KEY, leader.address),) if leader is not None else ()),
                )
            )
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            marked,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _why(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        leader = self.leader
        if leader is None:
            return "this controller is a follower and no leader is elected yet; retry", ()
        return (
            f"this controller is a follower; the leader is {leader.address} (term {leader.term})",
            ((LEADER_KEY, leader.address),),
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        method = handler_call_details.method or ""
        kind = self._kinds.get(method)
        if (
            kind is not None
            and not self.leading
            and self.warm_revision
            and method in FOLLOWER_READS
        ):
            self.served += 1
            return self._marked(await continuation(handler_call_details))
        if kind is not None and not self.leading:
            await self._until_changed(unreachable_of(handler_call_details.invocation_metadata))
        if self.leading or kind is None:
            return await continuation(handler_call_details)
        self.redirected += 1
        details, metadata = self._why()

        requests, responses = kind

        async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if requests:  # the client's write of it must not turn the refusal into INTERNAL
                await after_first_request(request)
            await context.abort(grpc.StatusCode.UNAVAILABLE, details, metadata)

        async def refuse_streaming(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            await refuse(request, context)
            yield  # an async generator, as a streaming handler must be

        if requests and responses:
            return grpc.stream_stream_rpc_method_handler(refuse_streaming)
        if responses:
            return grpc.unary_stream_rpc_method_handler(refuse_streaming)
        if requests:
            return grpc.stream_unary_rpc_method_handler(refuse)
        return grpc.unary_unary_rpc_method_handler(refuse)
