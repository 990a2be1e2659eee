"""softswitch over mutual TLS: its own switch identity (its agent) programs it and arbitrates,
operators and readers only read, another switch's certificate is refused, a client without a
certificate of the fabric's CA cannot connect at all, the primary is bound to its connection
under TLS too, and SIGHUP puts a rotated certificate in use. The server runs in-process (as in
the conformance tests) except for the reload, which needs the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import finsy as fy
import grpc
import pytest
from cryptography import x509
from finsy.proto import U128, p4r, p4r_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agent.codec import Codec
from agent.p4client import P4Target
from agent.translate import Op, RouteEntry, Update
from railfabric import pki, tls
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.tls import Identity, Kind
from softswitch.server import P4RuntimeService, create_server
from softswitch.switch import Switch
from tests import pki as test_pki
from tests.conftest import Processes
from tests.p4_entries import route

pytestmark = pytest.mark.integration

DEVICE_ID = 1
SWITCH = "tor-tls-1"
BIN = Path(sys.executable).parent


@pytest.fixture
async def address(free_port: Callable[[], int]) -> AsyncIterator[str]:
    """A softswitch serving mutual TLS as switch SWITCH; its address."""
    addr = f"127.0.0.1:{free_port()}"
    server = create_server(
        P4RuntimeService(Switch(DEVICE_ID, {1: "port1"})),
        addr,
        tls.ServerTls(test_pki.switch(SWITCH)),
    )
    await server.start()
    try:
        yield addr
    finally:
        await server.stop(None)


def _own(files: tls.TlsFiles | None, address: str) -> grpc.aio.Channel:
    """A channel with a connection of its own (no sharing with the test's other channels)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return tls.aio_channel(address, files, options)


def _credentials(files: tls.TlsFiles) -> fy.GRPCCredentialsTLS:
    ca, cert, key = files.read()
    return fy.GRPCCredentialsTLS(cacert=ca, cert=cert, private_key=key)


def _options(files: tls.TlsFiles, election_id: int = 10) -> fy.SwitchOptions:
    return fy.SwitchOptions(
        p4info=DEFAULT_P4INFO,
        p4blob=b"opaque-device-config",  # finsy pushes the pipeline only with one
        device_id=DEVICE_ID,
        initial_election_id=election_id,
        channel_credentials=_credentials(files),
    )


async def _arbitrate(stub: Any, election_id: int) -> Any:
    stream = stub.StreamChannel()
    await stream.write(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(
                device_id=DEVICE_ID, election_id=U128.encode(election_id)
            )
        )
    )
    return stream


def _write(election_id: int, update: p4r.Update) -> p4r.WriteRequest:
    return p4r.WriteRequest(
        device_id=DEVICE_ID,
        election_id=U128.encode(election_id),
        updates=[update],
        atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
    )


async def _arbitrate_and_read(stub: Any, election_id: int) -> Any:
    stream = await _arbitrate(stub, election_id)
    return await asyncio.wait_for(stream.read(), 5)


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


async def test_the_agent_programs_its_switch_over_mutual_tls(address: str) -> None:
    """The agent's P4Runtime side (P4Target, finsy underneath) with the switch's own
    certificate: primary, pipeline pushed, a route written and read back."""
    codec = Codec(load_p4info(DEFAULT_P4INFO))
    target = P4Target(address, DEVICE_ID, 10, codec, tls=test_pki.switch(SWITCH))
    primary = asyncio.Event()

    async def on_primary() -> None:
        primary.set()

    async def nothing(*_: object) -> None:
        return None

    task = asyncio.create_task(target.run(on_primary, nothing), name="tls-agent")
    try:
        async with asyncio.timeout(10):
            await primary.wait()
        assert target.primary_election_id == 10
        assert await target.ensure_pipeline()
        entry = RouteEntry(0x0A000000, 8, 1)
        assert await target.write([codec.encode_update(Update(Op.INSERT, entry))]) == []
        pipeline, _ = await target.read_pipeline()
        assert pipeline.entries[entry.key] == entry
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_another_switch_or_a_reader_cannot_arbitrate_or_write(address: str) -> None:
    async with fy.Switch("own", address, _options(test_pki.switch(SWITCH))) as sw:
        assert sw.is_primary
        update = (+route("10.0.0.0/8", 1)).encode_update(sw.p4info)
        for files in (test_pki.switch("tor-tls-2"), test_pki.reader(), test_pki.operator()):
            async with _own(files, address) as channel:
                stub: Any = p4r_grpc.P4RuntimeStub(channel)
                who = files.identity()
                err = await _refused(stub.Write(_write(10, update)))
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, who
                assert f"the peer is {who}" in (err.details() or "")
                assert f"switch/{SWITCH}" in (err.details() or "")
                # Would outbid the agent. The refusal may end the stream before the write is
                # sent or after: either way it is what the call ends with.
                err = await _refused(_arbitrate_and_read(stub, 20))
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, who
                err = await _refused(
                    stub.SetForwardingPipelineConfig(
                        p4r.SetForwardingPipelineConfigRequest(
                            device_id=DEVICE_ID,
                            election_id=U128.encode(10),
                            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                            config=p4r.ForwardingPipelineConfig(p4info=load_p4info(DEFAULT_P4INFO)),
                        )
                    )
                )
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, who
        assert sw.is_primary
        await sw.write([+route("10.0.0.0/8", 1)])


