"""A client whose first write is issued after the server's refusal has arrived, but before its
event loop has seen it: the case railfabric.refusal is for. The server runs on its own event
loop in a thread, so the client's loop can be held while the server refuses."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc

from railfabric.v1 import control_pb2, control_pb2_grpc

# Long enough for a refusal over loopback to arrive on a loaded machine.
HOLD_S = 0.5


class NotReached(control_pb2_grpc.FabricControlServicer):
    """A session servicer behind the refusal under test: reaching it is the failure."""

    async def Session(
        self,
        request_iterator: AsyncIterator[control_pb2.AgentMessage],
        context: grpc.aio.ServicerContext[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    ) -> AsyncIterator[control_pb2.ControllerMessage]:
        await context.abort(grpc.StatusCode.INTERNAL, "the call was not refused")
        yield control_pb2.ControllerMessage()  # an async generator, as a stream handler is


@contextlib.contextmanager
def server_in_thread(start: Callable[[], Awaitable[grpc.aio.Server]]) -> Iterator[None]:
    """The server `start` makes, serving on its own event loop in a thread until the end."""
    up, stop = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def serve() -> None:
        try:
            server = await start()
        except BaseException as err:
            failed.append(err)
            up.set()
            raise
        up.set()
        await asyncio.to_thread(stop.wait)
        await server.stop(grace=None)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="refusing-server")
    thread.start()
    try:
        assert up.wait(10) and not failed, f"the server did not start: {failed}"
        yield
    finally:
        stop.set()
        thread.join(10)


async def first_write_after_refusal(
    call: grpc.aio.StreamStreamCall[Any, Any], request: Any
) -> grpc.aio.AioRpcError:
    """What the client sees when it writes `request` (then reads) after the call's headers went
    out and the server had time to refuse, the client's loop held meanwhile."""
    await call.wait_for_connection()
    time.sleep(HOLD_S)  # noqa: ASYNC251  (holds this loop: the refusal arrives meanwhile)
    try:
        await call.write(request)
        await call.read()
    except grpc.aio.AioRpcError as err:
        return err
    raise AssertionError("the call was not refused")
