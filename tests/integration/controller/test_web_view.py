"""The controller's web view (--http) as a real daemon serves it: the JSON the page reads, from
the same state as the admin API; a cut pushed to an open page's event stream; nothing but GET;
HTTPS that refuses a client without a certificate of the fabric's CA, and serves only readers
and operators (--http-tls); and a bad
--http address that stops the start before anything is served."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mininet_labs.processes import free_port
from railfabric import tls
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import (
    CONTROLLER,
    LAB,
    connect_every_switch,
    start,
)

pytestmark = pytest.mark.integration

CUT = "tor-r1-b1:3--spine-p1-1:1"


async def _web_controller(
    processes: Processes, tmp_path: Path, *extra: str
) -> tuple[str, str, subprocess.Popen[bytes], Path]:
    """A controller (mutual TLS on gRPC) with --http on a free port: (gRPC address, web
    address, process, log)."""
    port, web_port = free_port(), free_port()
    log = tmp_path / "controller.log"
    web = f"127.0.0.1:{web_port}"
    proc = processes.start(
        [
            CONTROLLER, "--fabric", str(LAB), "--listen", f"127.0.0.1:{port}",
            "--state-dir", str(tmp_path / "state"), "--hold-down-s", "0.2",
            *pki.controller_flags(), "--http", web, *extra,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    return await start(processes, port, tmp_path, launch=False), web, proc, log


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """Server-Sent Events as (event, data) pairs."""
    kind, data = "message", ""
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data += line.removeprefix("data: ")
        elif not line and data:
            yield kind, json.loads(data)
            kind, data = "message", ""


async def test_the_page_reads_the_admin_state_and_a_cut_is_pushed_to_it(
    processes: Processes, tmp_path: Path
) -> None:
    addr, web, _, _ = await _web_controller(processes, tmp_path)
    base = f"http://{web}"
    async with (
        pki.channel(addr) as channel,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
    ):
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agents = await connect_every_switch(addr, admin)
        async with http.get(f"{base}/") as page:
            assert page.status == 200
            html = await page.text()
            # The browser itself holds the page to this server's files.
            assert page.headers["Content-Security-Policy"].startswith("default-src 'self';")
        assert "/static/app.js" in html and "not measured yet" in html
        # Nothing of the page comes from elsewhere: every script and style is ours.
        refs = re.findall(r'(?:src|href)="([^"]*)"', html)
        assert refs and all(ref.startswith(("/", "#", "data:")) for ref in refs), refs
        async with http.get(f"{base}/static/app.js") as script:
            assert script.status == 200 and "EventSource" in await script.text()

        async with http.get(f"{base}/api/fabric") as reply:
            summary = await reply.json()
        assert summary["fabric"] == "lab-2rail"
        assert summary["links_by_state"]["up"] == 8 and summary["sessions"] == 6
        assert summary["telemetry"]["latency_heatmap"] == {
            "status": "not measured yet",
            "data": None,
        }
        async with http.get(f"{base}/api/view") as reply:
            view = await reply.json()
        listed = await admin.ListLinks(admin_pb2.ListLinksRequest())
        assert [x["key"] for x in view["links"]] == [
            f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}" for x in listed.links
        ]
        assert {s["name"]: s["role"] for s in view["switches"]}["spine-p1-2"] == "spine"

        async with http.get(f"{base}/api/live") as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            events = _events(stream)
            assert (await anext(events))[0] == "hello"
            tor = agents["tor-r1-b1"]
            await tor.send(
                port_status=control_pb2.PortStatus(port=3, up=False, wall_ns=time.time_ns())
            )

            async def cut_link() -> dict[str, Any]:
                async for kind, data in events:
                    if kind == "link" and data["key"] == CUT and data["state"] == "down":
                        return dict(data)
                raise AssertionError("the stream ended")

            link = await asyncio.wait_for(cut_link(), 10)
        assert link["reason"] and not link["drained"]
        down = await admin.ListLinks(admin_pb2.ListLinksRequest(only_down=True))
        assert [(x.a.switch_name, x.a.port, x.state) for x in down.links] == [
            ("tor-r1-b1", 3, admin_pb2.LINK_STATE_DOWN)
        ]

        async with http.get(f"{base}/api/switches/tor-r1-b1") as reply:
            switch = await reply.json()
        ports = {i["port"]: i for i in switch["interfaces"]}
        assert ports[3]["oper"] == "OPER_STATE_DOWN" and ports[4]["oper"] == "OPER_STATE_UP"
        assert switch["status"]["connected"] is True
        assert {x["key"]: x["state"] for x in switch["links"]}[CUT] == "down"
        async with http.get(f"{base}/api/switches/tor-r9-b1") as reply:
            assert reply.status == 404
            assert "unknown switch 'tor-r9-b1'" in (await reply.json())["error"]
        async with http.get(f"{base}/api/view?rail=7") as reply:
            assert reply.status == 400
            assert (await reply.json())["error"].startswith("rail: 7 is not a rail")
        # Read-only: no method but GET (and HEAD) is served, anywhere.
        for method in ("POST", "PUT", "DELETE"):
            async with http.request(method, f"{base}/api/fabric") as reply:
                assert reply.status == 405
        for agent in agents.values():
            await agent.close()


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10, context=context) as reply:
        return reply.status, reply.read().decode()


def _client_context(client: tls.TlsFiles | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.controller().ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


async def test_http_tls_serves_only_clients_with_a_certificate_of_the_fabric_ca(
    processes: Processes, tmp_path: Path
) -> None:
    _, web, _, log = await _web_controller(processes, tmp_path, "--http-tls")
    url = f"https://{web}/api/fabric"
    status, body = await asyncio.to_thread(_get, url, _client_context(pki.reader()))
    assert status == 200 and json.loads(body)["fabric"] == "lab-2rail"
    # A switch's certificate is of the CA, but the fabric is for readers and operators.
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(_get, url, _client_context(pki.switch("tor-r1-b1")))
    assert refused.value.code == 403
    assert "the web view is for operator or reader; the peer is switch/tor-r1-b1" in (
        refused.value.read().decode()
    )
    # No client certificate: no answer (the handshake is refused); nor in plaintext.
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(_get, url, _client_context(None))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        await asyncio.to_thread(_get, f"http://{web}/api/fabric")
    assert "web view on https://" in log.read_text()


def _refused(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CONTROLLER, "--fabric", str(LAB), "--listen", f"127.0.0.1:{free_port()}",
         "--store", "memory:", *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_an_http_address_in_use_stops_the_start_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _refused(*pki.controller_flags(), "--http", f"127.0.0.1:{port}")
    assert done.returncode == 1, done.stderr
    assert f"railfabric-controller: --http 127.0.0.1:{port}: address in use" in done.stderr
    assert "serving fabric" not in done.stderr  # nothing was served


@pytest.mark.parametrize(
    ("flags", "code", "words"),
    [
        (["--http", "localhost"], 2, "argument --http: 'localhost' is not HOST:PORT"),
        # An address of no interface here (TEST-NET-1): binding it fails, and nothing is sent.
        (["--http", "192.0.2.1:8080"], 1, "--http 192.0.2.1:8080: Cannot assign requested address"),
        (["--insecure", "--http", "127.0.0.1:0", "--http-tls"], 2,
         "--http-tls needs the daemon's TLS files; it cannot go with --insecure"),
    ],
)  # fmt: skip
def test_a_bad_http_flag_is_refused(flags: list[str], code: int, words: str) -> None:
    if "--insecure" not in flags:
        flags = [*pki.controller_flags(), *flags]
    done = _refused(*flags)
    assert done.returncode == code, done.stderr
    assert words in done.stderr
