"""The agent's Writes (agent/p4client.py, P4Target.write) against softswitch's server.

A Write is on the wire before the agent's writer encodes the next one.

The writer encodes a chunk while the target applies the previous ones (agent/writer.py,
`_write_stages`), and yields one turn of the loop after starting each Write so that the
request goes out first. Were the request still waiting for the loop (as it did behind finsy's
coroutine), the target would sit idle through every encoding.

Measured on the wire: the agent reaches softswitch's server (in-process) through a TCP relay
whose threads count the bytes the agent sent. Each time the writer starts encoding, the loop
is held (as encoding holds it) until the bytes of the Write started last have passed the
relay; a request that had not gone out cannot pass while the loop is held."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agent.codec import Codec, Encoded
from agent.p4client import UpdateError
from agent.translate import Op, RouteEntry, Update
from agent.writer import Writer
from bench.agent import _next, agent_parts, spine_state
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import control_pb2
from softswitch.server import P4RuntimeService, create_server
from softswitch.switch import Switch

pytestmark = pytest.mark.integration

# How long the loop is held at most for a request to pass the relay (less than a Write's
# deadline, p4client.WRITE_TIMEOUT_S).
HOLD_S = 5.0


class Relay:
    """A TCP relay from a port of its own to `target`, counting the bytes clients send."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = 0  # client -> target, over every connection
        self.moved = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.target)
            except OSError:  # the server is gone (the test is ending)
                client.close()
                continue
            for src, dst, count in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, count), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
                if count:
                    with self.moved:
                        self.sent += len(data)
                        self.moved.notify_all()
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def wait_sent(self, at_least: int, timeout_s: float) -> bool:
        """Block (the calling thread, loop and all) until `at_least` bytes were sent."""
        with self.moved:
            return self.moved.wait_for(lambda: self.sent >= at_least, timeout_s)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
async def relay(free_port: Callable[[], int]) -> AsyncIterator[Relay]:
    port = free_port()
    server = create_server(P4RuntimeService(Switch(1, {})), f"127.0.0.1:{port}")
    await server.start()
    relay = Relay(("127.0.0.1", port))
    try:
        yield relay
    finally:
        relay.close()
        await server.stop(None)


@contextlib.contextmanager
def wire_checks(writer: Writer, relay: Relay) -> Iterator[list[bool]]:
    """For every chunk the writer encodes after a Write was started: whether that Write's
    bytes had passed the relay (waited for with the loop held)."""
    target: Any = writer.target
    codec: Any = writer.codec
    write: Callable[[Encoded], object] = target.write
    encode: Callable[[Any], Encoded] = codec.encode_updates
    expected: list[int] = []  # bytes sent once each started Write is out
    checks: list[bool] = []

    def started(updates: Encoded) -> object:
        expected.append(relay.sent + len(updates.data))
        return write(updates)

    def encoding(updates: Any) -> Encoded:
        if expected and (not checks or checks[-1]):  # after a miss, the rest would only wait
            waited = time.monotonic()
            checks.append(relay.wait_sent(expected[-1], HOLD_S))
            assert time.monotonic() - waited < HOLD_S + 1
        return encode(updates)

    target.write, codec.encode_updates = started, encoding
    try:
        yield checks
    finally:
        target.write, codec.encode_updates = write, encode


async def test_each_write_is_on_the_wire_before_the_next_chunk_is_encoded(relay: Relay) -> None:
    # Members, groups, next hops, then 1,500 routes in 3 chunks written two at a time.
    state = spine_state(groups=8, routes=1500)
    async with agent_parts(f"127.0.0.1:{relay.port}", Codec(load_p4info(DEFAULT_P4INFO))) as agent:
        await agent.writer.synced.wait()
        with wire_checks(agent.writer, relay) as checks:
            await agent.writer.controller_message(
                control_pb2.ControllerMessage(desired_state=state)
            )
            applied = (await asyncio.wait_for(_next(agent.out, "applied"), 30)).applied
    assert all(checks), f"a Write was not on the wire after a turn of the loop: {checks}"
    assert len(checks) >= 5  # groups, next hops and every chunk of routes followed a Write
    assert not applied.errors and applied.updates_written > 1500


async def test_the_updates_a_write_failed_are_answered_by_index(relay: Relay) -> None:
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    async with agent_parts(f"127.0.0.1:{relay.port}", codec) as agent:
        await agent.writer.synced.wait()
        target = agent.writer.target
        here, gone = RouteEntry(10 << 24, 8, 1), RouteEntry(11 << 24, 8, 1)
        assert await target.write(codec.encode_updates([Update(Op.INSERT, here)])) == []
        updates = [Update(Op.MODIFY, here), Update(Op.INSERT, here), Update(Op.DELETE, gone)]
        errors = await target.write(codec.encode_updates(updates))
    assert [(e.index, e.code) for e in errors] == [(1, 6), (2, 5)]  # ALREADY_EXISTS, NOT_FOUND
    assert all(isinstance(e, UpdateError) and "entry" in e.message for e in errors)
