"""A burst of calls against a server whose event loop is busy is queued, not cancelled.

gRPC core queues a call that arrives before the server has asked for the next one (a grpc.aio
server asks from its event loop) and, by default, cancels queued calls at random beyond 1,000
of them and all of them beyond 3,000 (clients see CANCELLED or INTERNAL "Internal error from
Core"). That is the controller of a 100k-GPU fabric when its 4,672 agents open their sessions
at once while it computes (bench.swarm on ref-100k: 667 sessions reset that way). With gRPC's
defaults this test's burst lost 895 of its 3,200 calls; railfabric.grpcopts sizes the queue
above the largest fabric, and the test fails if it does not.

The server is a separate process (its event loop blocked in the way the controller's is,
without blocking the clients'), speaking real gRPC over loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from railfabric.grpcopts import PENDING_CALLS_SOFT, channel_options

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# Above gRPC's default queue (3,000 sheds every call), below railfabric's.
CALLS = 3_200
CHANNELS = 32
BLOCK_S = 4.0
ANSWERED_WITHIN_S = 120.0
METHOD = "/railfabric.test.Backlog/Echo"

_SERVER = f"""
import asyncio, sys, time
import grpc
from railfabric.grpcopts import server_options

async def echo(requests, context):
    async for request in requests:
        yield request
        return

async def main():
    server = grpc.aio.server(options=server_options())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "railfabric.test.Backlog", {{"Echo": grpc.stream_stream_rpc_method_handler(echo)}}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    time.sleep({BLOCK_S})  # the event loop is busy: no call is asked for meanwhile
    print("unblocked", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


def test_calls_arriving_while_the_event_loop_is_busy_are_all_answered() -> None:
    assert CALLS < PENDING_CALLS_SOFT
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        outcomes = asyncio.run(_burst(port, server))
    finally:
        server.kill()
        server.wait()
    failed = [o for o in outcomes if o != "ok"]
    print(f"{len(outcomes)} calls over {CHANNELS} channels: {len(failed)} failed")
    assert len(outcomes) == CALLS
    assert not failed, f"{len(failed)} of {CALLS} calls failed, e.g. {failed[:3]}"


async def _burst(port: int, server: subprocess.Popen[str]) -> list[str]:
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=channel_options())
        for _ in range(CHANNELS)
    ]
    try:
        for channel in channels:
            await asyncio.wait_for(channel.channel_ready(), 30)
        assert server.stdin is not None
        server.stdin.write("block\n")
        server.stdin.flush()
        await asyncio.sleep(0.5)  # the server's loop is blocked from here for BLOCK_S

        async def call(i: int) -> str:
            echo = channels[i % CHANNELS].stream_stream(METHOD, None, None)
            stream = echo(None)
            try:
                await stream.write(b"x")
                async for reply in stream:
                    return "ok" if reply == b"x" else f"answered {reply!r}"
                return "no answer"
            except grpc.aio.AioRpcError as err:
                return f"{err.code().name}: {err.details()}"
            except asyncio.InvalidStateError:
                return f"{(await stream.code()).name}: {await stream.details()}"

        return list(
            await asyncio.wait_for(
                asyncio.gather(*(call(i) for i in range(CALLS))), ANSWERED_WITHIN_S
            )
        )
    finally:
        for channel in channels:
            await channel.close(None)
