"""The controller under mutual TLS, as an attacker on the same host would try it: a session
that says Hello for a switch its certificate does not name, an admin client with a switch's
certificate, a plaintext client, a certificate from another CA. Each is refused with the
right status code and logged, and the fabric is unchanged. Plaintext must be asked for
(--insecure), and is then said at start, in /metrics and by diagnose."""

from __future__ import annotations

import asyncio
import http.client
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_reflection.v1alpha import reflection_pb2_grpc

from controller.daemon.main import access_rules
from mininet_labs.processes import free_port as _free_port
from railfabric import pki as railpki
from railfabric import tls
from railfabric.grpcopts import channel_options
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, control_pb2_grpc
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB, Agent, start
from tests.integration.refusal_race import (
    NotReached,
    first_write_after_refusal,
    server_in_thread,
)

pytestmark = pytest.mark.integration


async def _tls_controller(
    processes: Processes, tmp_path: Path, *extra: str
) -> tuple[str, subprocess.Popen[bytes], Path]:
    log = tmp_path / "controller.log"
    port = _free_port()
    proc = processes.start(
        [
            CONTROLLER,
            "--fabric",
            str(LAB),
            "--listen",
            f"127.0.0.1:{port}",
            "--state-dir",
            str(tmp_path / "state"),
            *pki.controller_flags(),
            *extra,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return await start(processes, port, tmp_path, launch=False), proc, log


async def _switches(address: str) -> dict[str, admin_pb2.SwitchStatus]:
    async with pki.channel(address) as channel:
        reply = await admin_pb2_grpc.FabricAdminStub(channel).ListSwitches(
            admin_pb2.ListSwitchesRequest(), timeout=10
        )
    return {s.info.name: s for s in reply.switches}


async def test_a_switch_certificate_cannot_say_hello_as_another_switch(
    processes: Processes, tmp_path: Path
) -> None:
    address, _, log = await _tls_controller(processes, tmp_path)
    async with pki.channel(address, pki.switch("tor-r1-b1")) as channel:
        impostor = Agent(channel)
        await impostor.send(hello=control_pb2.Hello(switch_name="tor-r2-b1"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await impostor.read()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "switch/tor-r1-b1" in (refused.value.details() or "")
    assert "tor-r2-b1" in (refused.value.details() or "")
    assert not (await _switches(address))["tor-r2-b1"].connected
    assert "said hello as 'tor-r2-b1'" in log.read_text()

    # The switch its certificate names is served: its state, nothing of another switch's.
    async with pki.channel(address, pki.switch("tor-r1-b1")) as channel:
        agent = Agent(channel)
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r1-b1"))
        msg = await agent.read()
        assert msg.WhichOneof("msg") == "desired_state"
        assert msg.desired_state.switch_name == "tor-r1-b1"
        # A mid-session Hello for another switch is ignored, not obeyed.
        await agent.send(hello=control_pb2.Hello(switch_name="tor-r2-b1"))
        await asyncio.sleep(0.5)
        switches = await _switches(address)
        assert switches["tor-r1-b1"].connected
        assert not switches["tor-r2-b1"].connected


@pytest.mark.parametrize("who", ["reader", "operator"])
async def test_readers_and_operators_read_the_admin_api(
    processes: Processes, tmp_path: Path, who: str
) -> None:
    address, _, _ = await _tls_controller(processes, tmp_path)
    identity = pki.reader() if who == "reader" else pki.operator()
    async with pki.channel(address, identity) as channel:
        reply = await admin_pb2_grpc.FabricAdminStub(channel).ListSwitches(
            admin_pb2.ListSwitchesRequest(), timeout=10
        )
    assert len(reply.switches) == 6


async def test_a_switch_certificate_cannot_use_the_admin_api_or_reflection(
    processes: Processes, tmp_path: Path
) -> None:
    address, _, log = await _tls_controller(processes, tmp_path)
    async with pki.channel(address, pki.switch("tor-r1-b1")) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin_pb2_grpc.FabricAdminStub(channel).ListSwitches(
                admin_pb2.ListSwitchesRequest(), timeout=10
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "is for operator or reader; the peer is switch/tor-r1-b1" in (
            refused.value.details() or ""
        )
        # The status, not the send: a request written while the server refuses the stream
        # can fail on its own ("Internal error from Core", seen in CI on a loaded machine).
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo(timeout=10)
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "refused /railfabric.v1.FabricAdmin/ListSwitches" in log.read_text()


async def test_an_operator_certificate_cannot_open_a_switch_session(
    processes: Processes, tmp_path: Path
) -> None:
    address, _, _ = await _tls_controller(processes, tmp_path)
    async with pki.channel(address, pki.operator()) as channel:
        # The guard reads the Hello before refusing, so its write cannot turn the status
        # into INTERNAL (test_a_role_refusal_reaches_the_client_as_sent).
        call = control_pb2_grpc.FabricControlStub(channel).Session(None, timeout=10)
        await call.write(control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="tor-r1-b1")))
        assert await call.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "the peer is operator/" in (await call.details() or "")
    assert not (await _switches(address))["tor-r1-b1"].connected


async def test_a_role_refusal_reaches_the_client_as_sent(free_port: Callable[[], int]) -> None:
    """The role guard refusing a session whose hello is not yet written: without waiting for
    it (railfabric.refusal) the client would see INTERNAL "Internal error from Core"."""
    port = free_port()

    async def start_guarded() -> grpc.aio.Server:
        server = grpc.aio.server(interceptors=[tls.RoleGuard(access_rules(), insecure=False)])
        control_pb2_grpc.add_FabricControlServicer_to_server(NotReached(), server)
        tls.add_port(server, f"127.0.0.1:{port}", tls.ServerTls(pki.controller()))
        await server.start()
        return server

    with server_in_thread(start_guarded):
        async with pki.channel(f"127.0.0.1:{port}", pki.operator()) as channel:
            refused = await first_write_after_refusal(
                control_pb2_grpc.FabricControlStub(channel).Session(None),
                control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="tor-r1-b1")),
            )
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED, refused
    assert "the peer is operator/" in (refused.details() or "")


async def test_plaintext_and_foreign_ca_clients_do_not_get_past_the_handshake(
    processes: Processes, tmp_path: Path
) -> None:
    address, _, _ = await _tls_controller(processes, tmp_path)
    async with grpc.aio.insecure_channel(address) as plain:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin_pb2_grpc.FabricAdminStub(plain).ListSwitches(
                admin_pb2.ListSwitchesRequest(), timeout=5
            )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    # A certificate as good as ours, from a CA the controller does not trust.
    other = tmp_path / "other-ca"
    railpki.init_ca(other)
    issued = railpki.issue(other, tls.Identity(tls.Kind.OPERATOR, "mallory"))
    # It trusts the real CA (to check the controller) but presents the foreign certificate.
    foreign = tls.TlsFiles(pki.controller().ca, issued.cert, issued.key)
    async with tls.aio_channel(address, foreign, channel_options()) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin_pb2_grpc.FabricAdminStub(channel).ListSwitches(
                admin_pb2.ListSwitchesRequest(), timeout=5
            )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ([], "TLS needs --tls-ca, --tls-cert, --tls-key"),
        (["--tls-ca", "/nonexistent/ca.crt"], "TLS needs --tls-cert, --tls-key"),
        (["--insecure", "--tls-ca", "/x"], "--insecure and --tls-ca contradict each other"),
        (pki.flags(pki.switch("tor-r1-b1")), "the controller needs a controller certificate"),
    ],
)
def test_the_controller_will_not_start_without_usable_tls(flags: list[str], words: str) -> None:
    done = subprocess.run(
        [CONTROLLER, "--fabric", str(LAB), "--listen", "127.0.0.1:0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert words in done.stderr


def test_a_key_that_is_not_the_certificates_is_refused_at_start(tmp_path: Path) -> None:
    mine = pki.controller()
    other = pki.operator()
    done = subprocess.run(
        [
            CONTROLLER,
            "--fabric",
            str(LAB),
            "--listen",
            "127.0.0.1:0",
            *pki.flags(tls.TlsFiles(mine.ca, mine.cert, other.key)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"--tls-key {other.key} is not the key of --tls-cert {mine.cert}" in done.stderr


async def test_insecure_is_asked_for_and_then_said_everywhere(
    processes: Processes, tmp_path: Path
) -> None:
    port, metrics_port = _free_port(), _free_port()
    log = tmp_path / "controller.log"
    processes.start(
        [
            CONTROLLER,
            "--fabric",
            str(LAB),
            "--listen",
            f"127.0.0.1:{port}",
            "--insecure",
            "--metrics",
            f"127.0.0.1:{metrics_port}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    address = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(address) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        deadline = time.monotonic() + 30
        while True:
            try:
                found = await admin.Diagnose(admin_pb2.DiagnoseRequest(), timeout=2)
                break
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    assert [f.severity for f in found.findings if f.kind == "insecure"] == [
        admin_pb2.SEVERITY_WARNING
    ]
    assert "runs in PLAINTEXT (--insecure)" in log.read_text()
    page = await asyncio.to_thread(_get, f"http://127.0.0.1:{metrics_port}/metrics")
    assert "railfabric_insecure 1.0" in page


def _served_certificate(address: str, client: tls.TlsFiles) -> x509.Certificate:
    """The certificate a new TLS handshake with `address` is shown."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(client.ca))
    context.load_cert_chain(str(client.cert), str(client.key))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def test_sighup_rotates_the_certificate_and_refuses_bad_files(
    processes: Processes, tmp_path: Path
) -> None:
    # The controller's own copy of its files, which the test rotates under it.
    mine = tmp_path / "tls"
    railpki_dir = pki.ca_dir()
    mine.mkdir()
    # A controller identity of its own, so the shared test certificate is left alone.
    identity = tls.Identity(tls.Kind.CONTROLLER, "rotated")
    issued = railpki.issue(railpki_dir, identity, ["127.0.0.1"], force=True)
    cert, key = mine / "c.crt", mine / "c.key"
    cert.write_bytes(issued.cert.read_bytes())
    key.write_bytes(issued.key.read_bytes())
    address, proc, log = await _tls_controller(
        processes, tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)
    )
    before = _served_certificate(address, pki.operator())
    assert before.serial_number == x509.load_pem_x509_certificate(cert.read_bytes()).serial_number

    key.write_text("not a key\n")
    proc.send_signal(signal.SIGHUP)
    await _logged(log, "TLS reload refused, keeping the certificates in use")
    assert _served_certificate(address, pki.operator()).serial_number == before.serial_number

    rotated = railpki.issue(railpki_dir, identity, ["127.0.0.1"], force=True)
    key.write_bytes(rotated.key.read_bytes())
    cert.write_bytes(rotated.cert.read_bytes())
    proc.send_signal(signal.SIGHUP)
    await _logged(log, "TLS: certificates reloaded")
    after = _served_certificate(address, pki.operator())
    assert after.serial_number != before.serial_number
    assert after.serial_number == x509.load_pem_x509_certificate(cert.read_bytes()).serial_number
    assert len(await _switches(address)) == 6  # and it still serves


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as page:
        return str(page.read().decode())


async def _logged(log: Path, words: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while words not in (text := await asyncio.to_thread(log.read_text)):
        assert time.monotonic() < deadline, f"{words!r} not logged:\n{text}"
        await asyncio.sleep(0.1)


def _https_get(url: str, client: tls.TlsFiles | None, ca: Path) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    with urllib.request.urlopen(url, timeout=10, context=context) as page:
        return str(page.read().decode())


async def test_metrics_over_https_for_scrapers_with_a_certificate(
    processes: Processes, tmp_path: Path
) -> None:
    metrics_port = _free_port()
    await _tls_controller(
        processes, tmp_path, "--metrics", f"127.0.0.1:{metrics_port}", "--metrics-tls"
    )
    url = f"https://127.0.0.1:{metrics_port}/metrics"
    ca = pki.controller().ca
    text = await asyncio.to_thread(_https_get, url, pki.reader(), ca)
    assert "railfabric_insecure 0.0" in text
    # No client certificate: the handshake fails; plain HTTP gets no answer either.
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(_https_get, url, None, ca)
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        await asyncio.to_thread(_get, f"http://127.0.0.1:{metrics_port}/metrics")


def test_metrics_tls_cannot_go_with_insecure() -> None:
    done = subprocess.run(
        [CONTROLLER, "--fabric", str(LAB), "--listen", "127.0.0.1:0", "--insecure",
         "--metrics", "127.0.0.1:0", "--metrics-tls"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--metrics-tls needs the daemon's TLS files" in done.stderr
