"""railfabric's gRPC servers send TLS records of at most grpcopts.TLS_FRAME_BYTES.

gRPC's TLS frame protector keeps a buffer of its largest record for the life of each
connection (16 KiB by default), so a controller with a session per switch pays it per switch.
The test relays a real TLS gRPC call over loopback and reads the record headers the server
sends: a 60 KB answer (a large switch's snapshot) must come in records no larger than the
option allows, so the test fails if the option is dropped or gRPC stops honouring it."""

from __future__ import annotations

import asyncio
import os
import struct

import grpc
import pytest

from railfabric import tls
from railfabric.grpcopts import TLS_FRAME_BYTES, server_options
from tests import pki

pytestmark = pytest.mark.integration

ANSWER_BYTES = 60_000
SERVICE = "railfabric.test.Records"


async def _answer(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return os.urandom(ANSWER_BYTES)


async def _server() -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=server_options())
    handler = grpc.unary_unary_rpc_method_handler(_answer)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Get": handler}),)
    )
    port = tls.add_port(server, "127.0.0.1:0", tls.ServerTls(pki.controller()))
    await server.start()
    return server, port


async def _relay(port: int, records: list[int]) -> asyncio.Server:
    """A TCP relay to `port` that appends the length of every TLS record the server sends."""

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, parse: bool) -> None:
        pending = b""
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
            if parse:
                pending += data
                while len(pending) >= 5:
                    (length,) = struct.unpack_from("!H", pending, 3)
                    if len(pending) < 5 + length:
                        break
                    records.append(length)
                    pending = pending[5 + length :]
        dst.close()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(
            pipe(reader, up_writer, False), pipe(up_reader, writer, True), return_exceptions=True
        )

    return await asyncio.start_server(client, "127.0.0.1", 0)


async def test_the_servers_tls_records_are_at_most_the_frame_size() -> None:
    server, port = await _server()
    records: list[int] = []
    relay = await _relay(port, records)
    relay_port = relay.sockets[0].getsockname()[1]
    try:
        async with pki.channel(f"127.0.0.1:{relay_port}", pki.switch("tor-1")) as channel:
            call = channel.unary_unary(f"/{SERVICE}/Get", None, None)
            answer = await call(b"", timeout=10)
    finally:
        relay.close()
        await server.stop(None)
    assert len(answer) == ANSWER_BYTES
    carried = sum(records)
    print(f"{len(records)} records from the server, {carried} bytes, largest {max(records)}")
    assert carried > ANSWER_BYTES  # the answer went through the relay, parsed
    # gRPC's frame size counts the record's own overhead (header, type byte, AEAD tag).
    assert max(records) <= TLS_FRAME_BYTES
    assert len(records) >= ANSWER_BYTES // TLS_FRAME_BYTES