async def test_operators_and_readers_read_and_other_switches_do_not(address: str) -> None:
    async with fy.Switch("own", address, _options(test_pki.switch(SWITCH))) as sw:
        await sw.write([+route("10.0.0.0/8", 1)])
        read = p4r.ReadRequest(
            device_id=DEVICE_ID, entities=[p4r.Entity(table_entry=p4r.TableEntry())]
        )
        G = p4r.GetForwardingPipelineConfigRequest
        for files in (test_pki.operator(), test_pki.reader()):
            async with _own(files, address) as channel:
                stub: Any = p4r_grpc.P4RuntimeStub(channel)
                found = [e async for reply in stub.Read(read) for e in reply.entities]
                assert len(found) >= 1
                got = await stub.GetForwardingPipelineConfig(
                    G(device_id=DEVICE_ID, response_type=G.COOKIE_ONLY)
                )
                assert got.config.HasField("cookie")
                caps = await stub.Capabilities(p4r.CapabilitiesRequest())
                assert caps.p4runtime_api_version
        async with _own(test_pki.switch("tor-tls-2"), address) as channel:
            stub = p4r_grpc.P4RuntimeStub(channel)
            err = await _refused(stub.Read(read).read())
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        # Health is for any certificate of the fabric (the controller's too).
        async with _own(test_pki.controller(), address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            err = await _refused(p4r_grpc.P4RuntimeStub(channel).Read(read).read())
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_no_certificate_of_the_fabric_no_connection(address: str, tmp_path: Path) -> None:
    caps = p4r.CapabilitiesRequest()
    async with grpc.aio.insecure_channel(address) as channel:  # plaintext
        err = await _refused(p4r_grpc.P4RuntimeStub(channel).Capabilities(caps, timeout=5))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
    ca = test_pki.ca_dir() / pki.CA_CERT
    no_cert = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    async with grpc.aio.secure_channel(address, no_cert) as channel:  # TLS, no client cert
        err = await _refused(p4r_grpc.P4RuntimeStub(channel).Capabilities(caps, timeout=5))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
    # A switch certificate of another CA (the right name, the wrong fabric).
    pki.init_ca(tmp_path)
    issued = pki.issue(tmp_path, Identity(Kind.SWITCH, SWITCH), test_pki.HOSTS)
    foreign = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=issued.key.read_bytes(),
        certificate_chain=issued.cert.read_bytes(),
    )
    async with grpc.aio.secure_channel(address, foreign) as channel:
        err = await _refused(p4r_grpc.P4RuntimeStub(channel).Capabilities(caps, timeout=5))
        assert err.code() == grpc.StatusCode.UNAVAILABLE


async def test_the_primary_is_its_connection_under_tls_too(address: str) -> None:
    """The same switch identity on a second connection (a copy of the agent, or a tool with
    the switch's key) carrying the primary's election id is refused."""
    own = test_pki.switch(SWITCH)
    async with fy.Switch("own", address, _options(own)) as sw:
        update = (+route("10.0.0.0/8", 1)).encode_update(sw.p4info)
        async with _own(own, address) as channel:
            err = await _refused(p4r_grpc.P4RuntimeStub(channel).Write(_write(10, update)))
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "not over the connection of the primary's StreamChannel" in (err.details() or "")
            assert f"switch/{SWITCH}" in (err.details() or "")
        await sw.write([+route("10.0.0.0/8", 1)])


# ---- the daemon ------------------------------------------------------------------------------


def _served_certificate(port: int, client: tls.TlsFiles) -> x509.Certificate:
    """The certificate the server presents in a new handshake."""
    context = ssl.create_default_context(cafile=str(client.ca))
    context.load_cert_chain(str(client.cert), str(client.key))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_the_daemon_serves_tls_and_reloads_its_certificate_on_sighup(
    processes: Processes, free_port: Callable[[], int], tmp_path: Path
) -> None:
    # A CA of its own: the rotation below must not touch the shared test PKI.
    pki.init_ca(tmp_path)
    name = Identity(Kind.SWITCH, "tor-tls-reload")
    issued = pki.issue(tmp_path, name, test_pki.HOSTS)
    mine = tls.TlsFiles(tmp_path / pki.CA_CERT, issued.cert, issued.key)
    by_reader = pki.issue(tmp_path, Identity(Kind.READER, "bob"))
    reader = tls.TlsFiles(tmp_path / pki.CA_CERT, by_reader.cert, by_reader.key)
    port = free_port()
    log = tmp_path / "softswitch.log"
    proc = processes.start(
        [str(BIN / "railfabric-softswitch"), "--device-id", "1",
         "--grpc-addr", f"127.0.0.1:{port}", *test_pki.flags(mine)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            before = _served_certificate(port, reader)
            break
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    assert (
        before.serial_number == x509.load_pem_x509_certificate(mine.cert.read_bytes()).serial_number
    )
    # Rotate: a new certificate and key for the same identity, then SIGHUP.
    pki.issue(tmp_path, name, test_pki.HOSTS, force=True)
    new_serial = x509.load_pem_x509_certificate(mine.cert.read_bytes()).serial_number
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while _served_certificate(port, reader).serial_number != new_serial:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    # A reload that finds bad files keeps serving the ones it has.
    mine.key.write_bytes(b"not a key")
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS reload refused" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    assert proc.poll() is None
    assert _served_certificate(port, reader).serial_number == new_serial
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, log.read_text()
