"""Serving while the desired states are computed.

On a 100k-GPU fabric the decision core needs seconds to compute and digest every switch's
desired state. The controller listens and says SERVING first, computes them off the event loop
(`DecisionCore.start` in a thread), and holds each call of the fabric's own services until
they are ready: an agent's session or a railctl call made meanwhile waits, then runs on the
complete state. Health and reflection answer at once.

When the gate opens, thousands of agents' sessions may be waiting at it: the calls of the
`paced` services (the agents' sessions) then go on a few per turn of the event loop
(controller.daemon.turns), so that an operator's call is not queued behind all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection

import grpc

from controller.daemon.turns import Turns


class StartupGate(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Holds calls of `services` (full names) until `open()`, then lets the held calls of
    `paced` services go a few per turn of the event loop. A held call is bounded by its own
    deadline (gRPC ends it with DEADLINE_EXCEEDED) and by the client going away."""

    def __init__(
        self,
        services: Collection[str],
        holds: Callable[[], bool] = lambda: True,
        *,
        paced: Collection[str] = (),
    ) -> None:
        self._services = frozenset(services)
        self._paced = frozenset(paced)
        self._turns = Turns()
        # Whether calls are this replica's to hold (a follower's reads are served from its
        # warm copy, not from the state this gate waits for).
        self._holds = holds
        self._ready = asyncio.Event()
        self.held = 0  # calls that waited, for the start-up log line

    def open(self) -> None:
        self._ready.set()

    @property
    def is_open(self) -> bool:
        return self._ready.is_set()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        service = _service(handler_call_details.method)
        if not self._ready.is_set() and service in self._services and self._holds():
            self.held += 1
            await self._ready.wait()
            if service in self._paced:
                await self._turns.wait()
        return await continuation(handler_call_details)


def _service(method: str | None) -> str:
    # "/package.Service/Method"
    return "" if method is None else method.lstrip("/").split("/", 1)[0]
