"""Refusing a call whose client streams its requests, without losing why.

When a server ends a call while the client's write of its first request is still in flight,
that write fails in the client's gRPC core and grpc.aio reports the call as INTERNAL
"Internal error from Core" in place of the status the server sent (grpc/aio/_call.py,
`_write`): an agent refused by a follower would not learn the leader's address, nor one
refused by the identity check why (seen in 1 of ~20 runs of a follower test under load:
tests/integration/agent/test_follow_leader.py). So a refusal of a client-streaming call
first reads the client's first request, for at most FIRST_REQUEST_S: once the server holds it,
the client's write is done, and the status reaches the client as sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

# A client that opens a stream and writes nothing is refused after this long anyway.
FIRST_REQUEST_S = 1.0


async def after_first_request(requests: AsyncIterator[Any]) -> None:
    """Return once the client's first request has arrived, or it closed its side, or
    FIRST_REQUEST_S passed: then the caller may end the call."""
    with contextlib.suppress(TimeoutError, StopAsyncIteration):
        async with asyncio.timeout(FIRST_REQUEST_S):
            await anext(requests)
