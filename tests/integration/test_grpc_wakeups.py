"""grpc.aio's completion wake-ups (railfabric.grpc_wakeups) on a real server over loopback.

Every stream of a busy server gets a message at once, as the controller's sessions do in a
storm, while each turn of the event loop costs 1 ms of work. Without the drain, the wake-up
socket fills, grpc's poller thread blocks writing to it, and the echoes come back one
completion per turn (1,886 turns for 500 streams here); with it, in a handful of turns. The
figures are turns, not seconds: a slower machine makes the turns longer, not more numerous.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from railfabric.grpc_wakeups import drain_wakeups, keep_one
from tests.loop_turns import TurnCounter

pytestmark = pytest.mark.integration

STREAMS = 500
TURN_S = 0.001
METHOD = "/railfabric.test.Wakeups/Echo"


async def _echo(requests: AsyncIterator[bytes], _context: object) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def _turns_for_one_echo_each(drained: bool) -> int:
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(_echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("railfabric.test.Wakeups", {"Echo": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    loop = asyncio.get_running_loop()
    try:
        if drained:
            assert drain_wakeups(loop), "grpc.aio's completion reader was not found"
            assert drain_wakeups(loop), "a second call finds its own wrapper"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = channel.stream_stream(METHOD, None, None)  # bytes as they are
            calls = [method(None) for _ in range(STREAMS)]
            for call in calls:  # every stream accepted and echoing before the burst
                await call.write(b"up")
                assert await call.read() == b"up"
            turns = TurnCounter(busy_s=TURN_S)

            async def echo_once(call: grpc.aio.StreamStreamCall) -> bytes:  # type: ignore[type-arg]
                await call.write(b"burst")
                echo = await call.read()
                assert isinstance(echo, bytes)
                return echo

            try:
                echoes = await asyncio.wait_for(
                    asyncio.gather(*(echo_once(call) for call in calls)), 120
                )
            finally:
                turns.stop()
            assert echoes == [b"burst"] * STREAMS
            for call in calls:
                await call.done_writing()
            return turns.n
    finally:
        await server.stop(None)


async def test_without_the_drain_completions_come_one_per_turn() -> None:
    """The behaviour the drain is for, as grpcio has it (1.85). If this fails, grpc.aio no
    longer stalls this way and railfabric.grpc_wakeups can go."""
    turns = await _turns_for_one_echo_each(drained=False)
    assert turns > STREAMS, f"{STREAMS} echoes took only {turns} turns without the drain"


async def test_with_the_drain_a_burst_on_every_stream_takes_a_few_turns() -> None:
    turns = await _turns_for_one_echo_each(drained=True)
    assert turns < STREAMS // 10, f"{STREAMS} echoes took {turns} turns with the drain"


async def test_nothing_to_wrap_before_grpc_uses_the_loop() -> None:
    # A fresh loop (pytest-asyncio's, per test) that no grpc.aio object has used.
    assert not drain_wakeups(asyncio.get_running_loop())


def test_keep_one_leaves_the_last_byte_for_grpcs_reader() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        assert keep_one(ours) == 0  # nothing pending: nothing read, no error
        theirs.sendall(b"\x01" * 300)
        time.sleep(0.05)
        assert keep_one(ours) == 299
        assert ours.recv(16) == b"\x01"  # what grpc's reader reads next
        theirs.sendall(b"\x01")
        assert keep_one(ours) == 0
